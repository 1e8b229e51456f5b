"""`observatory gate` exit codes and artefacts (issue 6): 1 on FAIL, 2 on INVALID, 3 on setup errors.

These use the hand-made STUB server (a real engine cannot be made to emit a
chosen wrong token on demand); the passing case, exit 0, runs on the real
engine in tests/test_engine_session.py.
"""

from __future__ import annotations

import xml.dom.minidom
from pathlib import Path

from click.testing import CliRunner
from stub_server import StubServer
from test_faults_survived import _suite

from observatory.cli import cli


def _gate(tmp_path: Path, arms: str, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["gate", "--arms", arms, "--suite", _suite(tmp_path), "--db", str(tmp_path / "g.db"),
                                 "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
                                 "--json", str(out / "session.json"), "--no-diffs", "--quiet", *extra])
    return r.exit_code, out


def test_failing_spec_arm_exits_1(tmp_path: Path) -> None:
    with StubServer("ok", token=5) as base, StubServer("ok", token=9) as spec:
        code, out = _gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 1
    assert (out / "report" / "index.html").is_file() and (out / "session.json").is_file()
    doc = xml.dom.minidom.parse(str(out / "junit.xml"))
    failures = [c for c in doc.getElementsByTagName("testcase") if c.getElementsByTagName("failure")]
    assert {c.getAttribute("name") for c in failures} == {"one", "two", "verdict FAIL"}


def test_invalid_arm_exits_2(tmp_path: Path) -> None:
    with StubServer("ok", token=5) as base, StubServer("hang") as spec:
        code, out = _gate(tmp_path, f"base={base.url},mtp1={spec.url}", "--request-timeout", "2")
    assert code == 2
    doc = xml.dom.minidom.parse(str(out / "junit.xml"))
    errors = [c for c in doc.getElementsByTagName("testcase") if c.getElementsByTagName("error")]
    assert [c.getAttribute("classname") for c in errors] == ["arm.mtp1", "session"]
    assert "HUNG" in (out / "report" / "index.html").read_text()


def test_setup_error_exits_3(tmp_path: Path) -> None:
    code, out = _gate(tmp_path, "base,mtp9000")
    assert code == 3 and not out.exists()
