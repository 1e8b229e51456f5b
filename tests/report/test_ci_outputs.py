"""What CI reads (issue 30.5): JUnit with stable names, real times and visible WARNs; OpenMetrics text.

Two gate sessions on hand-made STUB servers (a real engine cannot be made to
emit a chosen wrong token on demand): one whose spec arm answers another token
(FAIL), one whose spec arm answers base's (no FAIL). Their JUnit files must
parse with junitparser and name the same tests; the OpenMetrics file must
parse with prometheus-client's own parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite

junitparser = pytest.importorskip("junitparser")


# A user gate (--gates-dir) that WARNs on every output: a WARN the stub can give on demand.
WARN_GATE = """
from observatory.model.gates import WARN, GateResult, gate


@gate("looks_odd", "Every output looks odd (a test gate).", kind="result")
def looks_odd(output, probe):
    return GateResult(WARN, "looks odd")
"""


def _gate(tmp_path: Path, token: int) -> tuple[int, Path]:
    out = tmp_path / f"out{token}"
    gates = tmp_path / "gates"
    gates.mkdir(exist_ok=True)
    (gates / "odd.py").write_text(WARN_GATE)
    with StubServer("ok", token=5, delay_s=0.02) as base, StubServer("ok", token=token, delay_s=0.02) as spec:
        r = CliRunner().invoke(cli, [
            "gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", tiny_suite(tmp_path),
            "--db", str(tmp_path / "g.db"), "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
            "--metrics-out", str(out / "metrics.txt"), "--gates-dir", str(gates), "--no-diffs", "--quiet"])
    return r.exit_code, out


@pytest.fixture(scope="module")
def two_nights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("nights")
    bad_code, bad = _gate(tmp, 9)
    same_code, same = _gate(tmp, 5)
    return {"bad": (bad_code, bad), "same": (same_code, same)}


def _cases(path: Path) -> dict[tuple[str, str], Any]:
    xml = junitparser.JUnitXml.fromfile(str(path))
    return {(c.classname, c.name): c for suite in xml for c in suite}


def test_two_sessions_share_test_names(two_nights: dict[str, Any]) -> None:
    """Per-test history in a CI viewer needs the same names every night, whatever the verdicts."""
    (bad_code, bad), (same_code, same) = two_nights["bad"], two_nights["same"]
    assert bad_code == 1 and same_code != 1
    a, b = _cases(bad / "junit.xml"), _cases(same / "junit.xml")
    assert set(a) == set(b)
    assert ("session", "verdict") in a
    assert {("arm.mtp1", "one"), ("arm.mtp1", "two"), ("arm.base", "validity")} <= set(a)
    # every performance check of the spec arm is a case
    checks = {n for c, n in a if c == "arm.mtp1" and n.startswith("performance.")}
    assert checks == {f"performance.{c}" for c in ("speedup", "ttft_ratio", "steady_state", "gpu_clocks",
                                                   "cuda_graphs", "acceptance_floor", "stream_tau", "token_count")}
    # no verdict in any name
    assert not any(v in n for _, n in a for v in ("PASS", "WARN", "FAIL", "INVALID"))
    failed = {k for k, c in a.items() if any(isinstance(r, junitparser.Failure) for r in c.result)}
    assert {("arm.mtp1", "one"), ("arm.mtp1", "two"), ("session", "verdict")} <= failed
    assert not any(isinstance(r, junitparser.Failure) for c in b.values() for r in c.result)


def test_junit_has_real_times_and_a_timestamp(two_nights: dict[str, Any]) -> None:
    """The stub answers each request after 20 ms: probe cases take at least that, the suite has its start."""
    _, bad = two_nights["bad"]
    xml = junitparser.JUnitXml.fromfile(str(bad / "junit.xml"))
    suite = next(iter(xml))
    assert suite.timestamp and suite.timestamp[:2] == "20"
    cases = _cases(bad / "junit.xml")
    assert cases[("arm.mtp1", "one")].time >= 0.02 and cases[("arm.mtp1", "validity")].time > 0
    assert cases[("session", "verdict")].time >= cases[("arm.mtp1", "validity")].time


def test_warn_is_visible_without_failing(two_nights: dict[str, Any]) -> None:
    """A WARN (the user gate's) is a property and a system-out line, never a failure."""
    _, same = two_nights["same"]
    text = (same / "junit.xml").read_text()
    cases = _cases(same / "junit.xml")
    warned = [c for c in cases.values() if c.system_out and "WARN: " in c.system_out]
    assert {("arm.mtp1", "one"), ("arm.mtp1", "two")} <= {(c.classname, c.name) for c in warned}, text
    for c in warned:
        if c.name in ("one", "two"):
            assert "WARN: looks_odd: looks odd" in c.system_out
        assert not any(isinstance(r, junitparser.Failure) for r in c.result), c.name
    assert '<property name="warnings" value="1" />' in text


def test_metrics_out_parses_as_openmetrics(two_nights: dict[str, Any]) -> None:
    """alpha/tau/S where measured, tok/s and TTFT per arm, verdict codes per arm and for the session."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    for key, session_code in (("bad", 3), ("same", None)):
        _, out = two_nights[key]
        families = {f.name: f for f in text_string_to_metric_families((out / "metrics.txt").read_text())}
        arm_verdict = {s.labels["arm"]: s.value for s in families["observatory_arm_verdict"].samples}
        assert set(arm_verdict) == {"base", "mtp1"}
        rates = {s.labels["arm"] for s in families["observatory_single_stream_tokens_per_second"].samples}
        assert rates == {"base", "mtp1"}
        assert {s.labels["arm"] for s in families["observatory_speedup"].samples} == {"mtp1"}
        (session,) = families["observatory_session_verdict"].samples
        if session_code is not None:
            assert session.value == session_code and arm_verdict["mtp1"] == 3 and arm_verdict["base"] == 0
        # the stub reports no spec counters: alpha is not measured, so it has no sample (never a 0)
        assert not families["observatory_alpha"].samples


def test_junit_times_every_channel_and_performance_case(tmp_path: Path) -> None:
    """Issue 30.5: the committed H200 nightly's channel x arm cases carry their requests' summed time and the
    performance checks the arm's timed traffic; a channel that sends no request (history) has no time, and so
    (the negative control) has a channel whose arms' timings are unknown."""
    from dataclasses import replace

    from observatory.report.data import build
    from observatory.report.junit import junit_xml
    from observatory.store.session_store import Store
    from tests.support.paths import example_db

    db = example_db("h200-nightly/nightly-tiny.db", tmp_path / "n.db")
    data = build(Store(str(db)))
    path = tmp_path / "junit.xml"
    path.write_text(junit_xml(data))
    cases = _cases(path)
    sending = {f"channel.{c.name}" for c in data.channels if c.probes}  # history reads the database, sends nothing
    assert sending and len(sending) < len(data.channels)
    channel = {k: c for k, c in cases.items() if k[0] in sending}
    perf = {k: c for k, c in cases.items() if k[1].startswith("performance.")}
    assert channel and perf
    assert all(c.time and c.time > 0 for c in channel.values()), [k for k, c in channel.items() if not c.time]
    assert all(c.time and c.time > 0 for c in perf.values()), [k for k, c in perf.items() if not c.time]
    ch = next(c for c in data.channels if c.probes)
    untimed = replace(data, channels=(replace(ch, arms=tuple(replace(a, seconds=None) for a in ch.arms)),))
    path.write_text(junit_xml(untimed))
    assert not any(c.time for k, c in _cases(path).items() if k[0] == f"channel.{ch.name}")
