"""Known findings, acknowledged once (issue 46 item 1): the ledger's format, what it covers, and every output.

On stored sessions, real SQLite: the committed H200 nightly (examples/h200-nightly/nightly-tiny.db.gz, vLLM
0.26.0 for CUDA), whose finish and mixed_batch FAILs are the engine's ids-past-stop bug (docs/engines.md),
and the three-engine session (examples/h200-engines), whose SGLang arm crashed and whose llama.cpp arm is
slower. An entry that covers a FAIL turns it KNOWN and the exit code to 0; the same entry with another
engine version, another arm, an expiry before the session, another reason, platform or level covers nothing
(the negative controls); an entry that applies but matched nothing is a NOTE; a malformed ledger is one line.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.judge.ledger_match import apply_ledger
from observatory.judge.reasons import group_reasons, verdict_lines
from observatory.judge.verdict import EXIT
from observatory.model.ledger import BUILTIN_FILE, Ledger, builtin, load_file, parse_entries
from observatory.model.paths import REPO_ROOT
from observatory.model.read_model import Reason, SessionVerdict
from observatory.report.data import build
from observatory.report.junit import junit_xml
from observatory.report.openmetrics import openmetrics_text
from observatory.store.session_store import Store
from tests.support.paths import example_db

STOP = "vllm-cuda-ids-past-stop"
ENTRY = {"id": "ids-past-stop", "title": "ids past a stop string", "link": "https://example.org/bug/1",
         "engine": "vllm", "versions": "==0.26.0", "platform": "cuda", "checks": ["finish"], "arms": ["mtp1"],
         "reason": "stop_str"}


@pytest.fixture(scope="module")
def tiny_gz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The H200 nightly as it was judged before any ledger: the example is stored re-judged with the built-in
    ledger (scripts/regen-examples.sh), so it is judged once more without it and stored without one."""
    import sqlite3

    db = example_db("h200-nightly/nightly-tiny.db", tmp_path_factory.mktemp("known") / "tiny.db")
    r = CliRunner().invoke(cli, ["judge", "--db", str(db), "--no-builtin-known"])
    assert r.exit_code == 0 and "-> FAIL" in r.output, r.output
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM known_ledgers")
    return db


