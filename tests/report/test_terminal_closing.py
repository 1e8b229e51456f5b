"""What a person reads at the end of a run, in `sessions` and after `judge` (issue 30.1).

Hand-made STUB servers (the gate exit-code tests' helper): the spec arm answers another token, so the
session FAILs on demand; a real engine cannot be made to emit a chosen wrong token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("closing")
    out = tmp / "out"
    with StubServer("ok", token=5) as base, StubServer("ok", token=9) as spec:
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", tiny_suite(tmp),
                                     "--db", str(tmp / "g.db"), "--report", str(out / "report"),
                                     "--json", str(out / "s.json"), "--no-diffs", "--quiet"])
    return {"db": tmp / "g.db", "out": out, "result": r}


def test_gate_ends_with_the_closing_block(run: dict[str, Any]) -> None:
    r = run["result"]
    assert r.exit_code == 1
    lines = r.stdout.rstrip().splitlines()
    start = max(i for i, line in enumerate(lines) if "Session 1: FAIL" in line)
    block = "\n".join(lines[start:])
    assert "why: an arm judged against base fails" in block
    assert "mtp1:" in block and "token-identical 0/2" in block and "S " in block
    assert "single-stream tok/s" in block and "vs base" in block and "TTFT median" in block
    assert lines[-3] == f"report: {run['out'] / 'report' / 'index.html'}"
    assert lines[-2] == f"json: {run['out'] / 's.json'}"
    assert lines[-1] == "verdict: FAIL"  # the block ends with the verdict line (issue 46 item 5)


def test_sessions_has_a_header_verdict_model_and_arms(run: dict[str, Any]) -> None:
    r = CliRunner().invoke(cli, ["sessions", "--db", str(run["db"])])
    assert r.exit_code == 0, r.output
    header, row = r.output.splitlines()[:2]
    assert header.split("\t") == ["id", "started (UTC)", "status", "verdict", "model", "arms", "host"]
    cells = dict(zip(header.split("\t"), row.split("\t")))
    assert cells["id"] == "1" and cells["status"] == "complete" and cells["verdict"] == "FAIL"
    assert cells["arms"] == "base,mtp1"
    listed = json.loads(CliRunner().invoke(cli, ["sessions", "--db", str(run["db"]), "--json"]).output)
    assert [(s["id"], s["verdict"], s["arms"]) for s in listed] == [(1, "FAIL", ["base", "mtp1"])]


def test_judge_prints_the_verdict_and_what_changed(run: dict[str, Any], tmp_path: Path) -> None:
    """Re-judged with a gate added that WARNs every output: the verdict stays FAIL, the new WARNs are listed."""
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "odd.py").write_text(
        "from observatory.model.gates import WARN, GateResult, gate\n\n\n"
        "@gate('looks_odd', 'Every output looks odd (a test gate).', kind='result')\n"
        "def looks_odd(output, probe):\n    return GateResult(WARN, 'looks odd')\n")
    same = CliRunner().invoke(cli, ["judge", "--db", str(run["db"])])
    assert same.exit_code == 0, same.output
    assert "verdict: FAIL (unchanged)" in same.output and "  + " not in same.output
    r = CliRunner().invoke(cli, ["judge", "--db", str(run["db"]), "--gates-dir", str(gates)])
    assert r.exit_code == 0, r.output
    assert "verdict: FAIL (unchanged)" in r.output
    assert "  + mtp1 / one: looks_odd: looks odd" in r.output


def test_compare_ends_with_the_closing_block_and_its_metrics(tmp_path: Path) -> None:
    """compare writes no report or JSON: the block says how to make them; --metrics-out is written."""
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={base.url},mtp1={spec.url}",
                                     "--suite", tiny_suite(tmp_path), "--db", str(tmp_path / "c.db"),
                                     "--metrics-out", str(tmp_path / "m.txt"), "--no-diffs", "--quiet"])
    assert r.exit_code == verdict_exit(tmp_path / "c.db"), r.output
    lines = r.stdout.rstrip().splitlines()
    assert lines[-4] == f"report: not written: observatory report 1 --db {tmp_path / 'c.db'} --out report/"
    assert lines[-3] == f"json: not written: observatory show 1 --db {tmp_path / 'c.db'} --json"
    assert lines[-2] == f"metrics: {tmp_path / 'm.txt'}"
    assert lines[-1] == "verdict: INVALID"  # URL arms whose counters never move: speculation not provable
    assert (tmp_path / "m.txt").read_text().rstrip().endswith("# EOF")
    assert any(line.startswith("mtp1:") and "token-identical 2/2" in line for line in lines)


def test_an_interrupted_gate_with_a_fail_has_one_verdict_everywhere(tmp_path: Path) -> None:
    """Issue 46 item 5: a nightly cut at its time limit printed INVALID (interrupted) at the gate while ``show
    --json`` of the same session said FAIL. Every output renders `decide`'s verdict: a session interrupted
    after a FAIL is FAIL (a failure seen is information, docs/design.md 3.3), its interruption an INVALID
    reason beside it; the gate's exit code, its lines, the closing block, the JSON, JUnit and ``show`` agree.

    Real SIGTERM to a real gate process; the STUB servers only make the FAIL (another token) and the arm
    still running when the signal comes (a server that answers once, the preflight, then hangs)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    import xml.etree.ElementTree as ET

    out, db = tmp_path / "out", tmp_path / "g.db"
    with StubServer("ok", token=5) as base, StubServer("ok", token=9) as spec, StubServer("ok", token=5) as late:
        proc = subprocess.Popen(
            [sys.executable, "-m", "observatory", "gate", "--arms", f"base={base.url},mtp1={spec.url},mtp2={late.url}",
             "--suite", tiny_suite(tmp_path), "--db", str(db), "--report", str(out / "report"), "--json",
             str(out / "s.json"), "--junit", str(out / "j.xml"), "--no-diffs", "--quiet", "--request-timeout", "300"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy())

        def wait_for(requests: int) -> None:
            deadline = time.monotonic() + 120
            while len(late.authorizations) < requests and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.05)
            assert len(late.authorizations) >= requests, proc.communicate(timeout=30)

        wait_for(1)  # the preflight's one-token request, answered at once
        time.sleep(1.0)
        late.delay_s = 300  # from now on mtp2 answers nothing in time: still running when the signal comes
        wait_for(2)  # mtp2's first probe, base's and mtp1's done
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, (stdout, stderr)  # FAIL's exit code
    assert "gate: FAIL" in stderr and "session interrupted" in stderr, stderr
    lines = stdout.rstrip().splitlines()
    assert any("Session 1: FAIL" in line for line in lines) and lines[-1] == "verdict: FAIL", stdout
    saved = json.loads((out / "s.json").read_text())
    assert saved["session"]["status"] == "interrupted" and saved["verdict"]["verdict"] == "FAIL"
    assert any(r["level"] == "INVALID" and r["text"].startswith("session interrupted") for r in saved["verdict"]["reasons"])
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert json.loads(shown.output)["verdict"] == saved["verdict"]
    props = {p.get("name"): p.get("value") for p in ET.parse(out / "j.xml").getroot().iter("property")}
    assert props["verdict"] == "FAIL"
    listed = json.loads(CliRunner().invoke(cli, ["sessions", "--db", str(db), "--json"]).output)
    assert listed[0]["verdict"] == "FAIL"


def test_sessions_cells_cannot_drive_the_terminal() -> None:
    from observatory.commands.sessions import _one_line

    assert _one_line("m\tx\n\x1b[31mred") == "m x ?[31mred"
    assert _one_line(None) == "-"
