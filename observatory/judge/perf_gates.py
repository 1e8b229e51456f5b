"""Performance gates of one spec arm against the base arm (docs/design.md section 3).

Each check gives PASS, WARN, FAIL or SKIP with its reason, value and threshold:

- ``speedup``: S below 1 beyond the noise (the A/A throughput spread and
  the bootstrap CI of S, each where known) is a WARN; below ``SPEEDUP_FAIL_BELOW`` (0.9, or the
  user's ``speedup<X``) beyond the noise is a FAIL even without ``--fail-on``:
  a clearly slower deployment. Below but within the noise is a PASS whose
  reason says "within noise" and the smallest change in S the session could
  detect (observatory/judge/precision.py), so it claims no more than that.
- ``ttft_ratio``: median TTFT of the spec arm over base's above the threshold.
- ``acceptance_floor``: alpha below the floor, the arm's and each
  concurrency level's (acceptance can collapse under concurrency alone).
- ``stream_tau``: tokens per streamed chunk against tau from the counters
  (catches counters that lie or count the wrong thing). WARN only; value is
  the stream's tau, threshold the counters' tau; the allowed gap is three
  standard errors of the chunk sizes plus 5% of tau. The first chunk (the
  prefill's token) and the last (a step a stop may cut) of each response are
  left out, so a truthful engine gives the same tau both ways.
- ``token_count``: streamed ids against ``usage.completion_tokens``. WARN
  only; value is the ids' total, threshold the usage total.
- ``steady_state``, ``gpu_clocks``, ``cuda_graphs`` (issue 29 items 3-4), of
  this arm and its base: WARN (speed not trustworthy) where the timed requests
  never settled (observatory/judge/steady_state.py), a timed block's SM clock
  moved (observatory/engines/gpu_clocks.py), or the timed steps ran eagerly
  (observatory/judge/graph_coverage.py); SKIP where not measurable or not
  applicable (no nvidia-smi, the CPU engine).

Without user thresholds (``--fail-on``) a breach is a WARN (but for the
speedup floor above); with them, the checks the user named FAIL. A figure that cannot be measured (bursty stream,
counters not reported, no base arm, an arm that ran apart from base:
CROSS_SESSION) is a SKIP saying why, never a PASS.
"""

from __future__ import annotations

import re
from typing import Any

from observatory.engines.host_load import BUSY_HOST_SHARE
from observatory.judge.precision import detectable_words
from observatory.judge.stats import binom_upper
from observatory.model.errors import ObservatoryError
from observatory.model.vocabulary import (
    ACCEPTANCE_FLOOR,
    FAIL,
    INVALID,
    PASS,
    SKIP,
    SPEEDUP,
    TOKEN_COUNT,
    TTFT_RATIO,
    WARN,
)

# Defaults when the user set no threshold: breaches WARN.
DEFAULTS = {SPEEDUP: 1.0, TTFT_RATIO: 2.0, "acceptance": 0.2}
# S whose whole noise (A/A spread and 95% interval) lies below this FAILs without --fail-on:
# a clearly slower deployment. Derivation from measured figures: docs/design.md section 3.3.
SPEEDUP_FAIL_BELOW = 0.9
# ... and only where it stands even had the client added its own largest measured cost to every one of the spec
# arm's requests and nothing to base's: the observatory's client CPU per request measured 3-30 ms
# (benchmarks/README.md), so a 40 ms request cannot be called slow by 10%, while an arm five times slower than
# base's 60 ms requests is slower whatever the client did (issue 46 item 3; it replaces a "median request under
# 100 ms" exemption that excused exactly that arm).
CLIENT_COST_S = 0.030
# A drafter whose acceptance lies below this beyond doubt (its one-sided upper bound at DEAD_CONFIDENCE) is dead:
# FAIL by default (issue 46 item 4; `acceptance_check` says why 5%).
DEAD_DRAFTER_ALPHA = 0.05
DEAD_CONFIDENCE = 0.999
# history_drop: the history channel's (observatory/channels/history.py) relative move that FAILs
_OPS = {SPEEDUP: "<", TTFT_RATIO: ">", "acceptance": "<", "history_drop": ">"}
STREAM_TAU_SIGMAS = 3.0
STREAM_TAU_REL = 0.05  # allowance for chunks a parser swallows or merges
_RULE = re.compile(r"(?P<name>[a-z_]+)\s*(?P<op>[<>])\s*(?P<value>[0-9]*\.?[0-9]+)")


