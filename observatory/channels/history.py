"""Channel ``history``: a spec arm's acceptance and speed against the last nights (no requests of its own).

Acceptance that drops quietly over the nights (a drafter regressed, a
kernel changed) passes every same-session check. For each spec arm this
channel takes the earlier sessions in the same database with the same model,
arm name, engine version and suite (the stored per-arm summaries,
`observatory.judge.summaries`; only trusted arms; the last `NIGHTS`), and flags:

- ``drop``: alpha, tau or S below the earlier nights' mean by more than
  their noise: `SIGMAS` standard deviations of the earlier values, at least
  `observatory.judge.summaries.DEFAULT_ACCEPTANCE_TOLERANCE` (5%) of the mean for
  alpha and tau, and at least this session's own S noise (half its bootstrap
  interval, or the A/A throughput spread) for S;
- ``jump``: alpha or tau above the mean beyond the same noise while the arm's
  output got more repetitive (its mean character 3-gram degeneracy score
  below the earlier nights' beyond `SIGMAS` standard deviations, at least
  `DEGENERACY_FLOOR`): acceptance bought with degenerate text.

A breach is a WARN; with ``--fail-on 'history_drop>X'`` a breach whose
relative move exceeds X is a FAIL. With fewer than `MIN_NIGHTS` earlier
sessions the verdict is SKIP, "not measurable: N earlier sessions".
"""

from __future__ import annotations

import statistics
from typing import Any

from observatory.channels import Channel
from observatory.channels.view import ChannelView
from observatory.judge.summaries import DEFAULT_ACCEPTANCE_TOLERANCE, suite_hash
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, VerdictRow
from observatory.store.summaries import earlier_trusted

NAME = "history"
NIGHTS = 7
MIN_NIGHTS = 3
SIGMAS = 3.0
DEGENERACY_FLOOR = 0.05
FAIL_KEY = "history_drop"


def plan(suite: list[Probe]) -> list[Probe]:
    """No requests: the channel reads what the session and the earlier ones stored."""
    return []


def measure(run: Any, probes: list[Probe]) -> None:
    """Nothing to send."""


def degeneracy_score(view: ChannelView, session_id: int, arm_id: int) -> float | None:
    """The mean character 3-gram score of an arm's scored streamed outputs (probes that name degeneracy)."""
    from observatory.judge.session import to_output

    if "degeneracy" not in view.registry:
        return None
    gate = view.registry.get("degeneracy")
    probes = {p.id: Probe.from_dict(p.definition) for p in view.store.probes(session_id)}
    scores = []
    for r in view.store.results(arm_id, "stream"):
        probe = probes.get(r.probe_id)
        if not r.ok or probe is None or "degeneracy" not in probe.gates:
            continue
        score = (gate.check(to_output(r), probe).details or {}).get("score")
        if isinstance(score, (int, float)):
            scores.append(float(score))
    return statistics.fmean(scores) if scores else None


def _earlier(view: ChannelView, arm: ArmRow, model: str | None, suite: str) -> list[dict[str, Any]]:
    """The last NIGHTS trusted summaries of earlier sessions with this model, arm, engine version and suite.

    Read straight from the stored summaries (written when each session was
    judged), never built here: building them would judge nothing new and
    would summarise this very session half-judged.
    """
    return earlier_trusted(view.store, view.session_id, arm.name, model, suite, arm.engine_version, NIGHTS)


def _noise(values: list[float], floor: float) -> tuple[float, float]:
    """(mean, allowed move) of earlier VALUES: SIGMAS standard deviations, at least FLOOR."""
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return mean, max(SIGMAS * sd, floor)


def _own_s_noise(fig: dict[str, Any]) -> float:
    vb = fig.get("vs_base") or {}
    ci = vb.get("ci")
    half = (ci[1] - ci[0]) / 2 if isinstance(ci, (list, tuple)) and len(ci) == 2 else 0.0
    spread = (fig.get("noise_floor") or {}).get("throughput_spread") or 0.0
    return max(float(half), float(spread))


