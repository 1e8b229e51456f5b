"""Channel ``history``: a spec arm's acceptance and speed against the last nights (no requests of its own).

Acceptance that drops quietly over the nights (a drafter regressed, a
kernel changed) passes every same-session check. For each spec arm this
channel takes the earlier sessions in the same database with the same model,
arm name, engine version and suite (the stored per-arm summaries,
`observatory.judge.summaries`; only trusted arms; the last `NIGHTS`), keeps
out the nights this channel flagged (WARN or FAIL) and those whose session
verdict was FAIL or INVALID (`observatory.store.summary_rows.earlier_trusted`),
so that one bad night never joins the baseline (issue 29 item 6), and flags:

- ``drop``: alpha, tau, S or S_step below the earlier nights' median by more than
  their noise (`band`): `SIGMAS` robust standard deviations (MAD x
  `MAD_SIGMA`), at least `observatory.judge.summaries.DEFAULT_ACCEPTANCE_TOLERANCE`
  (5%) of the median for alpha and tau, and at least this session's own S
  noise (half its bootstrap interval, or the A/A throughput spread) for S,
  5% of the median only where the session measured none (`s_floor`);
  for S_step (S at the median engine step, `observatory.judge.step_time`:
  request-level S moved 3.7% between clean H200 sessions, the median step
  0.6%) at least `STEP_FLOOR` of the median or the session's own relative
  S noise (`step_floor`); never more than `MAX_MOVE` of the median;
- ``jump``: alpha or tau above the median beyond the same noise while the arm's
  output got more repetitive (its mean character 3-gram degeneracy score
  below the earlier nights' beyond the same band, at least
  `DEGENERACY_FLOOR`): acceptance bought with degenerate text.

The verdict's details store, per figure, the median, the band and the
session ids that made it, and the nights kept out with why.

A breach is a WARN; with ``--fail-on 'history_drop>X'`` a breach whose
relative move exceeds X is a FAIL. With fewer than `MIN_NIGHTS` earlier
sessions the verdict is SKIP, "not measurable: N earlier sessions".
"""

from __future__ import annotations

import statistics
from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.view import ChannelView
from observatory.judge.apply_gates import to_output
from observatory.judge.figures import compute_figures
from observatory.judge.summaries import DEFAULT_ACCEPTANCE_TOLERANCE, suite_hash, summary_model
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, PASS, SKIP, WARN
from observatory.store.stored import StoredArm, Verdict
from observatory.store.summary_rows import earlier_trusted

NAME = "history"
NIGHTS = 7
MIN_NIGHTS = 3
SIGMAS = 3.0
DEGENERACY_FLOOR = 0.05
# MAD x 1.4826 estimates a normal standard deviation (the MAD of N(0, s) is s / 1.4826)
MAD_SIGMA = 1.4826
# the allowed move never exceeds half the median: a figure that can fall by half as "noise" cannot vouch for
# anything (every fault issue 29 item 6 records moved a figure by 74-75%; docs/channels.md, history)
MAX_MOVE = 0.5
FAIL_KEY = "history_drop"
# A drop of acceptance (or of the per-step speedup) by at least half against the earlier nights, beyond their band,
# FAILs without --fail-on (issue 46 item 4: severity by impact). The field cases it stops: acceptance 86% -> 11%
# after an upgrade, 45.6% -> 8% for one parallel layout, a drafter zeroed by a weight reload (BUGZOO "acceptance
# lost, output intact", "drafter broken after a lifecycle event"); on the CPU nights a four times slower spec
# step moved S_step by -78% (examples/cpu-fault-nights). Clean nights move alpha by 0 on a fixed suite (docs/
# design.md 3.6) and S_step by 3.9% (SD) on the CPU host, 0.36% on the H200: half is 13-140 of those SDs.
COLLAPSE = 0.5
COLLAPSE_FIGURES = ("alpha", "S_step")
# least relative move of S_step (`step_floor`): 3 x the H200's between-session SD of the median spec step, rounded up
STEP_FLOOR = 0.02


def plan(suite: list[Probe]) -> list[Probe]:
    """No requests: the channel reads what the session and the earlier ones stored."""
    return []


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Nothing to send."""


def degeneracy_score(view: ChannelView, session_id: int, arm_id: int) -> float | None:
    """The mean character 3-gram score of an arm's scored streamed outputs (probes that name degeneracy)."""
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


