"""`observatory gate` exit codes and artefacts (issue 6): 1 on FAIL, 2 on INVALID, 3 on setup errors.

These use the hand-made STUB server (a real engine cannot be made to emit a
chosen wrong token on demand); the passing case, exit 0, runs on the real
engine in tests/real_engine/test_engine_session.py.
"""

from __future__ import annotations

import xml.dom.minidom
from pathlib import Path

from tests.support.stub_server import StubServer
from tests.support.stub_sessions import moving_counters, run_gate


def test_failing_spec_arm_exits_1(tmp_path: Path) -> None:
    with StubServer("ok", token=5) as base, StubServer("ok", token=9) as spec:
        code, out, _ = run_gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 1
    assert (out / "report" / "index.html").is_file() and (out / "session.json").is_file()
    doc = xml.dom.minidom.parse(str(out / "junit.xml"))
    failures = [c for c in doc.getElementsByTagName("testcase") if c.getElementsByTagName("failure")]
    assert {c.getAttribute("name") for c in failures} == {"one", "two", "verdict"}


def test_invalid_arm_exits_2(tmp_path: Path) -> None:
    with StubServer("ok", token=5) as base, StubServer("hang") as spec:
        code, out, _ = run_gate(tmp_path, f"base={base.url},mtp1={spec.url}", "--request-timeout", "2")
    assert code == 2
    doc = xml.dom.minidom.parse(str(out / "junit.xml"))
    errors = [c for c in doc.getElementsByTagName("testcase") if c.getElementsByTagName("error")]
    assert [c.getAttribute("classname") for c in errors] == ["arm.mtp1", "session"]
    assert "HUNG" in (out / "report" / "index.html").read_text()


def test_setup_error_exits_3(tmp_path: Path) -> None:
    code, out, _ = run_gate(tmp_path, "base,mtp9000")
    assert code == 3 and not out.exists()


def _speedup(out: Path, arm_name: str = "mtp2") -> dict:  # type: ignore[type-arg]
    import json
    data = json.loads((out / "session.json").read_text())
    arm = next(a for a in data["arms"] if a["name"] == arm_name)
    return next(p for p in arm["performance"] if p["check"] == "speedup")


def test_four_times_slower_arm_fails_the_default_gate(tmp_path: Path) -> None:
    """Issue 30.4: no --fail-on, a spec arm answering 4x slower than base: exit 1 on the speed floor.

    STUB servers: a real engine cannot be made four times slower on demand. Each answers after a fixed
    delay, the spec one with counters that move (consistent with k = 2: 2 drafted tokens per draft); the negative control (the same delays) is not a FAIL."""
    with StubServer("ok", token=5, delay_s=0.15) as base, \
            StubServer("ok", token=5, delay_s=0.6, metrics=moving_counters()) as spec:
        code, out, _ = run_gate(tmp_path, f"base={base.url},base={base.url},mtp2={spec.url}")
    check = _speedup(out)
    assert check["verdict"] == "FAIL" and check["value"] < 0.5, check
    assert code == 1
    (tmp_path / "same").mkdir()
    with StubServer("ok", token=5, delay_s=0.15) as base, \
            StubServer("ok", token=5, delay_s=0.15, metrics=moving_counters()) as spec:
        code, out, _ = run_gate(tmp_path / "same", f"base={base.url},base={base.url},mtp2={spec.url}")
    assert _speedup(out)["verdict"] != "FAIL" and code == 0
