"""docs/ci.md's example workflows parse and run only real commands and flags (issue 30.5)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from observatory.cli import cli

yaml = pytest.importorskip("yaml")

DOC = Path(__file__).resolve().parent.parent / "docs" / "ci.md"


def _blocks() -> list[Any]:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)]


def _commands(node: Any) -> list[str]:
    """Every shell line of a workflow (GitHub `run`, GitLab `script`) that runs `observatory`."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("run", "script"):
                lines = v if isinstance(v, list) else [v]
                out += [" ".join(str(x).split()) for x in lines if str(x).strip().startswith("observatory ")]
            else:
                out += _commands(v)
    elif isinstance(node, list):
        for v in node:
            out += _commands(v)
    return out


def unknown(command: str) -> list[str]:
    """What in COMMAND is not a real observatory subcommand or flag of it."""
    words = shlex.split(command)
    assert words[0] == "observatory"
    group = cli
    assert isinstance(group, click.Group)
    sub = group.get_command(click.Context(group), words[1])  # the group may load its commands lazily
    if sub is None:
        return [words[1]]
    flags = {o for p in sub.params for o in (*p.opts, *p.secondary_opts)}
    return [w.split("=", 1)[0] for w in words[2:] if w.startswith("--") and w.split("=", 1)[0] not in flags]


def test_both_workflows_parse_and_keep_what_ci_reads() -> None:
    gh, gl = _blocks()
    steps = gh["jobs"]["gate"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache/restore") for u in uses)
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save"))
    assert save["if"] == "always()" and save["with"]["path"] == "nightly.db"
    assert any(u.startswith("mikepenz/action-junit-report") for u in uses)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "report/" in upload["with"]["path"]
    job = gl["observatory-nightly"]
    assert job["artifacts"]["reports"]["junit"] == "junit.xml" and job["artifacts"]["when"] == "always"
    assert "report/" in job["artifacts"]["paths"]
    assert job["cache"]["paths"] == ["nightly.db"] and job["cache"]["when"] == "always"
    for wf in (gh, gl):
        (gate,) = _commands(wf)
        for needed in ("--db nightly.db", "--junit junit.xml", "--report report/", "--metrics-out metrics.txt"):
            assert needed in gate, (needed, gate)


def test_every_command_and_flag_they_run_is_real() -> None:
    commands = [c for wf in _blocks() for c in _commands(wf)]
    assert len(commands) == 2
    for c in commands:
        assert unknown(c) == [], c
        sub = shlex.split(c)[1]
        r = CliRunner().invoke(cli, [sub, "--help"])
        assert r.exit_code == 0
        for flag in (w for w in shlex.split(c) if w.startswith("--")):
            assert flag in r.output, (flag, sub)
    # the negative control: the checker catches a flag or a command that does not exist
    assert unknown("observatory gate --report r/ --no-such-flag 1") == ["--no-such-flag"]
    assert unknown("observatory nightly --db x") == ["nightly"]


def test_the_exit_codes_ci_reads_are_the_observatorys() -> None:
    """docs/ci.md names every exit status the gate can end with (it named 0-3 while 4 and 5 existed)."""
    from observatory.model.vocabulary import EXIT, INTERNAL_ERROR, SETUP_ERROR, STORAGE_ERROR

    head = DOC.read_text().split("\n\n", 2)[1]  # the paragraph that lists them
    named = {int(n) for n in re.findall(r"\b(\d)\s\(", head)}
    assert named == {*EXIT.values(), SETUP_ERROR, INTERNAL_ERROR, STORAGE_ERROR}, head
    assert "internal error" in head and "storage" in head
