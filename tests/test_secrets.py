"""An API key given for an endpoint is never stored, logged or rendered (issue 7 point 5)."""

from __future__ import annotations

import base64
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


def _leaks(paths: list[Path], secret: str) -> list[Path]:
    return [p for p in paths if p.is_file() and secret.encode() in p.read_bytes()]


def test_key_in_url_and_echoed_key_are_never_stored_or_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 item 5: a key inside a URL was stored verbatim in the command, the plan, the launch, the
    report and the JSON; a server echoing the Authorization header put the key in the database, the report,
    JUnit and stderr."""
    url_key = "sk-inurl-8d1e77aa"
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5) as base, StubServer("echo_auth") as spec, StubServer("echo_auth") as spec2:
        spec_url = spec.url.replace("http://", f"http://user:{url_key}@")
        arms = f"base={base.url},mtp1={spec_url},mtp2={spec2.url}"
        argv = ["gate", "--arms", arms, "--suite", _suite(tmp_path), "--db", str(db), "--api-key", SECRET,
                "--report", str(out / "report"), "--junit", str(out / "junit.xml"), "--json", str(out / "s.json"),
                "--log-dir", str(out / "logs"), "--no-diffs"]
        monkeypatch.setattr(sys, "argv", ["observatory", *argv])
        r = CliRunner().invoke(cli, argv)
    assert r.exit_code in (1, 2), r.output
    files = [db, *tmp_path.glob("s.db*"), *out.rglob("*")]
    basic = base64.b64encode(f"user:{url_key}".encode()).decode()  # how the URL credentials travel
    for secret in (SECRET, url_key, basic):
        assert secret not in r.output
        assert not _leaks(files, secret), (secret, _leaks(files, secret))
    data = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output
    assert "http://***@127.0.0.1" in data  # the URL is kept, its credentials masked
    assert "bad key: Bearer ***" in data and "bad key: Basic ***" in data  # echoed errors kept, keys masked


def test_redact_masks_url_credentials_and_remembered_keys() -> None:
    """Issue 19 item 5: one redaction function for every stored or shown string."""
    from observatory.model.redact import forget_all, redact, remember

    try:
        remember("sk-abcdef123")
        remember("abc")  # too short to mask safely: ignored
        assert redact({"u": ["postgresql://me:pw@db/x", "error: sk-abcdef123 rejected", "abc"]}) == {
            "u": ["postgresql://***@db/x", "error: *** rejected", "abc"]}
    finally:
        forget_all()
