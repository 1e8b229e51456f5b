"""Latency percentiles per concurrency level, as `vllm bench serve` reports them (issue 50 item 5).

From the stored timed requests of one arm, per concurrency level:

- TTFT: time to first token (the request's ``ttft_ms``);
- TPOT: time per output token after the first, per request:
  (end-to-end - TTFT) / (output tokens - 1), tokens from ``usage.completion_tokens``;
- ITL: the gap between consecutive streamed chunks, as `vllm bench serve`
  counts it: one engine step on a stream that is not bunched (a spec step's
  chunk carries up to k + 1 tokens, so ITL is per step and TPOT per token);
- E2EL: end-to-end latency, the request's whole duration.

Each as mean, p50, p90 and p99 (numpy's linear percentiles, as vllm's). The
warm-up the steady-state rule leaves out of the single-stream figures is left
out of level 1 here too.

The bursty-stream rule (docs/design.md 3.4, end; observatory.judge.speed):
when most tokens arrived bunched in chunks larger than speculation explains
(more than one token per chunk on base, more than k + 1 on a spec arm), the
gaps between chunks are not the engine's steps and the time after the first
token is not its decode: TPOT and ITL are then not measurable (None, with the
reason in ``not_measurable``), at that level or, when the arm's streams are
bursty, at every level. TTFT and E2EL stay measurable however tokens are grouped.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from observatory.judge.speed import bunching, tokens_of
from observatory.store.db import ResultRow

FIGURES = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")
# the figures the bursty-stream rule makes not measurable
BURST_BOUND = ("tpot_ms", "itl_ms")


def summary(xs: list[float]) -> dict[str, float] | None:
    """Mean, p50, p90, p99 of XS (None when empty)."""
    if not xs:
        return None
    arr = np.asarray(xs, dtype=float)
    return {"mean": float(arr.mean()), "p50": float(np.percentile(arr, 50)), "p90": float(np.percentile(arr, 90)),
            "p99": float(np.percentile(arr, 99)), "n": len(xs)}


def _times(r: ResultRow) -> list[float]:
    return [float(c[0]) for c in r.chunks or [] if isinstance(c, (list, tuple)) and len(c) == 2 and c[0] is not None]


def bursty_words(burst: Mapping[str, Any]) -> str:
    """Why TPOT and ITL are not measurable, in one phrase."""
    allowed = burst.get("allowed_per_chunk")
    return (f"not measurable: BURSTY, {float(burst.get('share') or 0):.0%} of {burst.get('tokens')} tokens arrived "
            f"in chunks of more than {allowed} token{'s' if allowed != 1 else ''}, which speculation does not "
            "explain (docs/design.md 3.4)")


def level_latency(results: list[ResultRow], allowed: int | None,
                  arm_burst: Mapping[str, Any] | None) -> dict[str, Any]:
    """TTFT, TPOT, ITL and E2EL of one level's RESULTS; TPOT and ITL None with a reason on a bursty stream."""
    burst = arm_burst if arm_burst and arm_burst.get("bursty") else bunching(results, allowed)
    ttft = [float(r.ttft_ms) for r in results if r.ttft_ms is not None]
    e2el = [float(r.duration_ms) for r in results if r.duration_ms is not None and r.duration_ms > 0]
    tpot: list[float] = []
    itl: list[float] = []
    for r in results:
        n = tokens_of(r)
        if n is not None and n > 1 and r.ttft_ms is not None and r.duration_ms is not None \
                and r.duration_ms > r.ttft_ms:
            tpot.append((float(r.duration_ms) - float(r.ttft_ms)) / (n - 1))
        itl.extend(t1 - t0 for t0, t1 in itertools.pairwise(_times(r)) if t1 >= t0)
    out: dict[str, Any] = {"requests": len(results), "ttft_ms": summary(ttft), "tpot_ms": summary(tpot),
                           "itl_ms": summary(itl), "e2el_ms": summary(e2el), "not_measurable": {}}
    if burst and burst.get("bursty"):
        for key in BURST_BOUND:
            out[key] = None
            out["not_measurable"][key] = bursty_words(burst)
    for key in FIGURES:
        if out[key] is None and key not in out["not_measurable"]:
            out["not_measurable"][key] = "not measurable: no request with " + (
                "a first token" if key == "ttft_ms" else "two streamed chunks" if key == "itl_ms"
                else "a duration" if key == "e2el_ms" else "two tokens and a first-token time")
    return out


def latency(timed: Iterable[ResultRow], allowed: int | None, arm_burst: Mapping[str, Any] | None,
            warm: set[tuple[int, int]] | frozenset[tuple[int, int]] = frozenset()) -> dict[str, Any]:
    """Per concurrency level (as a string key), `level_latency` of the arm's ok timed requests.

    WARM: (probe id, repeat) keys of level 1 the steady-state rule left out (warm-up)."""
    by: dict[int, list[ResultRow]] = defaultdict(list)
    for r in timed:
        if not r.ok or (int(r.concurrency) == 1 and (r.probe_id, r.repeat) in warm):
            continue
        by[int(r.concurrency)].append(r)
    return {"levels": {str(lv): level_latency(rs, allowed, arm_burst) for lv, rs in sorted(by.items())},
            "source": "timed requests (warm-up left out at concurrency 1)"}