def _earlier(view: ChannelView, arm: StoredArm, model: str | None,
             suite: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(baseline, kept out): the last NIGHTS trusted, unflagged summaries of earlier sessions with this model,
    arm, engine version and suite, and the newer nights kept out of it.

    Read straight from the stored summaries (written when each session was
    judged), never built here: building them would judge nothing new and
    would summarise this very session half-judged.
    """
    return earlier_trusted(view.store, view.session_id, arm.name, model, suite, arm.engine_version, NIGHTS,
                           flagged_by=NAME)


def band(values: list[float], floor: float) -> tuple[float, float]:
    """(median, allowed move) of earlier VALUES: SIGMAS x MAD x MAD_SIGMA, at least FLOOR, at most MAX_MOVE
    of the median (a figure cannot move further than that and still be the same deployment)."""
    med = statistics.median(values)
    mad = statistics.median(abs(v - med) for v in values)
    return med, min(max(SIGMAS * MAD_SIGMA * mad, floor), MAX_MOVE * abs(med))


def _own_s_noise(fig: dict[str, Any]) -> float:
    """Half this session's S interval on its suite (paired timing's within-probe bootstrap, where it has
    one: the probes are the same every night), else half its S interval, at least the A/A spread (timed
    blocks one after another; paired timing cancels the drift that spread measures, observatory.judge.paired)."""
    vb = fig.get("vs_base") or {}
    ci = vb.get("ci_suite") or vb.get("ci")
    half = (ci[1] - ci[0]) / 2 if isinstance(ci, (list, tuple)) and len(ci) == 2 else 0.0
    if vb.get("design") in ("paired", "bracketed"):  # base timed beside the arm: the drift is in the interval
        return float(half)
    spread = (fig.get("noise_floor") or {}).get("throughput_spread") or 0.0
    return max(float(half), float(spread))


def s_floor(median: float, own_noise: float) -> float:
    """Least allowed move of S: this session's own measured S noise where it has one, else 5% of the median.

    A fixed 5% floor would hide the very slow-down the history exists for (a
    spec step 5% slower moves S by 4.8%); with paired timing the session
    states its own S within about +-2% (docs/channels.md, history), and that
    measured precision, not a guess, is the least move it can vouch for."""
    return own_noise if own_noise > 0 else DEFAULT_ACCEPTANCE_TOLERANCE * abs(median)


def step_floor(median: float, fig: dict[str, Any]) -> float:
    """Least allowed move of S_step (S at the median engine step, observatory.judge.step_time): `STEP_FLOOR`
    of the median, at least S_step's own relative half-width (its interval in this session) and this
    session's own relative S noise (a host noisy enough to widen S's interval moves its steps too).

    STEP_FLOOR from the H200 (examples/h200-speed/README.md): over seven clean
    sessions on unchanged servers the spec arm's median step had a
    between-session SD of 0.6%, so 3 SD is 1.8%, rounded up to 2%; a 5%
    slower spec step moved S_step by 4.8-5.3% in each of its four sessions."""
    vb = fig.get("vs_base") or {}
    s = vb.get("S")
    own = _own_s_noise(fig) / s if isinstance(s, (int, float)) and s > 0 else 0.0
    step_half = (vb.get("step") or {}).get("half_width")
    return max(STEP_FLOOR, own, float(step_half or 0.0)) * abs(median)


def judge(view: ChannelView) -> list[Verdict]:
    """Per spec arm: this session's alpha, tau, S and degeneracy against the earlier nights."""
    session = view.store.session(view.session_id)
    fail_on = dict((session.options or {}).get("fail_on") or {})
    limit = fail_on.get(FAIL_KEY)
    suite = suite_hash(p.content_hash for p in view.store.probes(view.session_id)
                       if not (p.definition or {}).get("channel"))
    figures: dict[int, dict[str, Any]] | None = None
    rows: list[Verdict] = []
    for arm in view.arms:
        if not (arm.launch or {}).get("speculative_config") or arm.status != "ok":
            continue
        earlier, kept_out = _earlier(view, arm, summary_model(arm.model, session.model), suite)
        out = [{"session_id": x["session_id"], "why": x["kept_out"]} for x in kept_out]
        if len(earlier) < MIN_NIGHTS:
            rows.append(view.verdict(arm, SKIP, f"not measurable: {len(earlier)} earlier sessions "
                                     f"(same model, arm, engine {arm.engine_version}, suite; {MIN_NIGHTS} needed; "
                                     f"{len(out)} kept out)",
                                     {"earlier_sessions": [x["session_id"] for x in earlier], "kept_out": out}))
            continue
        if figures is None:
            figures = compute_figures(view.store, view.session_id)
        fig = figures.get(arm.id) or {}
        acc = fig.get("acceptance") or {}
        vb = fig.get("vs_base") or {}
        now = {"alpha": acc.get("alpha"), "tau": acc.get("tau"), "S": vb.get("S"),
               "S_step": (vb.get("step") or {}).get("S")}
        table: list[dict[str, Any]] = []
        drops: list[tuple[str, float]] = []
        jumps: list[tuple[str, float]] = []
        for fname, value in now.items():
            used = [x for x in earlier if x[fname] is not None]
            past = [float(x[fname]) for x in used]
            if value is None or len(past) < MIN_NIGHTS:
                table.append({"figure": fname, "now": value, "nights": len(past), "result": "not measurable"})
                continue
            med = statistics.median(past)
            floor = (s_floor(med, _own_s_noise(fig)) if fname == "S"
                     else step_floor(med, fig) if fname == "S_step"
                     else DEFAULT_ACCEPTANCE_TOLERANCE * abs(med))
            mean, tol = band(past, floor)
            move = value - mean
            result = "within noise"
            if move < -tol:
                result = "drop beyond noise"
                drops.append((fname, -move / mean if mean else 0.0))
            elif move > tol and fname not in ("S", "S_step"):
                result = "rise beyond noise"
                jumps.append((fname, move / mean if mean else 0.0))
            table.append({"figure": fname, "now": round(value, 4), "median": round(mean, 4), "noise": round(tol, 4),
                          "band": [round(mean - tol, 4), round(mean + tol, 4)], "nights": len(past),
                          "session_ids": [x["session_id"] for x in used], "result": result})
        degenerate = _more_repetitive(view, arm, earlier, table) if jumps else False
        breaches = drops + (jumps if degenerate else [])
        ids = [x["session_id"] for x in earlier]
        details = {"table": table, "earlier_sessions": ids, "kept_out": out}
        made = "sessions " + " ".join(map(str, ids))
        if out:
            made += "; kept out: " + ", ".join(f"{o['session_id']} ({o['why']})" for o in out)
        if not breaches:
            rows.append(view.verdict(arm, PASS, f"alpha, tau, S and S_step within the band of {len(earlier)} earlier "
                                     f"sessions ({made})", details))
            continue
        worst = max(breaches, key=lambda b: b[1])
        what = "drop" if worst in drops else "jump with more repetitive output"
        collapse = next((d for d in drops if d[0] in COLLAPSE_FIGURES and d[1] >= COLLAPSE), None)
        if limit is not None and worst[1] > limit:
            verdict, how = FAIL, f" > {FAIL_KEY} {limit:g}"
        elif limit is None and collapse is not None:
            worst, what = collapse, "drop"
            verdict, how = FAIL, f" (a collapse: at least {COLLAPSE:.0%})"
        else:
            verdict, how = WARN, ""
        rows.append(view.verdict(arm, verdict, f"{worst[0]} {what}: {worst[1]:.1%}{how} against the median of "
                                 f"{len(earlier)} earlier sessions, beyond their band ({made})", details))
    return rows


