"""An API key given for an endpoint is never stored, logged or rendered (issue 7 point 5)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from stub_server import StubServer
from test_faults_survived import _suite

from observatory.cli import cli
from observatory.commands.compare import redact_argv

SECRET = "sk-observatory-test-4f9c2e"


def test_redact_argv() -> None:
    assert redact_argv(["observatory", "--api-key", SECRET, "--api-key=" + SECRET, "--arms", "x"]) == [
        "observatory", "--api-key", "***", "--api-key=***", "--arms", "x"]


def test_api_key_reaches_the_server_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        monkeypatch.setattr(sys, "argv", ["observatory", "gate", "--api-key", SECRET])
        r = CliRunner().invoke(cli, [
            "gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", _suite(tmp_path), "--db", str(db),
            "--api-key", SECRET, "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
            "--json", str(out / "session.json"), "--log-dir", str(out / "logs"), "--quiet",
        ])
        seen = base.authorizations + spec.authorizations
    assert r.exit_code in (0, 1, 2), r.output
    assert seen and all(a == f"Bearer {SECRET}" for a in seen)
    assert SECRET not in r.output
    leaked = [p for p in [db, *tmp_path.glob("s.db*"), *out.rglob("*")] if p.is_file()
              and SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert SECRET not in shown.output and "***" in shown.output