@pytest.fixture
def tiny(tiny_gz: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh copy of the nightly; the working directory has no default ledger."""
    monkeypatch.chdir(tmp_path)
    return Path(shutil.copy(tiny_gz, tmp_path / "tiny.db"))


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args))


def _show(db: Path) -> dict[str, Any]:
    r = _invoke("show", "--db", str(db), "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.output)  # type: ignore[no-any-return]


def _channel(data: dict[str, Any], arm: str, gate: str) -> dict[str, Any]:
    return next(a for a in data["arms"] if a["name"] == arm)["channel_verdicts"][gate]  # type: ignore[no-any-return]


def _ledger(path: Path, *entries: dict[str, Any], extra: str = "") -> Path:
    path.write_text(extra + "".join(parse_entries({"known": [e]}, "t")[0].to_toml() + "\n" for e in entries))
    return path


def test_builtin_ledger_reads_the_nightly_engine_bug_known_everywhere(tiny: Path, tmp_path: Path) -> None:
    """`observatory judge` of the stored nightly with the built-in ledger: its four ids-past-stop FAILs are
    KNOWN in the read model, JUnit, OpenMetrics and the report; the exit code no longer FAILs; the ledger is
    stored, so a plain re-judge keeps it; --no-builtin-known brings the FAILs back (the control)."""
    r = _invoke("judge", "--db", str(tiny))  # stored judged without a ledger (the fixture); the control is below
    assert r.exit_code == 0, r.output
    assert "verdict: " in r.output and f"KNOWN {STOP}: mtp1: channel finish" in r.output
    data = _show(tiny)
    assert data["verdict"]["verdict"] == "WARN" and data["verdict"]["exit_code"] == 0
    known = [x for x in data["verdict"]["reasons"] if x["level"] == "KNOWN"]
    assert {(x["arm"], x["gate"]) for x in known if x["known"]["id"] == STOP} == {
        (a, g) for a in ("mtp1", "mtp2") for g in ("finish", "mixed_batch")}
    assert all(x["known"]["link"] == "https://github.com/vllm-project/vllm/pull/47616" for x in known
               if x["known"]["id"] == STOP)
    finish = _channel(data, "mtp1", "finish")
    assert finish["verdict"] == "KNOWN" and finish["details"]["verdict_before"] == "FAIL"
    assert finish["details"]["known"]["id"] == STOP and "stop_str" in finish["reason"]  # the original kept
    assert not [x for x in data["verdict"]["reasons"] if x["level"] == "FAIL"]
    stored = [e["id"] for e in data["session"]["known"]]  # the ledger in effect, stored with the session
    assert STOP in stored and set(stored) <= {e.id for e in builtin()}, stored
    with Store(str(tiny)) as store:
        view = build(store, 1)
    xml = ET.fromstring(junit_xml(view))
    case = next(c for c in xml.iter("testcase") if c.get("classname") == "channel.finish" and c.get("name") == "mtp1")
    skipped = case.find("skipped")
    assert skipped is not None and skipped.get("message", "").startswith(f"KNOWN {STOP}: ")
    assert case.find("failure") is None
    metrics = openmetrics_text(view)
    assert 'observatory_known_findings{arm="mtp1",known="vllm-cuda-ids-past-stop",model=' in metrics
    report = tmp_path / "report"
    assert _invoke("report", "--db", str(tiny), "--out", str(report)).exit_code == 0
    page = (report / "index.html").read_text()
    assert "known findings, covered by the ledger: shown, not counted" in page
    assert 'href="https://github.com/vllm-project/vllm/pull/47616"' in page
    # re-judged with nothing given: the stored ledger again, no file needed
    again = _invoke("judge", "--db", str(tiny))
    assert "verdict: WARN (unchanged)" in again.output
    off = _invoke("judge", "--db", str(tiny), "--no-builtin-known")
    assert "verdict: WARN -> FAIL" in off.output, off.output
    assert _show(tiny)["verdict"]["exit_code"] == 1
    assert _channel(_show(tiny), "mtp1", "finish")["verdict"] == "FAIL"


@pytest.mark.parametrize(("change", "covered"), [
    ({}, {"mtp1"}),
    ({"versions": "==0.25.0"}, set()),
    ({"versions": ["0.26.1"]}, set()),
    ({"arms": ["mtp2"]}, {"mtp2"}),
    ({"arms": ["spec", "!mtp1"]}, {"mtp2"}),
    ({"expires": "2026-12-01"}, set()),  # the session started 2026-12-01 03:11: expired that day
    ({"reason": "no such phrase"}, set()),
    ({"platform": "cpu"}, set()),
    ({"levels": ["WARN"]}, set()),
    ({"engine": "sglang"}, set()),
    ({"probes": ["count-*"]}, set()),  # a probe glob covers verdicts about probes only
    ({"expires": "2026-12-02", "arms": ["spec"], "reason": "STOP_STR"}, {"mtp1", "mtp2"}),  # a role, any case
], ids=["covers", "other-version", "other-exact-version", "other-arm", "left-out", "expired", "other-reason",
        "other-platform", "other-level", "other-engine", "probe-glob", "role-and-case"])
def test_an_entry_covers_exactly_what_it_names(tiny: Path, change: dict[str, Any], covered: set[str]) -> None:
    """The entry covers mtp1's finish FAIL (ids past a stop string); each change is a negative control."""
    entry = {**ENTRY, **change}
    with Store(str(tiny), write=True) as store:
        counts = apply_ledger(store, 1, Ledger(tuple(parse_entries({"known": [entry]}, "t"))))
        view = build(store, 1)
    for arm in ("mtp1", "mtp2"):
        got = next(a for a in view.arms if a.name == arm).channel_verdicts
        assert got["finish"].verdict == ("KNOWN" if arm in covered else "FAIL"), arm
        assert got["mixed_batch"].verdict == "FAIL"  # another check: never covered
    assert sum(counts.values()) == len(covered)
    assert view.verdict.verdict == "FAIL"  # the uncovered FAILs still count


def test_an_entry_that_matched_nothing_is_a_note_and_an_expired_one_says_so(tiny: Path) -> None:
    """sampling PASSes on mtp1: an entry for it is "not seen tonight: fixed?"; an expired one is named; an entry
    for another engine says nothing."""
    ledger = Ledger(tuple(parse_entries({"known": [
        ENTRY, {**ENTRY, "id": "sampling-bug", "checks": ["sampling"], "reason": "x"},
        {**ENTRY, "id": "old-one", "checks": ["mixed_batch"], "expires": "2026-06-01"},
        {**ENTRY, "id": "other-engine", "engine": "sglang", "checks": ["sampling"]}]}, "t")))
    with Store(str(tiny), write=True) as store:  # as a command stores it, then the judge step applies it
        store.set_known(1, ledger.to_stored())
        apply_ledger(store, 1)
        view = build(store, 1)
    notes = {r.text: r for r in view.verdict.reasons if r.level == "NOTE"}
    seen = next(r for t, r in notes.items() if t.startswith("known finding sampling-bug not seen tonight: fixed?"))
    assert "checked on mtp1" in seen.text and seen.known is not None and seen.known["id"] == "sampling-bug"
    assert any(t.startswith("known finding old-one expired on 2026-06-01") for t in notes), notes
    assert not [t for t in notes if "other-engine" in t or "ids-past-stop" in t]
    assert "NOTE: known finding sampling-bug not seen tonight: fixed?" in "\n".join(verdict_lines(view.verdict,
                                                                                                 ("NOTE",)))


def test_validity_codes_and_performance_entries_are_covered_too(tmp_path: Path) -> None:
    """The committed H200 hybrid session (examples/h200): every arm answered blank (the arm gate `answers`
    INVALID, and the INVALID validity code the figures make from it) and the spec arms' speedup WARNs. An entry
    for `answers` covers mtp1's verdict and the code made from it; one naming the code INVALID covers mtp2's
    code alone; a speedup entry covers the performance entries; JUnit skips the covered validity case."""
    db = example_db("h200/h200-hybrid.db", tmp_path / "hybrid.db")
    blank = {"id": "hybrid-blank", "title": "a hybrid model answers blank", "reproduction": "examples/h200/README.md",
             "engine": "vllm", "versions": ["0.26.0"], "checks": ["answers"], "arms": ["mtp1"],
             "levels": ["INVALID"]}
    code = {**blank, "id": "hybrid-blank-code", "checks": ["INVALID"], "arms": ["mtp2"], "reason": "blank output"}
    slow = {**blank, "id": "hybrid-slow", "checks": ["speedup"], "arms": ["spec"], "levels": ["WARN"],
            "reason": "beyond the noise"}
    with Store(str(db), write=True) as store:
        counts = apply_ledger(store, 1, Ledger(tuple(parse_entries({"known": [blank, code, slow]}, "t"))))
        view = build(store, 1)
    assert counts == {"hybrid-blank": 2, "hybrid-blank-code": 1, "hybrid-slow": 2}
    arms = {a.name: a for a in view.arms}
    assert arms["mtp1"].arm_verdicts["answers"].verdict == "KNOWN"
    assert arms["mtp2"].arm_verdicts["answers"].verdict == "INVALID"  # its code is covered, not its verdict
    assert [(v.code, (v.known or {}).get("id")) for v in arms["mtp1"].validity] == [("INVALID", "hybrid-blank")]
    first = arms["mtp2"].validity[0]  # then ENGINE_CHOSEN, a note
    assert (first.code, (first.known or {}).get("id")) == ("INVALID", "hybrid-blank-code")
    assert [(v.code, v.known) for v in arms["base"].validity] == [("INVALID", None)]  # base: no entry names it
    perf = next(p for p in arms["mtp1"].figures.performance or [] if p["check"] == "speedup")
    assert perf["verdict"] == "KNOWN" and perf["verdict_before"] == "WARN" and perf["known"]["id"] == "hybrid-slow"
    known = {(r.arm, r.code or r.gate) for r in view.verdict.reasons if r.level == "KNOWN"}
    assert {("mtp1", "INVALID"), ("mtp2", "INVALID"), ("mtp1", "speedup"), ("mtp2", "speedup")} <= known
    assert view.verdict.verdict == "INVALID"  # base's blank answers still count
    cases = {c.get("classname"): c for c in ET.fromstring(junit_xml(view)).iter("testcase")
             if c.get("name") == "validity"}
    assert cases["arm.mtp1"].find("error") is None and cases["arm.mtp1"].find("skipped") is not None
    assert cases["arm.base"].find("error") is not None


@pytest.mark.parametrize(("text", "says"), [
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["finish"]\ncolour = 1\n',
     "entry 1 (id 'a'): unknown key 'colour'"),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["fin[ish"]\n',
     "entry 1 (id 'a'): checks: bad glob 'fin[ish'"),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["finish"]\n'
     'versions = ">>0.26"\n', "versions '>>0.26' is not a PEP 440 specifier"),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["finish"]\n' * 2,
     "entry 2: duplicate id 'a'"),
    ('[[known]]\nid = "a"\ntitle = "t"\nengine = "vllm"\nchecks = ["finish"]\n', "give a link, a reproduction"),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vlm"\nchecks = ["finish"]\n',
     "engine 'vlm' is not an engine's adapter name (known: "),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["CRASHED"]\n',
     'validity code CRASHED is INVALID: add "INVALID" to levels'),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["x"]\n'
     'levels = ["PASS"]\n', "levels 'PASS' cannot be covered"),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["x"]\n'
     'expires = 2027-01-01T00:00:00\n', "expires must be a date"),
    ('[[known]]\nid = "a b"\ntitle = "t"\nlink = "https://x.org"\nengine = "vllm"\nchecks = ["x"]\n',
     "id 'a b' must be letters"),
    ('[[known]]\nid = "a"\ntitle = "t"\nlink = "javascript:alert(1)"\nengine = "vllm"\nchecks = ["x"]\n',
     "must be an http(s) URL"),
    ('[known]\nid = "a"\n', "known must be an array of tables"),
    ('known_findings = []\n', "unknown top-level key 'known_findings'"),
    ('[[known]\n', "not valid TOML"),
], ids=["unknown-key", "bad-glob", "bad-specifier", "duplicate-id", "no-link", "unknown-engine", "code-level",
        "bad-level", "date-time", "bad-id", "not-http", "not-array", "top-level", "not-toml"])
