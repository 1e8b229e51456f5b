"""A session's results as OpenMetrics text (``--metrics-out FILE.prom`` on compare, gate and report).

For a Prometheus/Grafana dashboard that tracks each night: Prometheus' node
exporter textfile collector reads ``*.prom`` files only, so name the file
``.prom``. Written by prometheus-client's own OpenMetrics exposition, so names,
labels and escaping follow the format. Series are stable from night to night
(no session id in any label: a label that changes every night makes a new
series every night); the model is labelled by name (``model_name``: the last
part of a filesystem path, a hub id such as ``Qwen/Qwen3-8B`` as given). A
figure that was not measured has no sample (never a 0).

Per arm (labels ``model``, ``engine``, ``arm``):

- ``observatory_alpha``, ``observatory_tau``: acceptance rate and mean
  acceptance length (spec arms);
- ``observatory_speedup``, ``observatory_speedup_ci_low``,
  ``observatory_speedup_ci_high``: S against base and its 95% bootstrap interval;
- ``observatory_single_stream_tokens_per_second``, ``observatory_ttft_seconds``
  (median): every arm, base included;
- ``observatory_latency_seconds`` (labels also ``concurrency``, ``figure``:
  ttft, tpot, itl, e2el; ``quantile``: 0.5, 0.9, 0.99): the latency
  percentiles `vllm bench serve` reports (observatory.judge.latency); a figure
  the bursty-stream rule calls not measurable has no sample;
- ``observatory_arm_verdict``: the worst counted level among the session
  verdict's reasons about the arm, as a severity code (``VERDICT_CODE``).

Per model (label ``model``):

- ``observatory_session_verdict``: the session verdict as a severity code;
- ``observatory_exit_code``: the exit status of the command that wrote the
  file (0 PASS or WARN, 1 FAIL, 2 INVALID, 3 setup error, 4 internal error,
  5 storage failure, 130 interrupted): the same number CI saw;
- ``observatory_last_run_timestamp_seconds``: when the run ended (Unix time), so
  a dashboard tells a night that did not run from a night that passed;
- ``observatory_session_id``: the stored session's id as a value (not a label),
  to find the night's report.

Why the verdict has a severity code apart from the exit code: the exit code
puts WARN with PASS (0: CI must not fail on a WARN) and INVALID above FAIL
(2 > 1), while a dashboard wants WARN coloured apart and the worst arm as
``max()``. ``VERDICT_CODE`` orders by severity: 0 PASS, 1 WARN, 2 INVALID, 3 FAIL.

A run that ends before anything is measured (a setup error, exit 3; an
internal error, 4; storage, 5) writes ``failure_text``: the exit code and the
timestamp only, so the night's figures are gone from the dashboard instead of
repeating the previous night's.
- ``observatory_known_findings`` (labels ``model``, ``arm``, ``known``): how many
  of the session verdict's reasons about the arm a known-findings ledger's
  entry ``known`` covers (docs/known.md): shown, never counted in the verdict.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from observatory.judge.summaries import arm_summaries
from observatory.model.read_model import SessionView
from observatory.model.vocabulary import COUNTED_LEVELS, EXIT, FAIL, INVALID, KNOWN, PASS, WARN, worst

VERDICT_CODE = {PASS: 0, WARN: 1, INVALID: 2, FAIL: 3}
QUANTILES = (("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99"))
LATENCY_FIGURES = ("ttft", "tpot", "itl", "e2el")

# (metric name, help, the arm summary's key, scale)
_FIGURES = (
    ("observatory_alpha", "Acceptance rate alpha = accepted / draft tokens", "alpha", 1.0),
    ("observatory_tau", "Mean acceptance length tau = 1 + accepted / drafts", "tau", 1.0),
    ("observatory_speedup", "S = single-stream tok/s of the arm / of base, same session", "S", 1.0),
    ("observatory_speedup_ci_low", "Lower end of the 95% bootstrap interval of S", "S_lo", 1.0),
    ("observatory_speedup_ci_high", "Upper end of the 95% bootstrap interval of S", "S_hi", 1.0),
    ("observatory_ttft_seconds", "Median time to first token", "ttft_ms", 0.001),
)
ARM_LABELS = ["model", "engine", "arm"]
# every metric name this module can write (the Grafana dashboard's test reads it)
METRIC_NAMES = (*(f[0] for f in _FIGURES), "observatory_single_stream_tokens_per_second",
                "observatory_latency_seconds", "observatory_arm_verdict", "observatory_session_verdict",
                "observatory_exit_code", "observatory_last_run_timestamp_seconds", "observatory_session_id",
                "observatory_known_findings")


def model_name(model: str | None) -> str:
    """The model as a dashboard names it: a filesystem path's last part, anything else (a hub id) as given."""
    if not model:
        return "unknown"
    text = str(model).rstrip("/")
    if text.startswith(("/", "./", "../", "~")) or Path(text).exists():
        return Path(text).name or text
    return text


