"""User gates of every kind run from --gates-dir, through the path built-in gates take (issue 14 item 4).

The servers are the hand-made STUB of tests/support/stub_answers.py; the gates are
written here as a user would, against the public plugin API only
(`observatory.model.gates.gate`, `GateResult`, the kinds result, pair and arm).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.model.gates import Output, registry_for
from observatory.model.probes import Probe
from tests.support.stub_answers import AnswerStub, fixed
from tests.support.stub_sessions import THREE_PROBES

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
    suite.write_text(THREE_PROBES)
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


OLD_LAYOUT_GATE = '''
from observatory.gates import FAIL, PASS, GateResult, gate


@gate("old_no_fox", "The output must not mention a fox.", kind="result")
def old_no_fox(output, probe):
    return GateResult(FAIL if "fox" in output.text else PASS, "fox" if "fox" in output.text else "no fox")
'''


def test_a_gate_file_on_the_old_import_path_runs_with_a_warning(tmp_path: Path) -> None:
    """Issue 47 item 7: ``from observatory.gates import gate`` (the layout before issue 26) keeps working for one
    release, with a DeprecationWarning naming the file's line and the new path (docs/plugins.md). Control: the
    documented path warns nothing."""
    gates_dir = tmp_path / "old_gates"
    gates_dir.mkdir()
    (gates_dir / "old.py").write_text(OLD_LAYOUT_GATE)
    with pytest.warns(DeprecationWarning, match=r"observatory\.gates is deprecated: import from "
                                                r"observatory\.model\.gates") as caught:
        listed = CliRunner().invoke(cli, ["gates", "list", "--gates-dir", str(gates_dir)], catch_exceptions=False)
    assert listed.exit_code == 0 and "old_no_fox" in listed.output
    assert {Path(w.filename).name for w in caught if w.category is DeprecationWarning} == {"old.py"}
    gate = registry_for([str(gates_dir)]).get("old_no_fox")
    probe = Probe("p", "prose_en", prompt="x", max_tokens=4)
    assert gate.check(Output(text="a fox"), probe).verdict == "FAIL"
    assert gate.check(Output(text="a dog"), probe).verdict == "PASS"
    new_dir = tmp_path / "new_gates"
    new_dir.mkdir()
    (new_dir / "new.py").write_text(OLD_LAYOUT_GATE.replace("observatory.gates", "observatory.model.gates")
                                    .replace("old_no_fox", "new_no_fox"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert "new_no_fox" in registry_for([str(new_dir)])
    assert not [w for w in seen if w.category is DeprecationWarning]