def test_a_malformed_ledger_is_one_clear_line(tmp_path: Path, text: str, says: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    for args in (["known", "list", "--file", str(bad)], ["judge", "--known", str(bad)]):
        r = _invoke(*args)
        assert r.exit_code == 3, (args, r.output)
        line = r.output.strip()
        assert "\n" not in line and str(bad) in line and says in line, line


def test_the_builtin_ledger_loads_and_points_at_what_exists() -> None:
    """Every built-in entry names its reproduction; a script it names exists; every one is engine- and
    version-bound (a clean night on another version is not covered)."""
    entries = builtin()
    assert len(entries) >= 9 and len({e.id for e in entries}) == len(entries)
    assert all(e.versions for e in entries) and all(e.reproduction for e in entries)
    for e in entries:
        for word in (e.reproduction or "").split():
            if word.startswith("examples/") and word.endswith(".py"):
                assert (REPO_ROOT / word).is_file(), (e.id, word)
    assert load_file(BUILTIN_FILE) == [replace(e, source=str(BUILTIN_FILE)) for e in entries]


def test_docs_known_lists_every_builtin_entry() -> None:
    """docs/known.md's table of the built-in ledger names every entry (seven had gone missing by 2026-12-06)."""
    table = (REPO_ROOT / "docs" / "known.md").read_text(encoding="utf-8")
    missing = [e.id for e in builtin() if f"| `{e.id}` |" not in table]
    assert not missing, missing


def test_known_add_appends_a_checked_entry_and_keeps_the_file(tiny: Path, tmp_path: Path) -> None:
    """`known add` fills engine and version from the stored arm, appends after the file's own text, and refuses
    a duplicate id and an entry that covers nothing; the file then covers mtp1's FAIL, not mtp2's."""
    path = tmp_path / "observatory-known.toml"
    first = {**ENTRY, "id": "first", "checks": ["mixed_batch"], "arms": ["mtp2"], "reason": "stop=yes"}
    path.write_text("# ours: keep this comment\n\n" + parse_entries({"known": [first]}, "t")[0].to_toml())
    r = _invoke("known", "add", "1", "--db", str(tiny), "--check", "finish", "--arm", "mtp1", "--id", "stop-leak",
                "--title", "ids past a stop string", "--link", "https://github.com/vllm-project/vllm/pull/47616",
                "--reason", "stop_str", "--file", str(path))
    assert r.exit_code == 0, r.output
    assert "covers 1 finding(s) of session 1" in r.output
    text = path.read_text()
    assert text.startswith("# ours: keep this comment\n") and text.index('"first"') < text.index('"stop-leak"')
    added = load_file(path)[1]
    assert (added.engine, added.versions, added.arms, added.checks) == ("vllm", ("0.26.0",), ("mtp1",), ("finish",))
    again = _invoke("known", "add", "1", "--db", str(tiny), "--check", "finish", "--arm", "mtp1", "--id",
                    "stop-leak", "--title", "t", "--link", "https://x.org", "--file", str(path))
    assert again.exit_code == 3 and "duplicate id 'stop-leak'" in again.output
    nothing = _invoke("known", "add", "1", "--db", str(tiny), "--check", "sampling", "--arm", "mtp1", "--id", "n",
                      "--title", "t", "--link", "https://x.org", "--file", str(path))
    assert nothing.exit_code == 3 and "no arm has a" not in nothing.output and "covers nothing" in nothing.output
    assert path.read_text() == text  # refused: the file as it was
    # the default file of the working directory (tiny's fixture changed into tmp_path)
    listed = _invoke("known", "list")
    assert listed.output.startswith("first: ") and "stop-leak: ids past a stop string" in listed.output
    checked = _invoke("known", "check", "1", "--db", str(tiny), "--no-builtin-known")
    assert "KNOWN stop-leak: 1" in checked.output and "KNOWN first: 1" in checked.output
    r = _invoke("judge", "--db", str(tiny), "--no-builtin-known")  # ./observatory-known.toml, no built-ins
    data = _show(tiny)
    assert _channel(data, "mtp1", "finish")["verdict"] == _channel(data, "mtp2", "mixed_batch")["verdict"] == "KNOWN"
    assert _channel(data, "mtp2", "finish")["verdict"] == "FAIL" and data["verdict"]["verdict"] == "FAIL"
    # --gate is --check; without --title the entry is titled by the first finding it covers
    r = _invoke("known", "add", "1", "--db", str(tiny), "--gate", "finish", "--arm", "mtp2", "--id", "no-title",
                "--link", "https://x.org/2", "--file", str(path))
    assert r.exit_code == 0, r.output
    assert load_file(path)[-1].title.startswith("mtp2: finish: FAIL: 2 finish request(s) differ from base")


def test_an_arms_file_names_its_ledger(tmp_path: Path) -> None:
    from observatory.commands.known_cmd import ledger_for

    _ledger(tmp_path / "team.toml", ENTRY)
    arms = tmp_path / "arms.toml"
    arms.write_text('known = "team.toml"\n[arms.mine]\nspeculative_config = { method = "mtp", '
                    'num_speculative_tokens = 1 }\n')
    got = ledger_for({"arms_file": str(arms), "no_builtin_known": True})
    assert [e.id for e in got.entries] == ["ids-past-stop"]
    arms.write_text('known = 3\n')
    with pytest.raises(Exception, match="known must be a ledger file's path"):
        ledger_for({"arms_file": str(arms)})


def test_a_fault_arm_is_never_covered(tiny: Path) -> None:
    """An injected fault is the observatory's own negative control: no entry covers its arm."""
    with Store(str(tiny), write=True) as store:
        arm = next(a for a in store.arms(1) if a.name == "mtp1")
        store.update(type(arm), arm.id, launch={**arm.launch, "env": {"OBSERVATORY_FAULT": "ghost"}})
        counts = apply_ledger(store, 1, Ledger(tuple(parse_entries({"known": [ENTRY]}, "t"))))
    assert counts == {}


def _reasons(n: int, level: str = "NOTE", arm: str = "mtp1", gate: str = "token_diff") -> list[Reason]:
    return [Reason(level, f"{arm} / p{i}: {gate}: near-tie divergence at token {i}", arm=arm, probe=f"p{i}",
                   gate=gate) for i in range(n)]


def test_repeated_findings_of_one_cause_are_one_line_with_a_count() -> None:
    """Issue 46 item 5: ten near-tie NOTEs on mtp1 are one line; another arm, another gate, a probe-less reason
    stay apart; KNOWN lines name their entry; what counts comes first."""
    known = Reason("KNOWN", "mtp2: channel finish: differs", arm="mtp2", gate="finish", code="CHANNEL",
                   known={"id": STOP, "title": "t"})
    reasons = [Reason("WARN", "mtp1: speedup: slow", arm="mtp1", gate="speedup"), known, *_reasons(10),
               *_reasons(2, arm="mtp2"), *_reasons(1, gate="stream_tokens")]
    lines = [g.line() for g in group_reasons(reasons)]
    assert lines == [
        "WARN: mtp1: speedup: slow",
        f"KNOWN {STOP}: mtp2: channel finish: differs",
        "NOTE: mtp1: token_diff: 10 probes (p0, p1, p2 and 7 more); first, p0: near-tie divergence at token 0",
        "NOTE: mtp2: token_diff: 2 probes (p0, p1); first, p0: near-tie divergence at token 0",
        "NOTE: mtp1 / p0: stream_tokens: near-tie divergence at token 0",
    ]
    verdict = SessionVerdict("WARN", "why", tuple(reasons))
    assert verdict_lines(verdict) == ["WARN: mtp1: speedup: slow"]  # what counts, by default


def test_expiry_is_the_sessions_day_not_todays(tiny: Path) -> None:
    """A session judged again after an entry's expiry keeps the coverage it had on its own night."""
    entry = {**ENTRY, "expires": "2026-12-02"}
    with Store(str(tiny), write=True) as store:
        store.set_known(1, [parse_entries({"known": [entry]}, "t")[0].to_stored()])
        assert apply_ledger(store, 1) == {"ids-past-stop": 1}  # the stored ledger, on the session's own day


def test_a_gate_with_a_ledger_covers_its_fail_and_exits_0(tmp_path: Path) -> None:
    """End to end through `gate`: the ledger given with --known is stored with the session, covers the spec
    arm's token FAILs (KNOWN in JUnit, never a failure) and the gate exits 0; the same gate without it exits 1.
    STUB servers: a real engine cannot be made to answer another token on demand."""
    from tests.support.stub_server import StubServer
    from tests.support.stub_sessions import tiny_suite

    ledger = _ledger(tmp_path / "team.toml", {
        "id": "stub-token", "title": "the stub answers another token", "reproduction": "tests/support/stub_server.py",
        "engine": "vllm", "versions": ["stub-0"], "checks": ["token_diff*"], "arms": ["spec"]})
    runs = {}
    with StubServer("ok", token=5) as base, StubServer("ok", token=9) as spec:
        for name, extra in (("with", ["--known", str(ledger)]), ("without", [])):
            out = tmp_path / name
            r = _invoke("gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", tiny_suite(tmp_path),
                        "--db", str(out / "g.db"), "--report", str(out / "report"), "--junit", str(out / "j.xml"),
                        "--no-diffs", "--quiet", *extra)
            runs[name] = (r, out)
    r, out = runs["with"]
    assert runs["without"][0].exit_code == 1, runs["without"][0].output
    data = _show(out / "g.db")
    assert data["session"]["known"][0]["id"] == "stub-token"  # stored: judge needs no file
    known = [x for x in data["verdict"]["reasons"] if x["level"] == "KNOWN"]
    assert {x["probe"] for x in known if x["gate"] == "token_diff"} == {"one", "two"}
    assert not [x for x in data["verdict"]["reasons"] if x["level"] == "FAIL"], data["verdict"]
    assert r.exit_code == EXIT[data["verdict"]["verdict"]] and data["verdict"]["verdict"] != "FAIL", r.output
    skipped = [c for c in ET.parse(out / "j.xml").getroot().iter("testcase") if c.get("classname") == "arm.mtp1"
               and c.get("name") in ("one", "two")]
    assert all(c.find("failure") is None and c.find("skipped") is not None for c in skipped) and skipped
    assert "KNOWN stub-token: mtp1: token_diff: 2 probes (one, two)" in r.output