def arm_verdicts(data: SessionView) -> dict[str, str]:
    """Each arm's worst counted level among the session verdict's reasons about it (PASS if none)."""
    levels: dict[str, set[str]] = {}
    for r in data.verdict.reasons:
        if r.arm is not None and r.level in COUNTED_LEVELS:
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


def _epoch(iso: str | None) -> float:
    """An ISO time as stored (UTC, maybe with Z) as Unix seconds; now when unknown."""
    if iso:
        try:
            return datetime.fromisoformat(iso.removesuffix("Z")).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            pass
    return time.time()


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _run_families(model: str, exit_code: int, ended: float, session_id: int | None,
                  verdict: str | None) -> Iterator[GaugeMetricFamily]:
    families = []
    if verdict is not None:
        g = GaugeMetricFamily("observatory_session_verdict",
                              "Session verdict, severity code: 0 PASS, 1 WARN, 2 INVALID, 3 FAIL", labels=["model"])
        g.add_metric([model], VERDICT_CODE[verdict])
        families.append(g)
    for name, text, value in (
            ("observatory_exit_code", "Exit status of the run: 0 PASS/WARN, 1 FAIL, 2 INVALID, 3 setup error, "
             "4 internal error, 5 storage failure, 130 interrupted", float(exit_code)),
            ("observatory_last_run_timestamp_seconds", "When the run ended, Unix time", ended),
            ("observatory_session_id", "The stored session's id (a value, never a label)",
             None if session_id is None else float(session_id))):
        if value is None:
            continue
        g = GaugeMetricFamily(name, text, labels=["model"])
        g.add_metric([model], value)
        families.append(g)
    yield from families


class _SessionCollector(Collector):
    def __init__(self, data: SessionView, exit_code: int):
        self.data = data
        self.exit_code = exit_code

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self.data
        model = model_name(data.session.model)
        engines = {a.name: a.engine or "unknown" for a in data.arms}
        rows = arm_summaries(data)
        for name, text, key, scale in _FIGURES:
            g = GaugeMetricFamily(name, text, labels=ARM_LABELS)
            for row in rows:
                if (v := _number(row.get(key))) is not None:
                    g.add_metric([model, engines.get(row["arm"], "unknown"), row["arm"]], v * scale)
            yield g
        rate = GaugeMetricFamily("observatory_single_stream_tokens_per_second",
                                 "Single-stream tokens per second, end to end", labels=ARM_LABELS)
        latency = GaugeMetricFamily("observatory_latency_seconds",
                                    "Latency percentiles per concurrency level as vllm bench serve reports them "
                                    "(ttft, tpot, itl, e2el)", labels=[*ARM_LABELS, "concurrency", "figure", "quantile"])
        for a in data.arms:
            spd: Mapping[str, Any] = a.figures.speed or {}
            if (v := _number(spd.get("single_stream_tok_s"))) is not None:
                rate.add_metric([model, engines[a.name], a.name], v)
            for level, figs in sorted((spd.get("latency") or {}).get("levels", {}).items()):
                for fig in LATENCY_FIGURES:
                    for key, q in QUANTILES:
                        if (ms := _number(((figs or {}).get(f"{fig}_ms") or {}).get(key))) is not None:
                            latency.add_metric([model, engines[a.name], a.name, str(level), fig, q], ms / 1000.0)
        yield rate
        yield latency
        verdicts = GaugeMetricFamily("observatory_arm_verdict",
                                     "Arm verdict, severity code: 0 PASS, 1 WARN, 2 INVALID, 3 FAIL", labels=ARM_LABELS)
        for arm, verdict in arm_verdicts(data).items():
            verdicts.add_metric([model, engines[arm], arm], VERDICT_CODE[verdict])
        yield verdicts
        s = data.session
        yield from _run_families(model, self.exit_code, _epoch(s.finished_at or s.started_at), s.id,
                                 data.verdict.verdict)
        known = GaugeMetricFamily("observatory_known_findings", "Findings a known-findings ledger entry covers "
                                  "(KNOWN: shown, never counted)", labels=["model", "arm", "known"])
        for (arm, entry), n in known_counts(data).items():
            known.add_metric([model, arm, entry], n)
        yield known


class _FailureCollector(Collector):
    def __init__(self, model: str, exit_code: int):
        self.model, self.exit_code = model, exit_code

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from _run_families(self.model, self.exit_code, time.time(), None, None)


def _text(collector: Collector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    text: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]
    return text.decode("utf-8")


def openmetrics_text(data: SessionView, exit_code: int | None = None) -> str:
    """The session's figures and verdicts as an OpenMetrics text exposition (ends with ``# EOF``).

    EXIT_CODE: the exit status of the command writing it (default: the session verdict's, ``EXIT``)."""
    return _text(_SessionCollector(data, EXIT[data.verdict.verdict] if exit_code is None else exit_code))


def failure_text(model: str | None, exit_code: int) -> str:
    """What a run that measured nothing writes: its exit code and when it ended, for MODEL (as given, or None)."""
    return _text(_FailureCollector(model_name(model), exit_code))
