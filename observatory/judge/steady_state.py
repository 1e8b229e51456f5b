"""Steady state before the clock: the timed requests an arm served while still warming up (issue 29 item 3).

The runner sends one warm-up request before the correctness pass; an engine
can still be warming when the clock starts (a sampler path without logprobs
compiled on the first timed request, caches, lazy graph capture). Measured on
the committed H200 nightly session (examples/h200-nightly/nightly-tiny.db.gz):
mtp1's first timed request had a TTFT of 926 ms against a median of 16 ms
over its block (50x), mtp2's 12.7x; no other position of any committed arm
came near that. Such a request lands in S. So warm-up is read from the timings
themselves instead of trusting a fixed count.

The rule (sequential, on the arm's single-stream timed requests in the order
they were timed): request i is *slow* when its TTFT exceeds ``band_ttft``
times its reference TTFT, or its decode rate (tokens after the first over the
seconds after the first token) is below its reference rate over ``band_decode``.
The warm-up is the leading run of slow requests: the first request that is not
slow ends it, and every request from there on is steady, whatever follows (a
slow request later is the host's noise or drift, for the interval and the
clocks to show, not warm-up). A request's reference is the median of the same
probe's later timings on this arm (``--repeat`` above 1: bands ``PROBE_BANDS``),
else the median over every single-stream timed request of the arm (the probe
mix: bands ``MIX_BANDS``). A warm-up longer than half the requests means the
arm never settled: nothing is excluded and the speed verdict WARNs.

The warm-up's requests are left out of the arm's single-stream figures and of
S (on both sides: S compares the same probes and repeats of the arm and of
base), and ``steady_state`` in the figures lists them.

The bands are the widest spread of steady requests in measured data
(docs/design.md section 4, "Steady state before the clock"): MIX_BANDS from
the 189 timed single-stream requests after the first of all 21 arm blocks of
the six committed H200 sessions (examples/h200*, TTFT up to 5.09x the arm's
median, decode rate down to 1/1.565), PROBE_BANDS from the same probe timed
again (see the design section for the data).
"""

from __future__ import annotations

import statistics
from typing import Any

from observatory.judge.speed import tokens_of
from observatory.store.db import ResultRow

# (TTFT factor, decode-rate factor) a steady request stays within, against its reference
MIX_BANDS = (5.1, 1.6)
PROBE_BANDS = (1.5, 1.8)
MIN_REQUESTS = 3  # a median of fewer says nothing about what is typical
# ... and slow by at least this much time: the client's own CPU per request measured 3-30 ms
# (benchmarks/README.md, client_overhead.py), so a smaller excess may be the client's, not the engine's
MIN_EXCESS_MS = 30.0

RULE = ("leading run of timed single-stream requests whose TTFT exceeds, or decode rate falls below, the "
        "steady band around the same probe's later timings (else the arm's median over its probes)")


def _decode_rate(r: ResultRow) -> float | None:
    n = tokens_of(r)
    if not n or n < 2 or r.ttft_ms is None or r.duration_ms is None:
        return None
    secs = (float(r.duration_ms) - float(r.ttft_ms)) / 1000.0
    return (n - 1) / secs if secs > 0 else None


def _median(xs: list[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


def steady_state(single: list[ResultRow]) -> dict[str, Any]:
    """The warm-up of one arm's single-stream timed requests SINGLE (in timing order), and what it leaves out.

    Returns ``measurable`` (False with ``why`` when too few requests), ``requests``, ``warmup`` (how many
    left out), ``excluded`` ([{"probe_id", "repeat", "position", "ttft_x", "decode_x", "reference"}]),
    ``reached`` (False when the warm-up ran past half the requests: nothing excluded), the rule and its bands.
    """
    rows = [r for r in single if r.ok]
    out: dict[str, Any] = {"rule": RULE, "bands": {"probe_mix": {"ttft": MIX_BANDS[0], "decode": MIX_BANDS[1]},
                                                   "same_probe": {"ttft": PROBE_BANDS[0], "decode": PROBE_BANDS[1]}},
                           "requests": len(rows), "warmup": 0, "excluded": [], "reached": True, "measurable": True}
    if len(rows) < MIN_REQUESTS:
        return {**out, "measurable": False,
                "why": f"{len(rows)} timed single-stream request(s): at least {MIN_REQUESTS} are needed"}
    ttft = [float(r.ttft_ms) if r.ttft_ms is not None else None for r in rows]
    rate = [_decode_rate(r) for r in rows]
    mix_t = _median([t for t in ttft if t is not None])
    mix_d = _median([d for d in rate if d is not None])
    lead: list[dict[str, Any]] = []
    for i, r in enumerate(rows):
        later = [j for j in range(i + 1, len(rows))
                 if rows[j].probe_id == r.probe_id and rows[j].repeat > r.repeat]
        if later:
            ref_t = _median([t for j in later if (t := ttft[j]) is not None])
            ref_d = _median([d for j in later if (d := rate[j]) is not None])
            (band_t, band_d), ref = PROBE_BANDS, "same probe"
        else:
            ref_t, ref_d, (band_t, band_d), ref = mix_t, mix_d, MIX_BANDS, "probe mix"
        t, d = ttft[i], rate[i]
        tx = t / ref_t if t is not None and ref_t else None
        dx = ref_d / d if d and ref_d else None
        slow_t = tx is not None and ref_t is not None and t is not None and tx > band_t and t - ref_t > MIN_EXCESS_MS
        n = tokens_of(r) or 0
        slow_d = dx is not None and d is not None and ref_d is not None and dx > band_d and \
            (n - 1) * (1.0 / d - 1.0 / ref_d) * 1000.0 > MIN_EXCESS_MS
        if not (slow_t or slow_d):
            break
        lead.append({"probe_id": r.probe_id, "repeat": r.repeat, "position": i, "reference": ref,
                     "ttft_x": tx, "decode_x": dx})
    if len(lead) > len(rows) // 2:
        return {**out, "reached": False, "warmup": len(lead),
                "why": f"the first {len(lead)} of {len(rows)} timed requests were all slow: no steady state"}
    return {**out, "warmup": len(lead), "excluded": lead}


def excluded_keys(state: dict[str, Any] | None) -> set[tuple[int, int]]:
    """(probe id, repeat) of the requests a `steady_state` left out."""
    return {(int(e["probe_id"]), int(e["repeat"])) for e in (state or {}).get("excluded") or []}


def words(state: dict[str, Any] | None) -> str:
    """One line for the report and the speed verdict."""
    if not state:
        return "steady state: not judged"
    if not state.get("measurable"):
        return f"steady state: not measurable ({state.get('why')})"
    if not state.get("reached"):
        return f"steady state not reached: {state.get('why')}"
    n = int(state.get("warmup") or 0)
    if not n:
        return f"steady from the first of {state['requests']} timed requests"
    return (f"{n} of {state['requests']} timed request(s) still warming up (slow against the steady band): "
            "left out of S and the single-stream figures")
