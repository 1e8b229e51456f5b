"""S from the engine's step time: the median gap between streamed chunks, spec arm against base.

S from whole requests (`observatory.judge.speed`, `observatory.judge.paired`)
holds everything a request spends: prefill, the first chunk, the scheduler's
odd long gap. On the H200 with a GPU-bound model those moved a spec arm's S by
3.7% (SD) between sessions on unchanged servers, with identical acceptance,
three times what each session's own interval said (examples/h200-speed/README.md).
The steady decode step does not move like that: the median gap between two
chunks of one stream (one engine step: vLLM sends a chunk per step, holding
every token the step accepted) was 4.283-4.360 ms on the clean spec server over
seven sessions (SD 0.6%) and 3.744-3.757 ms on base, and a spec step planted 5%
slower read 4.537-4.548 ms in all four of its sessions.

    S_step = tau x base_step_ms / arm_step_ms

where tau is the arm's tokens per spec step (its counters) and base makes one
token a step: the decode speedup at the median step, prefill and stragglers
left out. Base's side is the base requests timed beside the arm (paired
timing) when there are any, else base's own single-stream timed requests.
Fewer than `MIN_GAPS` gaps on either side: not measurable (None).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable
from typing import Any

# fewer gaps than this and a median says little (a session of the 12-probe speed suite has 446 on mtp2)
MIN_GAPS = 50


def chunk_gaps(results: Iterable[Any]) -> list[float]:
    """Milliseconds between consecutive chunks of each result's stream (``chunks``: [[arrival_ms, ...], ...])."""
    gaps: list[float] = []
    for r in results:
        times = [float(c[0]) for c in (r.chunks or []) if c and isinstance(c[0], (int, float))]
        gaps += [b - a for a, b in itertools.pairwise(times)]
    return gaps


def median_gap(gaps: list[float]) -> float | None:
    """The median of GAPS (ms), None with fewer than MIN_GAPS non-negative ones (or a median of 0)."""
    kept = [g for g in gaps if g >= 0]
    if len(kept) < MIN_GAPS:
        return None
    med = statistics.median(kept)
    return med if med > 0 else None


def median_step_ms(results: Iterable[Any]) -> float | None:
    """The median chunk gap of RESULTS, None with fewer than MIN_GAPS gaps (or none positive)."""
    return median_gap(chunk_gaps(results))


def step_speedup(arm_single: list[Any], base_single: list[Any], tau: float | None) -> dict[str, Any]:
    """S_step of an arm's single-stream timed results against base's (see the module docstring)."""
    arm_gaps, base_gaps = chunk_gaps(arm_single), chunk_gaps(base_single)
    arm_ms, base_ms = median_gap(arm_gaps), median_gap(base_gaps)
    out: dict[str, Any] = {"arm_step_ms": arm_ms, "base_step_ms": base_ms, "tau": tau,
                           "gaps": {"arm": len(arm_gaps), "base": len(base_gaps)}}
    if arm_ms is None or base_ms is None or not tau:
        out["S"] = None
        out["why"] = (f"not measurable: fewer than {MIN_GAPS} chunk gaps on a side" if tau
                      else "not measurable: no tokens per step (tau)")
        return out
    out["S"] = tau * base_ms / arm_ms
    return out
