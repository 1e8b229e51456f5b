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
from conftest import verdict_exit
from stub_server import StubServer
from test_faults_survived import _suite

from observatory.cli import cli


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("closing")
    out = tmp / "out"
    with StubServer("ok", token=5) as base, StubServer("ok", token=9) as spec:
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", _suite(tmp),
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
    assert lines[-2] == f"report: {run['out'] / 'report' / 'index.html'}"
    assert lines[-1] == f"json: {run['out'] / 's.json'}"


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
                                     "--suite", _suite(tmp_path), "--db", str(tmp_path / "c.db"),
                                     "--metrics-out", str(tmp_path / "m.txt"), "--no-diffs", "--quiet"])
    assert r.exit_code == verdict_exit(tmp_path / "c.db"), r.output
    lines = r.stdout.rstrip().splitlines()
    assert lines[-3] == f"report: not written: observatory report 1 --db {tmp_path / 'c.db'} --out report/"
    assert lines[-2] == f"json: not written: observatory show 1 --db {tmp_path / 'c.db'} --json"
    assert lines[-1] == f"metrics: {tmp_path / 'm.txt'}"
    assert (tmp_path / "m.txt").read_text().rstrip().endswith("# EOF")
    assert any(line.startswith("mtp1:") and "token-identical 2/2" in line for line in lines)


def test_closing_of_an_interrupted_gate_says_invalid(run: dict[str, Any]) -> None:
    """The gate calls an interrupted session INVALID whatever its arms say: so does the closing block."""
    import io

    from rich.console import Console

    from observatory.report.data import build
    from observatory.report.terminal import print_closing
    from observatory.store.session_store import Store

    with Store(str(run["db"])) as store:
        data = build(store, 1)
    for interrupted, want in ((False, "Session 1: FAIL"), (True, "Session 1: INVALID")):
        buf = io.StringIO()
        print_closing(data, {}, Console(file=buf, width=100), interrupted=interrupted)
        assert want in buf.getvalue()


def test_sessions_cells_cannot_drive_the_terminal() -> None:
    from observatory.commands.sessions import _one_line

    assert _one_line("m\tx\n\x1b[31mred") == "m x ?[31mred"
    assert _one_line(None) == "-"
