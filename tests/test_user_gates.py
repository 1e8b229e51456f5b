"""User gates of every kind run from --gates-dir, through the path built-in gates take (issue 14 item 4).

The servers are the hand-made STUB of tests/stub_answers.py; the gates are
written here as a user would, against the public plugin API only
(`observatory.model.gates.gate`, `GateResult`, the kinds result, pair and arm).
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from stub_answers import AnswerStub, fixed
from test_verdict_policy import SUITE

from observatory.cli import cli

USER_GATES = '''
from observatory.model.gates import FAIL, PASS, WARN, GateResult, gate


@gate("no_fox", "The output must not mention a fox.", kind="result")
def no_fox(output, probe):
    return GateResult(FAIL if "fox" in output.text else PASS, "mentions a fox" if "fox" in output.text else "no fox")


@gate("same_length", "Spec and base outputs have the same length.", kind="pair")
def same_length(spec, base, probe):
    same = len(spec.text) == len(base.text)
    return GateResult(PASS if same else WARN, f"{len(spec.text)} vs {len(base.text)} characters")


@gate("few_outputs", "At most two outputs per arm.", kind="arm")
def few_outputs(outputs):
    return GateResult(PASS if len(outputs) <= 2 else WARN, f"{len(outputs)} outputs")
'''


def test_user_gates_of_each_kind_run_and_show(tmp_path: Path) -> None:
    gates_dir = tmp_path / "my_gates"
    gates_dir.mkdir()
    (gates_dir / "mine.py").write_text(USER_GATES)
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    db = tmp_path / "u.db"
    out = tmp_path / "report"
    listed = CliRunner().invoke(cli, ["gates", "list", "--gates-dir", str(gates_dir)])
    assert {"no_fox", "same_length", "few_outputs"} <= {line.split()[0] for line in listed.output.splitlines()[1:]}
    with AnswerStub(fixed("a quick brown fox")) as base, AnswerStub(fixed("a quick brown fox")) as copy:
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={base.url},base={copy.url}", "--suite", str(suite),
                                     "--db", str(db), "--report", str(out), "--no-diffs", "--quiet",
                                     "--gates-dir", str(gates_dir)])
    data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output)
    copy_arm = next(a for a in data["arms"] if a["name"] == "base#2")
    verdicts = copy_arm["results"][0]["verdicts"]
    assert verdicts["no_fox"]["verdict"] == "FAIL"          # result gate: every probe, no suite edit needed
    assert verdicts["same_length"]["verdict"] == "PASS"     # pair gate: against base
    assert copy_arm["arm_verdicts"]["few_outputs"]["verdict"] == "WARN"  # arm gate
    assert r.exit_code == 1 and data["verdict"]["verdict"] == "FAIL"
    assert "base#2 / one: no_fox: mentions a fox" in "\n".join(x["text"] for x in data["verdict"]["reasons"])
    html = (out / "index.html").read_text()
    assert "few_outputs" in html and "no_fox" in html
    # re-judging the stored session remembers the folder
    assert CliRunner().invoke(cli, ["judge", "--db", str(db)]).exit_code == 0
    again = json.loads(CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output)
    assert next(a for a in again["arms"] if a["name"] == "base#2")["results"][0]["verdicts"]["no_fox"]["verdict"] == "FAIL"


def test_bad_gates_dir_is_a_setup_error(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["gates", "list", "--gates-dir", str(tmp_path / "missing")])
    assert r.exit_code == 3 and "no such directory" in r.output


def test_broken_gate_file_is_a_setup_error(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("def broken(:\n")
    r = CliRunner().invoke(cli, ["gates", "list", "--gates-dir", str(tmp_path)])
    assert r.exit_code == 3 and "bad.py failed to load: SyntaxError" in r.output