def parse_fail_on(text: str | None) -> dict[str, float]:
    """'speedup<1.0,ttft_ratio>3,acceptance<0.5' -> {"speedup": 1.0, "ttft_ratio": 3.0, "acceptance": 0.5}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = _RULE.fullmatch(part.strip())
        if m is None or _OPS.get(m["name"]) != m["op"]:
            raise ObservatoryError(f"--fail-on: cannot read {part.strip()!r}; write e.g. "
                                   "'speedup<1.0,ttft_ratio>3,acceptance<0.5' (speedup<, ttft_ratio>, acceptance<, history_drop>)")
        out[m["name"]] = float(m["value"])
    return out


def _entry(check: str, verdict: str, reason: str, value: float | None, threshold: float | None) -> dict[str, Any]:
    return {"check": check, "verdict": verdict, "reason": reason, "value": value, "threshold": threshold}


def _threshold(name: str, fail_on: dict[str, float]) -> tuple[float, str]:
    """(threshold, verdict of a breach): the user's with FAIL, else the default with WARN."""
    if name in fail_on:
        return fail_on[name], FAIL
    return DEFAULTS[name], WARN


# A clean spec step on CPU cores costs about k + 1 base steps (compute-bound: r = 2.4-2.7 at k = 1, 3.2-3.4 at k = 2 on
# every clean CPU night, docs/design.md 3.7); twice that is beyond what verifying k + 1 tokens and drafting costs
STEP_COST_LIMIT = 2.0


def _noise(vb: dict[str, Any], floor: dict[str, Any] | None) -> tuple[float | None, str, str | None]:
    """(the upper end of S's noise, its wording, why the host's drift is not in it).

    The upper end is what must lie below a threshold for S to be below it beyond the noise (None: the noise is
    unknown). Bracketed timing: the drift-corrected interval (observatory.judge.bracketed); paired: the pairs'
    interval (pairs cancel the drift the A/A spread measures); sequential blocks: S plus the A/A throughput
    spread (the drift between arms) and the interval's upper end (the arm's own requests), each where known.
    The third item says why the drift between arms is unmeasured (sequential timing without an A/A copy): the
    default floor then cannot FAIL.
    """
    S = float(vb["S"])
    spread = (floor or {}).get("throughput_spread")
    ci = vb.get("ci")
    busy = vb.get("host_foreign_share")
    if busy is not None and busy >= BUSY_HOST_SHARE:
        # other work held the host's cores while the arm was timed: a load that comes and goes within a block,
        # or slows one engine more than the other, is in no bracket (observatory/engines/host_load.py)
        upper, words, _ = _noise({**vb, "host_foreign_share": None}, floor)
        return upper, words, (f"other work took {busy:.0%} of the host's CPU while this arm was timed "
                              f"(from {BUSY_HOST_SHARE:.0%} on, the speed measured is the host's)")
    if vb.get("design") == "bracketed" and ci:
        drift = vb.get("drift")
        shown = "unknown" if drift is None else f"{drift:+.1%}"
        return float(ci[1]), (f"drift-corrected 95% CI [{ci[0]:.2f}, {ci[1]:.2f}] against base timed before and "
                              f"after, base's drift {shown}"), None
    if vb.get("design") == "paired" and ci:
        # paired timing keeps both engines up and alternates their requests: on CPU cores (or a server whose
        # platform is unseen) the engine that just answered still holds the cores while the other's request runs,
        # so a clean arm can read far slower than its step is (a clean CPU night: S 0.18 with S_step 0.63,
        # examples/cpu-fault-nights night 8): that interference is not measured, so the default floor cannot FAIL
        shared = ("paired timing on shared CPU cores: the two engines' contention between alternating requests is "
                  "not measured (bracketed timing measures the drift)") if vb.get("pairs_share_cores") else None
        return float(ci[1]), f"paired 95% CI [{ci[0]:.2f}, {ci[1]:.2f}], {vb.get('pairs')} pairs", shared
    if spread is not None and ci:
        return max(S + float(spread), float(ci[1])), f"A/A spread {spread:.2f}, 95% CI [{ci[0]:.2f}, {ci[1]:.2f}]", None
    if spread is not None:
        return S + float(spread), f"A/A spread {spread:.2f}", None
    unmeasured = "the host's drift between arms was not measured (sequential timing, no A/A copy)"
    if ci:
        return float(ci[1]), f"95% CI [{ci[0]:.2f}, {ci[1]:.2f}]", unmeasured
    return None, "no A/A control and no CI: noise unknown", unmeasured


