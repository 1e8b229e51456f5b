"""Setup errors are one clear line and exit 3, before anything runs (issue 19 items 3 and 4)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.paths import REPO
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


def _one_error_line(output: str) -> str:
    lines = [x for x in output.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), output
    assert "Traceback" not in output
    return lines[0]


def _bad_dbs(tmp_path: Path) -> dict[str, str]:
    good = tmp_path / "good.db"
    con = sqlite3.connect(good)
    con.executescript("create table t(x); insert into t values (1);" * 1)
    con.close()
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(good.read_bytes()[:100])
    text = tmp_path / "notes.txt"
    text.write_text("my notes, not a database\n")
    return {
        "directory": str(tmp_path),
        "text file": str(text),
        "truncated": str(truncated),
        "no host": "postgresql+psycopg://nohost.invalid/x",
        "unknown scheme": "mongodb://localhost/x",
        "missing directory": str(tmp_path / "nodir" / "x.db"),
    }


@pytest.mark.parametrize("kind", ["directory", "text file", "truncated", "no host", "unknown scheme",
                                  "missing directory"])
@pytest.mark.parametrize("command", ["sessions", "show", "judge", "compare"])
def test_bad_db_is_one_line_exit_3(tmp_path: Path, kind: str, command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 item 3: each of these ended in a traceback with exit 1 (read by the gate as FAIL)."""
    monkeypatch.delenv("OBSERVATORY_RAISE_ERRORS", raising=False)
    db = _bad_dbs(tmp_path)[kind]
    args = [command, "--db", db]
    with StubServer("ok") as s:  # listening: a URL nothing answers at is a setup error of its own (issue 32)
        if command == "compare":
            args += ["--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path), "--quiet"]
        before = sorted(p.name for p in tmp_path.iterdir())
        r = CliRunner().invoke(cli, args)
    assert r.exit_code == 3, r.output
    line = _one_error_line(r.output)
    assert "--db" in line or "database" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created


def test_read_only_database_is_refused_for_writing_commands(tmp_path: Path) -> None:
    """Issue 19 item 3: a read-only database failed mid-judge with a traceback."""
    db = tmp_path / "ro.db"
    with StubServer("ok") as s:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(db), "--no-diffs", "--quiet"])
    assert r.exit_code == 0, r.output
    ro = f"sqlite:///file:{db}?mode=ro&uri=true"
    shown = CliRunner().invoke(cli, ["show", "--db", ro, "--json"])
    assert shown.exit_code == 0, shown.output  # reading a read-only database works
    with StubServer("ok") as s:
        for args in (["judge", "--db", ro],
                     ["compare", "--db", ro, "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path)]):
            r = CliRunner().invoke(cli, args)
            assert r.exit_code == 3, r.output
            assert "read-only" in _one_error_line(r.output)


def test_password_in_db_url_is_not_printed(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["sessions", "--db", "postgresql+psycopg://u:hunter2pw@nohost.invalid/x"])
    assert r.exit_code == 3 and "hunter2pw" not in r.output and "***" in r.output


def test_failed_validation_creates_no_database(tmp_path: Path) -> None:
    """Issue 19 item 4: `compare --db typo.db --arms bsae` left a migrated typo.db behind."""
    db = tmp_path / "typo.db"
    r = CliRunner().invoke(cli, ["compare", "--db", str(db), "--arms", "bsae", "--quiet"])
    assert r.exit_code == 3, r.output
    assert not db.exists() and not list(tmp_path.glob("typo.db*"))


@pytest.mark.parametrize("option", ["--junit", "--json"])
def test_gate_output_in_missing_directory_fails_before_any_arm(tmp_path: Path, option: str) -> None:
    """Issue 19 item 3: --junit in a directory that does not exist failed after the whole session ran."""
    db = tmp_path / "g.db"
    with StubServer("ok") as s:
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path), "--db", str(db),
                                     "--report", str(tmp_path / "report"), option, str(tmp_path / "nodir" / "x.out"),
                                     "--no-diffs", "--quiet"])
        assert s.completions == 0  # nothing ran
    assert r.exit_code == 3, r.output
    assert "does not exist" in _one_error_line(r.output)
    assert not db.exists()


def test_gate_report_over_a_foreign_directory_fails_before_any_arm(tmp_path: Path) -> None:
    """Issue 19 items 3 and 7: a --report directory holding the user's files is refused up front."""
    mine = tmp_path / "site"
    mine.mkdir()
    (mine / "index.html").write_text("my page")
    with StubServer("ok") as s:
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(tmp_path / "g.db"), "--report", str(mine), "--quiet"])
        assert s.completions == 0
    assert r.exit_code == 3, r.output
    assert "not an observatory report" in _one_error_line(r.output)
    assert (mine / "index.html").read_text() == "my page"


def test_usage_errors_are_one_line_exit_3() -> None:
    """Issue 19 item 3: click's usage errors printed four lines (usage, hint, blank, error)."""
    r = CliRunner().invoke(cli, ["compare", "--repeat", "abc"])
    assert r.exit_code == 3
    assert "--repeat" in _one_error_line(r.output)


def test_unexpected_exception_is_one_line_outside_tests(tmp_path: Path) -> None:
    """Never a traceback in CI: an unexpected exception (a bug) is one line naming the file its traceback
    went to, exit 4: never 2, which CI reads as an INVALID measurement (issue 32 item 5). Run in a
    subprocess: under pytest such exceptions are re-raised on purpose."""
    import subprocess
    import sys

    code = ("import sys, observatory.commands.sessions as s\n"
            "from observatory.cli import cli\n"
            "def boom(*a, **k): raise KeyError('surprise')\n"
            "s.Store = boom\n"
            "cli(['sessions'])\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OBSERVATORY_RAISE_ERRORS"}
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    line = _one_error_line(r.stderr)
    assert line.startswith("Error: internal error, KeyError")
    written = Path(line.split("the traceback is in ", 1)[1].split(":", 1)[0])
    try:
        assert "Traceback" in written.read_text() and "KeyError: 'surprise'" in written.read_text()
    finally:
        written.unlink()
