"""A session's results as OpenMetrics text (``--metrics-out FILE`` on compare and gate).

For a Prometheus/Grafana dashboard that tracks each night (a textfile
collector or a pushgateway picks the file up). Written by prometheus-client's
own OpenMetrics exposition, so names, labels and escaping follow the format.
Every sample carries the labels ``model`` and ``arm``; a figure that was not
measured has no sample (never a 0):

- ``observatory_alpha``, ``observatory_tau``: acceptance rate and mean
  acceptance length (spec arms);
- ``observatory_speedup``, ``observatory_speedup_ci_low``,
  ``observatory_speedup_ci_high``: S against base and its 95% bootstrap interval;
- ``observatory_single_stream_tokens_per_second``, ``observatory_ttft_seconds``
  (median): every arm, base included;
- ``observatory_arm_verdict``: the worst level among the session verdict's
  reasons about the arm, as a code (``VERDICT_CODE``: 0 PASS, 1 WARN,
  2 INVALID, 3 FAIL);
- ``observatory_session_verdict`` (labels ``model``, ``session``): the session
  verdict, same codes;
- ``observatory_known_findings`` (labels ``model``, ``arm``, ``known``): how many
  of the session verdict's reasons about the arm a known-findings ledger's
  entry ``known`` covers (docs/known.md): shown, never counted in the verdict.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from observatory.judge.summaries import arm_summaries
from observatory.model.read_model import SessionView
from observatory.model.vocabulary import FAIL, INVALID, KNOWN, PASS, WARN, worst

VERDICT_CODE = {PASS: 0, WARN: 1, INVALID: 2, FAIL: 3}

# (metric name, help, the arm summary's key, scale)
_FIGURES = (
    ("observatory_alpha", "Acceptance rate alpha = accepted / draft tokens", "alpha", 1.0),
    ("observatory_tau", "Mean acceptance length tau = 1 + accepted / drafts", "tau", 1.0),
    ("observatory_speedup", "S = single-stream tok/s of the arm / of base, same session", "S", 1.0),
    ("observatory_speedup_ci_low", "Lower end of the 95% bootstrap interval of S", "S_lo", 1.0),
    ("observatory_speedup_ci_high", "Upper end of the 95% bootstrap interval of S", "S_hi", 1.0),
    ("observatory_ttft_seconds", "Median time to first token", "ttft_ms", 0.001),
)


def arm_verdicts(data: SessionView) -> dict[str, str]:
    """Each arm's worst level among the session verdict's reasons about it (PASS if none)."""
    levels: dict[str, set[str]] = {}
    for r in data.verdict.reasons:
        if r.arm is not None:
            levels.setdefault(r.arm, set()).add(r.level)
    return {a.name: worst(lv for lv in levels.get(a.name, set()) if lv in VERDICT_CODE) or PASS for a in data.arms}


def known_counts(data: SessionView) -> dict[tuple[str, str], int]:
    """(arm, entry id) -> how many KNOWN reasons of the session verdict that entry covers on that arm."""
    out: dict[tuple[str, str], int] = {}
    for r in data.verdict.reasons:
        if r.level == KNOWN and r.arm is not None:
            key = (r.arm, str((r.known or {}).get("id")))
            out[key] = out.get(key, 0) + 1
    return out


class _SessionCollector(Collector):
    def __init__(self, data: SessionView):
        self.data = data

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self.data
        model = data.session.model or ""
        rows = arm_summaries(data)
        for name, text, key, scale in _FIGURES:
            g = GaugeMetricFamily(name, text, labels=["model", "arm"])
            for row in rows:
                if isinstance(row.get(key), (int, float)):
                    g.add_metric([model, row["arm"]], float(row[key]) * scale)
            yield g
        rate = GaugeMetricFamily("observatory_single_stream_tokens_per_second",
                                 "Single-stream tokens per second, end to end", labels=["model", "arm"])
        for a in data.arms:
            v: Any = (a.figures.speed or {}).get("single_stream_tok_s")
            if isinstance(v, (int, float)):
                rate.add_metric([model, a.name], float(v))
        yield rate
        verdicts = GaugeMetricFamily("observatory_arm_verdict", "Arm verdict: 0 PASS, 1 WARN, 2 INVALID, 3 FAIL",
                                     labels=["model", "arm"])
        for arm, verdict in arm_verdicts(data).items():
            verdicts.add_metric([model, arm], VERDICT_CODE[verdict])
        yield verdicts
        session = GaugeMetricFamily("observatory_session_verdict",
                                    "Session verdict: 0 PASS, 1 WARN, 2 INVALID, 3 FAIL", labels=["model", "session"])
        session.add_metric([model, str(data.session.id)], VERDICT_CODE[data.verdict.verdict])
        yield session
        known = GaugeMetricFamily("observatory_known_findings", "Findings a known-findings ledger entry covers "
                                  "(KNOWN: shown, never counted)", labels=["model", "arm", "known"])
        for (arm, entry), n in known_counts(data).items():
            known.add_metric([model, arm, entry], n)
        yield known


def openmetrics_text(data: SessionView) -> str:
    """The session's figures and verdicts as an OpenMetrics text exposition (ends with ``# EOF``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SessionCollector(data))
    text: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]
    return text.decode("utf-8")