def _median_request_s(spd: dict[str, Any] | None) -> float | None:
    """The median end-to-end request time of an arm's single-stream samples ([tokens, seconds], ...)."""
    secs = sorted(float(x[1]) for x in (spd or {}).get("samples") or [] if len(x) == 2)
    return secs[len(secs) // 2] if secs else None


def client_bound(upper: float, spd: dict[str, Any] | None) -> tuple[float | None, str]:
    """(UPPER, S's noise's upper end, as it would be had the client added `CLIENT_COST_S` to each of the spec
    arm's requests (SPD: its speed figure) and nothing to base's, or None where its requests are not longer
    than that; the wording)."""
    t = _median_request_s(spd)
    if t is None:
        return None, "request times unknown"
    if t <= CLIENT_COST_S:
        return None, (f"median request {t * 1000:.0f} ms, not longer than the client's own cost of up to "
                      f"{CLIENT_COST_S * 1000:.0f} ms")
    bound = upper * t / (t - CLIENT_COST_S)
    return bound, (f"{bound:.2f} with up to {CLIENT_COST_S * 1000:.0f} ms of the client's own cost taken off each "
                   f"of its {t * 1000:.0f} ms requests")


def speedup_check(vb: dict[str, Any] | None, floor: dict[str, Any] | None, fail_on: dict[str, float],
                  speeds: list[dict[str, Any] | None] | None = None, untrusted: str | None = None) -> dict[str, Any]:
    """S against 1 (WARN) and the FAIL floor (``SPEEDUP_FAIL_BELOW`` or the user's ``speedup<X``), beyond the noise.

    Below a threshold but within the noise is a PASS whose reason says "within noise". Where bracketed timing
    measured the host drifting by more than the effect (|1 - S|), S is "not measurable" (SKIP), never a FAIL. The
    default floor FAILs only where the whole noise, the host's drift included (`_noise`), lies below it, the arm is
    trusted (UNTRUSTED: the validity code that says it is not, e.g. INVALID or CONFOUNDED) and the noise's upper
    end stays below it with the client's own cost taken off the arm's requests (`client_bound`; SPEEDS: the arm's
    and base's speed figures, when given); a user's threshold FAILs on unknown noise too (the user asked). The
    entry's threshold is the user's, else the floor on a FAIL and 1 otherwise.
    """
    thr = fail_on.get(SPEEDUP, SPEEDUP_FAIL_BELOW)
    warn_below = max(DEFAULTS[SPEEDUP], thr)
    shown = fail_on.get(SPEEDUP, DEFAULTS[SPEEDUP])  # the entry's threshold: the user's, else 1
    S = (vb or {}).get("S")
    if vb is None:
        return _entry(SPEEDUP, SKIP, "no base arm in this session: S not measurable", None, shown)
    if S is None:
        return _entry(SPEEDUP, SKIP, "S not measurable (no single-stream rate on this arm or base)", None, shown)
    if S >= warn_below:
        return _entry(SPEEDUP, PASS, f"S = {S:.2f} >= {warn_below:.2f}", S, shown)
    drift = vb.get("drift") if vb.get("design") == "bracketed" else None
    if drift is not None and abs(drift) > abs(1.0 - S):
        return _entry(SPEEDUP, SKIP, f"not measurable: the host drifted by {abs(drift):.0%} across this arm's "
                      f"timing (base's rate before against after it), more than the effect (S = {S:.2f})", S, shown)
    upper, noise, unmeasured = _noise(vb, floor)
    if S < thr and (upper < thr if upper is not None else SPEEDUP in fail_on):
        why_not: str | None = None
        if SPEEDUP not in fail_on:
            bound, words = client_bound(upper, (speeds or [None])[0]) if speeds and upper is not None else (upper, "")
            why_not = (f"arm {untrusted}: its figures cannot back a FAIL" if untrusted else unmeasured
                       or (None if bound is not None and bound < thr else f"the noise's upper end {words}")
                       or compute_bound(vb, bound))
        if not why_not:
            return _entry(SPEEDUP, FAIL, f"S = {S:.2f} < {thr:.2f} beyond the noise ({noise}): clearly slower "
                          "than base", S, thr)
        noise = f"{noise}; not a FAIL: {why_not}"  # the default floor does not FAIL what the timing cannot back
    if upper is None or upper < warn_below:
        return _entry(SPEEDUP, WARN, f"S = {S:.2f} < {warn_below:.2f} beyond the noise ({noise})", S, shown)
    return _entry(SPEEDUP, PASS, f"S = {S:.2f} < {warn_below:.2f}, within noise ({noise}); "
                  f"{detectable_words(vb, None if vb.get('design') in ('paired', 'bracketed') else (floor or {}).get('throughput_spread'))}",
                  S, shown)


def compute_bound(vb: dict[str, Any], upper: float | None) -> str | None:
    """Why a CPU-served arm's S wholly below the floor is not a FAIL, or None where it is one.

    On CPU cores decode is compute-bound: a verify step of k + 1 tokens costs about k + 1 base steps, so
    speculation is slower there by design (clean CPU nights: S 0.59-0.72, one spec step r = tau / S = 2.4-3.4
    base steps at k = 1 and 2; docs/design.md 3.3a). What no clean step can cost is more than twice that:
    `STEP_COST_LIMIT` x (k + 1) base steps. A FAIL on a CPU engine needs r beyond it at the noise's upper end
    of S (r >= tau / UPPER): the four times slower step (r about 13 at k = 2) is; a clean arm slowed by a busy
    host (S 0.37 [0.25, 0.53], r >= 3.8) is not. VB: the arm's speed figures (``cpu_served``, ``tau``, ``k``)."""
    if not vb.get("cpu_served"):
        return None
    tau, k = vb.get("tau"), vb.get("k")
    if not isinstance(tau, (int, float)) or not isinstance(k, int) or upper is None or upper <= 0:
        return "a CPU engine (a verify step is compute-bound) and the step's cost in base steps is not known"
    limit = STEP_COST_LIMIT * (k + 1)
    r_low = float(tau) / upper
    if r_low > limit:
        return None
    return (f"a CPU engine, where a verify step of k + 1 = {k + 1} tokens is compute-bound: one spec step costs "
            f"at least {r_low:.1f} base steps (tau {tau:.2f} / S), within {limit:g} ({STEP_COST_LIMIT:g} x (k + 1))")


def ttft_check(spd: dict[str, Any], base_spd: dict[str, Any] | None, fail_on: dict[str, float],
               vb: dict[str, Any] | None = None) -> dict[str, Any]:
    """Median TTFT of the spec arm over base's: base's blocks timed right before and after the arm where the
    timing was bracketed (the larger of the two, so the host's drift cannot make the ratio), else base's own.

    A breach needs the difference to exceed the client's own cost of a request too (`CLIENT_COST_S`): on the
    2-core CPU host a clean spec arm's first token came 8 ms after base's (15 against 7 ms, 7 of 9 paired
    nights of examples/cpu-fault-nights), a ratio of 2 that no user sees; the field case the check exists
    for took 4.42 s against 0.44 s (docs/design.md section 1)."""
    thr, bad = _threshold(TTFT_RATIO, fail_on)
    if base_spd is None:
        return _entry(TTFT_RATIO, SKIP, "no base arm in this session", None, thr)
    a, b = (spd.get("ttft_ms") or {}).get("median"), (base_spd.get("ttft_ms") or {}).get("median")
    around = (vb or {}).get("ttft_ms") if (vb or {}).get("design") == "bracketed" else None
    beside = [x for x in ((around or {}).get("before"), (around or {}).get("after")) if x]
    if around and (around.get("arm") is not None) and beside:
        a, b = around["arm"], max(beside)
        where = "base before and after"
    else:
        where = "base"
    if a is None or not b:
        return _entry(TTFT_RATIO, SKIP, "TTFT not measured on this arm or base", None, thr)
    ratio = a / b
    text = f"TTFT {a:.0f} ms vs {b:.0f} ms on {where}: {ratio:.2f}x"
    if ratio > thr and (a - b) <= CLIENT_COST_S * 1000 and TTFT_RATIO not in fail_on:
        return _entry(TTFT_RATIO, PASS, f"{text} > {thr:g}x, but {a - b:.0f} ms apart: within the client's own "
                      f"cost of a request (up to {CLIENT_COST_S * 1000:.0f} ms)", ratio, thr)
    if ratio > thr:
        return _entry(TTFT_RATIO, bad, f"{text} > {thr:g}x", ratio, thr)
    return _entry(TTFT_RATIO, PASS, f"{text} <= {thr:g}x", ratio, thr)


def _dead(acc: dict[str, Any]) -> float | None:
    """The one-sided upper bound on alpha (`stats.binom_upper`) where it lies below `DEAD_DRAFTER_ALPHA`: the drafter is dead
    beyond doubt; None otherwise (or where the counts are not reported)."""
    k, n = acc.get("accepted"), acc.get("draft_tokens")
    if not isinstance(k, int) or not isinstance(n, int) or n <= 0 or k < 0:
        return None
    ub = binom_upper(k, n, DEAD_CONFIDENCE)
    return ub if ub < DEAD_DRAFTER_ALPHA else None


def acceptance_check(acc: dict[str, Any], by_level: dict[str, Any], fail_on: dict[str, float],
                     untrusted: str | None = None) -> dict[str, Any]:
    """The lowest alpha, arm-level or at one concurrency level, against the floor; a dead drafter FAILs by default.

    Dead: alpha's one-sided 99.9% upper bound below `DEAD_DRAFTER_ALPHA` (5%), the arm's or one concurrency
    level's (acceptance can collapse under concurrency alone: 1.2% in the field, docs/design.md section 1):
    speculation that accepts nothing costs a verify step and gives nothing back (outputs stay right, decode
    about 2x slower: BUGZOO "drafter broken after a lifecycle event"). Clean arms measured here accept 39-100%
    (docs/design.md 3.7), a weak n-gram drafter on prose 10% or more, so 5% with the bound taken over the arm's
    own draft count cannot be read off a clean arm: with 200 draft tokens a true 10% accepting 4 or fewer has
    probability 1e-5. On an arm whose figures cannot be trusted (UNTRUSTED: its INVALID validity code, e.g. blank
    outputs from random weights) it is a WARN, as the speed floor is.
    """
    thr, bad = _threshold("acceptance", fail_on)
    seen = [("the arm", acc)] + [(f"concurrency {k}", v or {}) for k, v in by_level.items()]
    known = [(w, a.get("alpha"), a) for w, a in seen if a.get("alpha") is not None]
    if not known:
        return _entry(ACCEPTANCE_FLOOR, SKIP, "acceptance not reported by the engine counters", None, thr)
    dead = [(w, a, ub) for w, a, full in known if (ub := _dead(full)) is not None]
    if dead and untrusted:  # an arm whose figures cannot be trusted (INVALID, CONFOUNDED, ...): a WARN, as the speed floor
        where, low, ub = min(dead, key=lambda d: d[2])
        return _entry(ACCEPTANCE_FLOOR, WARN, f"acceptance {low:.1%} at {where} < {DEAD_DRAFTER_ALPHA:.0%}: a dead "
                      f"drafter, not a FAIL: arm {untrusted}: its figures cannot back one", low, DEAD_DRAFTER_ALPHA)
    if dead:
        where, low, ub = min(dead, key=lambda d: d[2])
        return _entry(ACCEPTANCE_FLOOR, FAIL, f"acceptance {low:.1%} at {where} (at most {ub:.1%} at 99.9% "
                      f"confidence) < {DEAD_DRAFTER_ALPHA:.0%}: the drafter is dead, speculation costs a verify step "
                      "and gives nothing back", low, DEAD_DRAFTER_ALPHA)
    where, low, _ = min(known, key=lambda p: p[1])
    if low < thr:
        return _entry(ACCEPTANCE_FLOOR, bad, f"acceptance {low:.1%} at {where} < floor {thr:.0%}", low, thr)
    return _entry(ACCEPTANCE_FLOOR, PASS, f"lowest acceptance {low:.1%} ({where}) >= floor {thr:.0%}", low, thr)


def stream_tau_check(st: dict[str, Any] | None, counter_tau: float | None, bursty: bool) -> dict[str, Any]:
    """Tokens per streamed chunk against tau from the counters; WARN beyond noise."""
    if bursty:
        return _entry("stream_tau", SKIP, "stream bursty: chunks do not follow engine steps", None, None)
    if st is None:
        return _entry("stream_tau", SKIP, "not measurable: no streamed result has per-chunk token counts that "
                      "cover all its tokens (the engine withheld ids, or sent none)", None, None)
    if counter_tau is None:
        return _entry("stream_tau", SKIP, "tau not reported by the counters", st["tau"], None)
    tol = STREAM_TAU_SIGMAS * st["se"] + STREAM_TAU_REL * counter_tau
    gap = abs(st["tau"] - counter_tau)
    text = (f"stream tau {st['tau']:.2f} ({st['chunks']} chunks) vs counter tau {counter_tau:.2f}: "
            f"differ by {gap:.2f}")
    if gap > tol:
        return _entry("stream_tau", WARN, f"{text} > noise {tol:.2f}: the counters may lie or count other requests",
                      st["tau"], counter_tau)
    return _entry("stream_tau", PASS, f"{text} <= noise {tol:.2f}", st["tau"], counter_tau)


def token_count_check(tc: dict[str, Any]) -> dict[str, Any]:
    """Streamed ids against usage.completion_tokens."""
    if not tc.get("requests"):
        return _entry(TOKEN_COUNT, SKIP, "no request has both streamed ids and usage", None, None)
    if tc["disagree"]:
        return _entry(TOKEN_COUNT, WARN,
                      f"streamed ids ({tc['ids']}) disagree with usage.completion_tokens ({tc['usage']}) in "
                      f"{tc['disagree']} of {tc['requests']} requests: figures use usage", float(tc["ids"]),
                      float(tc["usage"]))
    return _entry(TOKEN_COUNT, PASS, f"ids match usage in all {tc['requests']} requests",
                  float(tc["ids"]), float(tc["usage"]))


def _sides(fig: dict[str, Any], base_fig: dict[str, Any] | None, key: str) -> list[tuple[str, Any]]:
    return [("this arm", fig.get(key))] + ([("base", base_fig.get(key))] if base_fig is not None else [])


def steady_check(fig: dict[str, Any], base_fig: dict[str, Any] | None) -> dict[str, Any]:
    """Warm-up in the timed requests (observatory.judge.steady_state), this arm's and base's: WARN where either
    never reached a steady state; PASS saying what was left out of S otherwise."""
    sides = [(who, st) for who, st in _sides(fig, base_fig, "steady_state") if st]
    judged = [(who, st) for who, st in sides if st.get("measurable")]
    if not judged:
        why = "; ".join(f"{who}: {st.get('why')}" for who, st in sides) or "no timed single-stream requests"
        return _entry("steady_state", SKIP, f"not measurable ({why})", None, None)
    unsettled = [f"{who}: {st.get('why')}" for who, st in judged if not st.get("reached")]
    if unsettled:
        return _entry("steady_state", WARN, "steady state not reached, speed not trustworthy: "
                      + "; ".join(unsettled), None, None)
    left = [f"{who} {st['warmup']} of {st['requests']}" for who, st in judged if st.get("warmup")]
    return _entry("steady_state", PASS, ("warm-up requests left out of S: " + ", ".join(left)) if left
                  else "no warm-up in the timed requests", float(sum(int(st.get("warmup") or 0) for _, st in judged)),
                  None)


def clocks_check(fig: dict[str, Any], base_fig: dict[str, Any] | None) -> dict[str, Any]:
    """GPU SM clocks beside each timed block (observatory.engines.gpu_clocks), this arm's and base's: WARN where a
    block's clock moved beyond the tolerance; SKIP "not measurable" where nothing was read (no nvidia-smi)."""
    sides = [(who, gc) for who, gc in _sides(fig, base_fig, "gpu_clocks") if gc]
    read = [(who, gc) for who, gc in sides if gc.get("measurable")]
    if not read:
        whys = list(dict.fromkeys(str(gc.get("why") or "").removeprefix("not measurable: ") for _, gc in sides))
        return _entry("gpu_clocks", SKIP, "not measurable: " + ("; ".join(whys) or "not recorded"), None, None)
    moved = [f"{who} c={b['concurrency']} repeat {b['repeat']}: SM clock range {b['sm_range']:.1%} "
             f"({b['sm_mhz']['min']:.0f}-{b['sm_mhz']['max']:.0f} MHz)"
             for who, gc in read for b in gc.get("blocks") or [] if b.get("moved")]
    worst = max((float(b.get("sm_range") or 0.0) for _, gc in read for b in gc.get("blocks") or []), default=0.0)
    tol = next((b.get("tolerance") for _, gc in read for b in gc.get("blocks") or [] if b.get("tolerance")), None)
    if moved:
        return _entry("gpu_clocks", WARN, "GPU clocks moved during timed blocks, speed not trustworthy: "
                      + "; ".join(moved), worst, tol)
    return _entry("gpu_clocks", PASS, f"SM clocks steady in every timed block read (widest range {worst:.1%})",
                  worst, tol)


def graphs_check(fig: dict[str, Any], base_fig: dict[str, Any] | None) -> dict[str, Any]:
    """CUDA graph coverage of the timed steps (observatory.judge.graph_coverage), this arm's and base's: WARN
    where either ran eagerly (no graphs, or steps above the largest captured size)."""
    sides = [(who, cg) for who, cg in _sides(fig, base_fig, "cuda_graphs") if cg]
    flagged = [f"{who}: {cg.get('why')}" for who, cg in sides if cg.get("flagged")]
    if flagged:
        return _entry("cuda_graphs", WARN, "timed on the eager path, not the deployment's CUDA graphs: "
                      + "; ".join(flagged), None, None)
    if sides and all(cg.get("status") == "covered" for _, cg in sides):
        return _entry("cuda_graphs", PASS, "every timed step within the captured CUDA graphs", None, None)
    why = "; ".join(f"{who}: {cg.get('status')} ({cg.get('why')})" for who, cg in sides
                    if cg.get("status") != "covered") or "not recorded"
    return _entry("cuda_graphs", SKIP, why, None, None)


def performance(fig: dict[str, Any], base_fig: dict[str, Any] | None, floor: dict[str, Any] | None,
                fail_on: dict[str, float], untrusted: str | None = None) -> list[dict[str, Any]]:
    """Every performance check of one spec arm (the figures dict's "performance" list); UNTRUSTED: the
    arm's validity code that makes its figures untrustworthy, if any (the default speed floor then WARNs)."""
    spd, acc = fig["speed"], fig["acceptance"]
    bursty = bool((spd.get("bursty") or {}).get("bursty"))
    apart = (fig.get("vs_base") or {}).get("cross_session")
    if apart:
        # not the same session in the sense that matters: no in-session speed comparison to judge
        why = f"cross-session against base ({apart})"
        against_base = [_entry(SPEEDUP, SKIP, why, (fig.get("vs_base") or {}).get("S"),
                               fail_on.get(SPEEDUP, DEFAULTS[SPEEDUP])),
                        _entry(TTFT_RATIO, SKIP, why, None, _threshold(TTFT_RATIO, fail_on)[0])]
    else:
        against_base = [speedup_check(fig.get("vs_base"), floor, fail_on,
                                      [spd, base_fig["speed"] if base_fig else None], untrusted),
                        ttft_check(spd, base_fig["speed"] if base_fig else None, fail_on, fig.get("vs_base"))]
    return [
        *against_base,
        # whether the speed figures above can be trusted (issue 29 items 3-4)
        steady_check(fig, base_fig), clocks_check(fig, base_fig), graphs_check(fig, base_fig),
        acceptance_check(acc, fig.get("by_concurrency") or {}, fail_on, untrusted),
        stream_tau_check(fig.get("stream_tau"), fig.get("stream_counter_tau"), bursty),
        token_count_check(spd.get(TOKEN_COUNT) or {}),
    ]


def not_lossless(entries: list[dict[str, Any]], lossy: str) -> list[dict[str, Any]]:
    """ENTRIES of an arm whose verification a setting loosened (validity LOSSY: LOSSY, its detail): each
    judged check becomes INVALID, its value kept, so no speed or acceptance verdict passes as lossless."""
    return [e if e["verdict"] == SKIP else
            {**e, "verdict": INVALID, "reason": f"not a lossless result ({lossy}); measured: {e['reason']}"}
            for e in entries]