def _more_repetitive(view: ChannelView, arm: StoredArm, earlier: list[dict[str, Any]],
                     table: list[dict[str, Any]]) -> bool:
    """Whether this session's output scores lower (more repetitive) than the earlier nights', beyond their noise."""
    now = degeneracy_score(view, view.session_id, arm.id)
    past = [s for s in (degeneracy_score(view, x["session_id"], x["arm_id"]) for x in earlier) if s is not None]
    if now is None or len(past) < MIN_NIGHTS:
        table.append({"figure": "degeneracy", "now": now, "nights": len(past), "result": "not measurable"})
        return False
    mean, tol = band(past, DEGENERACY_FLOOR)
    worse = now < mean - tol
    table.append({"figure": "degeneracy", "now": round(now, 4), "median": round(mean, 4), "noise": round(tol, 4),
                  "band": [round(mean - tol, 4), round(mean + tol, 4)], "nights": len(past),
                  "result": "more repetitive" if worse else "within noise"})
    return worse


CHANNEL = Channel(
    name=NAME,
    title="Acceptance and speed against history",
    catches="acceptance or speedup that drops quietly over the nights; acceptance bought with degenerate output",
    plan=plan,
    measure=measure,
    judge=judge,
    options={"nights": NIGHTS, "min_nights": MIN_NIGHTS, "sigmas": SIGMAS, "mad_sigma": MAD_SIGMA,
             "max_move": MAX_MOVE, "fail_on": f"{FAIL_KEY}>X"},
)
