"""Report directories and output files: never over a user's files, never through a link (issue 19 item 7)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.model.errors import ObservatoryError
from observatory.report.jsonout import to_json
from observatory.report.outputs import MARKER, OutputFile, ReportDir
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One stored session (stub server) for every report in this module."""
    tmp = tmp_path_factory.mktemp("outputs")
    path = tmp / "r.db"
    with StubServer("ok") as s, StubServer("ok") as t:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url},mtp1={t.url}", "--suite", tiny_suite(tmp),
                                     "--db", str(path), "--no-diffs", "--quiet"])
    assert r.exit_code == verdict_exit(path), r.output
    return str(path)


def _report(db: str, out: Path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["report", "--db", db, "--out", str(out)])
    return r.exit_code, r.output


def test_report_refuses_a_directory_holding_a_users_files(tmp_path: Path, db: str) -> None:
    """Issue 19 item 7: `report --out` silently overwrote a user's index.html."""
    out = tmp_path / "site"
    out.mkdir()
    (out / "index.html").write_text("my own page")
    code, output = _report(db, out)
    assert code == 3 and "not an observatory report" in output
    assert (out / "index.html").read_text() == "my own page"


def test_report_replaces_its_own_earlier_report_whole(tmp_path: Path, db: str) -> None:
    """Issue 19 item 7: stale pages of an earlier session stayed beside the new ones."""
    out = tmp_path / "report"
    assert _report(db, out)[0] == 0
    assert (out / MARKER).is_file() and (out / "index.html").is_file()
    stale = out / "results" / "stale-from-an-earlier-session.html"
    stale.parent.mkdir(exist_ok=True)
    stale.write_text("old")
    assert _report(db, out)[0] == 0
    assert not stale.exists() and (out / "index.html").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["report"]  # no staging directories left behind


def test_report_never_writes_through_a_link(tmp_path: Path, db: str) -> None:
    """Issue 19 item 7: a symlinked index.html in --out overwrote the file it pointed to."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    out = tmp_path / "report"
    assert _report(db, out)[0] == 0  # ours: it carries the marker
    (out / "index.html").unlink()
    os.symlink(victim, out / "index.html")
    assert _report(db, out)[0] == 0
    assert victim.read_text() == "precious"
    assert not (out / "index.html").is_symlink()
    linked = tmp_path / "linked"
    os.symlink(out, linked)
    code, output = _report(db, linked)
    assert code == 3 and "symbolic link" in output


def test_output_file_replaces_a_link_instead_of_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "junit.xml")
    OutputFile(tmp_path / "junit.xml", "--junit").write_text("<testsuites/>")
    assert victim.read_text() == "precious" and (tmp_path / "junit.xml").read_text() == "<testsuites/>"
    with pytest.raises(ObservatoryError, match="is a directory"):
        OutputFile(tmp_path, "--json")
    with pytest.raises(ObservatoryError, match="does not exist"):
        OutputFile(tmp_path / "nodir" / "x.json", "--json")


def test_report_dir_is_made_with_its_missing_parents(tmp_path: Path) -> None:
    target = ReportDir(tmp_path / "a" / "b" / "report")
    index = target.write(lambda d: (d / "index.html").write_text("x") and d / "index.html")
    assert index == tmp_path / "a" / "b" / "report" / "index.html" and index.read_text() == "x"


def test_json_output_is_standard_json() -> None:
    """Issue 19 item 9: `show --json` and `gate --json` printed NaN, which strict parsers reject."""
    text = to_json({"alpha": float("nan"), "S": [float("inf"), 1.5], "nested": {"x": float("-inf")}})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard {c}")) == {
        "alpha": None, "S": [None, 1.5], "nested": {"x": None}}


def test_show_json_has_no_nan(tmp_path: Path) -> None:
    """Issue 19 item 9 end to end: a NaN logprob and NaN timings come out as null.

    Since issue 32 item 3 a NaN logprob is a malformed answer (the arm INVALID, compare exits 2): what the
    server sent is kept and flagged, and the JSON still carries no NaN."""
    db = tmp_path / "n.db"
    with StubServer("ok", logprob=float("nan")) as s:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(db), "--no-diffs", "--quiet"])
    assert r.exit_code in (0, 2), r.output
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert shown.exit_code == 0
    data = json.loads(shown.output, parse_constant=lambda c: pytest.fail(f"non-standard {c}"))
    assert any("malformed" in (r.get("error") or "") for r in data["arms"][0]["results"]), data["arms"][0]["results"]
