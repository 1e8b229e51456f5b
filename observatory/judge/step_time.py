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
left out. Base's step is the median over every single-stream base gap of the
session: base's own timed block and the base requests timed beside the arm
(paired timing), pooled. One block alone misled: in one of eleven H200 sessions
ten of the 24 base requests timed beside the faulted arm ran 4.0-5.0 ms steps
(that block's median 3.848 ms, base alone 3.748 ms, the spec requests between
them unmoved), which hid the planted 5% slower step (S_step 1.826 against a
clean median of 1.872); pooled, the block weighs half and that session read
1.796 (4.1% down, flagged), while the ten other sessions moved by at most
0.004 (examples/h200-speed/README.md). Each block's own median is kept beside
(`base_blocks_ms`). Fewer than `MIN_GAPS` gaps on either side: not measurable
(None).
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


def step_speedup(arm_single: list[Any], base_single: list[Any], tau: float | None,
                 base_beside: list[Any] | None = None) -> dict[str, Any]:
    """S_step of an arm's single-stream timed results against base's: BASE_SINGLE (base's own timed block)
    and BASE_BESIDE (base timed beside the arm) pooled (see the module docstring)."""
    alone, beside = chunk_gaps(base_single), chunk_gaps(base_beside or [])
    arm_gaps, base_gaps = chunk_gaps(arm_single), alone + beside
    arm_ms, base_ms = median_gap(arm_gaps), median_gap(base_gaps)
    out: dict[str, Any] = {"arm_step_ms": arm_ms, "base_step_ms": base_ms, "tau": tau,
                           "base_blocks_ms": {"alone": median_gap(alone), "beside": median_gap(beside)},
                           "gaps": {"arm": len(arm_gaps), "base": len(base_gaps)}}
    if arm_ms is None or base_ms is None or not tau:
        out["S"] = None
        out["why"] = (f"not measurable: fewer than {MIN_GAPS} chunk gaps on a side" if tau
                      else "not measurable: no tokens per step (tau)")
        return out
    out["S"] = tau * base_ms / arm_ms
    return out