def judge(view: ChannelView) -> list[VerdictRow]:
    """Per spec arm: this session's alpha, tau, S and degeneracy against the earlier nights."""
    from observatory.judge.figures import compute_figures

    session = view.store.session(view.session_id)
    fail_on = dict((session.options or {}).get("fail_on") or {})
    limit = fail_on.get(FAIL_KEY)
    suite = suite_hash(p.content_hash for p in view.store.probes(view.session_id)
                       if not (p.definition or {}).get("channel"))
    figures: dict[int, dict[str, Any]] | None = None
    rows: list[VerdictRow] = []
    for arm in view.arms:
        if not (arm.launch or {}).get("speculative_config") or arm.status != "ok":
            continue
        earlier = _earlier(view, arm, session.model, suite)
        if len(earlier) < MIN_NIGHTS:
            rows.append(view.verdict(arm, "SKIP", f"not measurable: {len(earlier)} earlier sessions "
                                     f"(same model, arm, engine {arm.engine_version}, suite; {MIN_NIGHTS} needed)",
                                     {"earlier_sessions": [x["session_id"] for x in earlier]}))
            continue
        if figures is None:
            figures = compute_figures(view.store, view.session_id)
        fig = figures.get(arm.id) or {}
        acc = fig.get("acceptance") or {}
        now = {"alpha": acc.get("alpha"), "tau": acc.get("tau"), "S": (fig.get("vs_base") or {}).get("S")}
        table: list[dict[str, Any]] = []
        drops: list[tuple[str, float]] = []
        jumps: list[tuple[str, float]] = []
        for fname, value in now.items():
            past = [float(x[fname]) for x in earlier if x[fname] is not None]
            if value is None or len(past) < MIN_NIGHTS:
                table.append({"figure": fname, "now": value, "nights": len(past), "result": "not measurable"})
                continue
            mean, tol = _noise(past, DEFAULT_ACCEPTANCE_TOLERANCE * abs(statistics.fmean(past)))
            if fname == "S":
                tol = max(tol, _own_s_noise(fig))
            move = value - mean
            result = "within noise"
            if move < -tol:
                result = "drop beyond noise"
                drops.append((fname, -move / mean if mean else 0.0))
            elif move > tol and fname != "S":
                result = "rise beyond noise"
                jumps.append((fname, move / mean if mean else 0.0))
            table.append({"figure": fname, "now": round(value, 4), "mean": round(mean, 4), "noise": round(tol, 4),
                          "nights": len(past), "result": result})
        degenerate = _more_repetitive(view, arm, earlier, table) if jumps else False
        breaches = drops + (jumps if degenerate else [])
        details = {"table": table, "earlier_sessions": [x["session_id"] for x in earlier]}
        if not breaches:
            rows.append(view.verdict(arm, "PASS", f"alpha, tau and S within the noise of {len(earlier)} earlier "
                                     "sessions", details))
            continue
        worst = max(breaches, key=lambda b: b[1])
        what = "drop" if worst in drops else "jump with more repetitive output"
        verdict = "FAIL" if limit is not None and worst[1] > limit else "WARN"
        how = f" > {FAIL_KEY} {limit:g}" if verdict == "FAIL" else ""
        rows.append(view.verdict(arm, verdict, f"{worst[0]} {what}: {worst[1]:.1%}{how} against the mean of "
                                 f"{len(earlier)} earlier sessions, beyond their noise", details))
    return rows


def _more_repetitive(view: ChannelView, arm: ArmRow, earlier: list[dict[str, Any]],
                     table: list[dict[str, Any]]) -> bool:
    """Whether this session's output scores lower (more repetitive) than the earlier nights', beyond their noise."""
    now = degeneracy_score(view, view.session_id, arm.id)
    past = [s for s in (degeneracy_score(view, x["session_id"], x["arm_id"]) for x in earlier) if s is not None]
    if now is None or len(past) < MIN_NIGHTS:
        table.append({"figure": "degeneracy", "now": now, "nights": len(past), "result": "not measurable"})
        return False
    mean, tol = _noise(past, DEGENERACY_FLOOR)
    worse = now < mean - tol
    table.append({"figure": "degeneracy", "now": round(now, 4), "mean": round(mean, 4), "noise": round(tol, 4),
                  "nights": len(past), "result": "more repetitive" if worse else "within noise"})
    return worse


CHANNEL = Channel(
    name=NAME,
    title="Acceptance and speed against history",
    catches="acceptance or speedup that drops quietly over the nights; acceptance bought with degenerate output",
    plan=plan,
    measure=measure,
    judge=judge,
    options={"nights": NIGHTS, "min_nights": MIN_NIGHTS, "sigmas": SIGMAS, "fail_on": f"{FAIL_KEY}>X"},
)
