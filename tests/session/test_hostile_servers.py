"""Hostile servers end in a report and exit 1 or 2, never a traceback (issue 19).

These use the hand-made STUB server: a real engine cannot be made to serve
NaN counters, counters that go down, or echo credentials on demand.
"""

from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path

import pytest

from tests.support.stub_server import StubServer
from tests.support.stub_sessions import SPEC_COUNTERS, run_gate


@pytest.mark.parametrize(
    "metrics, problem",
    [
        ([SPEC_COUNTERS.format(drafts="NaN", tokens=10, accepted=5)], "not a count"),
        ([SPEC_COUNTERS.format(drafts="+Inf", tokens=10, accepted=5)], "not a count"),
        # the arm's start reads /metrics once for its facts (server_facts): the counters drop after that
        ([SPEC_COUNTERS.format(drafts=1000, tokens=2000, accepted=900)] * 2 + [SPEC_COUNTERS.format(drafts=10, tokens=20, accepted=9)],
         "decreased"),
        ([SPEC_COUNTERS.replace("num_drafts_total counter", "num_drafts_total gauge").format(drafts=5, tokens=10, accepted=5)],
         "not a counter"),
    ],
    ids=["nan", "inf", "decreasing", "gauge"],
)
def test_hostile_metrics_flag_the_arm_and_the_session_goes_on(tmp_path: Path, metrics: list[str], problem: str) -> None:
    """Issue 19 item 1: NaN counters aborted the session with a traceback (exit 1, no report, no JUnit);
    decreasing counters were stored as negative drafts and passed; a gauge was counted as drafts."""
    with StubServer("ok", token=5) as base, StubServer("ok", token=5, metrics=metrics) as spec, \
            StubServer("ok", token=5) as later:
        code, out, output = run_gate(tmp_path, f"base={base.url},mtp1={spec.url},mtp2={later.url}")
    assert code == 2, output
    data = json.loads((out / "session.json").read_text())
    arms = {a["name"]: a for a in data["arms"]}
    assert [a["status"] for a in data["arms"]] == ["ok", "ok", "ok"]  # later arms still ran
    flagged = [v["detail"] for v in arms["mtp1"]["validity"] if v["code"] == "INVALID"]
    assert any("counters unusable" in d and problem in d for d in flagged), flagged
    assert arms["mtp1"]["acceptance"]["tau"] is None
    assert arms["mtp1"]["acceptance"]["alpha"] is None
    assert (out / "report" / "index.html").is_file()
    xml.dom.minidom.parse(str(out / "junit.xml"))


def test_engine_without_draft_counters_is_not_provable(tmp_path: Path) -> None:
    """Issue 13 item 8: missing counters are not zero; a spec arm on an engine that reports none is
    'speculation not provable', with no tau or histogram made up."""
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        code, out, output = run_gate(tmp_path, f"base={base.url},mtp1={spec.url}", "--engine", "sglang")
    assert code == 2, output
    data = json.loads((out / "session.json").read_text())
    mtp1 = data["arms"][1]
    assert mtp1["counters"]["drafts"] is None and mtp1["counters"]["accepted"] is None
    acc = mtp1["acceptance"]
    assert acc["tau"] is None and acc["histogram"] == []
    assert any("speculation not provable" in v["detail"] for v in mtp1["validity"])


def test_drip_stream_is_hung_within_the_request_timeout(tmp_path: Path) -> None:
    """Hostile servers: a stream that drips a token every 0.2 s forever restarted the read timeout with
    every byte, so the gate never finished. Now the request timeout bounds the whole request."""
    import time

    with StubServer("ok", token=5) as base, StubServer("drip") as spec:
        t0 = time.monotonic()
        code, out, output = run_gate(tmp_path, f"base={base.url},mtp1={spec.url}", "--request-timeout", "2")
        took = time.monotonic() - t0
    assert code == 2, output
    data = json.loads((out / "session.json").read_text())
    mtp1 = data["arms"][1]
    assert mtp1["status"] == "hung" and "request timeout" in mtp1["reason"]
    assert took < 30


def test_withheld_logprobs_long_fields_and_nan_logprobs_end_in_a_verdict(tmp_path: Path) -> None:
    """Hostile servers: logprobs withheld, a NaN logprob, a /version of 100 characters and a finish_reason
    of 100: the gate finishes with a report and exit 1 or 2, never a traceback."""
    with StubServer("ok", token=5, version="v" * 100, finish_reason="f" * 100) as base, \
            StubServer("ok", token=5, with_logprobs=False) as spec, \
            StubServer("ok", token=7, logprob=float("nan")) as spec2:
        code, out, output = run_gate(tmp_path, f"base={base.url},mtp1={spec.url},mtp2={spec2.url}")
    assert code in (1, 2), output
    assert "Traceback" not in output
    data = json.loads((out / "session.json").read_text())
    assert data["arms"][0]["engine_version"].endswith("[truncated]")
    assert (out / "report" / "index.html").is_file()


def test_dripping_metrics_end_the_arm_within_the_timeout(tmp_path: Path) -> None:
    """Hostile servers: a /metrics body dripping forever restarted httpx's read timeout with every byte."""
    import time

    with StubServer("ok", token=5) as base, StubServer("ok", token=5, drip_metrics=True) as spec, \
            StubServer("ok", token=5) as later:
        t0 = time.monotonic()
        code, out, output = run_gate(tmp_path, f"base={base.url},mtp1={spec.url},mtp2={later.url}",
                                  "--request-timeout", "2")
        took = time.monotonic() - t0
    assert code == 2, output
    data = json.loads((out / "session.json").read_text())
    assert data["arms"][1]["status"] in ("crashed", "hung") and "did not finish" in data["arms"][1]["reason"]
    assert data["arms"][2]["status"] == "ok"  # the session went on
    assert took < 60
