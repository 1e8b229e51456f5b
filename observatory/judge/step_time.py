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

How precise S_step is (issue 29 item 1): ``ci`` is a 95% cluster bootstrap
interval, each side's requests resampled whole (the gaps of one stream are not
independent of each other), tau held fixed (it is counted by the engine over
the whole arm, not sampled per request), `BOOT` draws from a fixed seed. From
it `observatory.judge.precision` gives ``half_width``, ``detectable_change``
and the decode traffic a +-2% interval would need (``timed_s`` here: each
stream's first-to-last chunk time, the part of a request S_step is made of).
Checked against what sessions actually did (examples/h200-speed/README.md): on
23 H200 sessions of unchanged servers (3.7 s of timed traffic per arm each) the
stated half-width had a median of 0.87% (0.68-1.36%), while S_step's
between-session SD over the 13 clean ones was 0.36% (a 95% spread of +-0.70%):
the interval is honest, about 1.2 times wider than the spread it stands for.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterable
from typing import Any

import numpy as np

from observatory.judge.precision import precision

# fewer gaps than this and a median says little (a session of the 12-probe speed suite has 446 on mtp2)
MIN_GAPS = 50
BOOT = 1000  # bootstrap draws of the interval (1000 draws of a 24 + 48 request session: about 0.15 s)
SEED = 0


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
    and BASE_BESIDE (base timed beside the arm) pooled, with its interval and precision (see the module
    docstring)."""
    arm_per, alone_per, beside_per = (_per_stream(rs) for rs in (arm_single, base_single, base_beside or []))
    alone, beside = _joined(alone_per), _joined(beside_per)
    arm_gaps, base_gaps = _joined(arm_per), alone + beside
    arm_ms, base_ms = median_gap(arm_gaps), median_gap(base_gaps)
    arm_streams, base_streams = _streams(arm_per), _streams(alone_per + beside_per)
    out: dict[str, Any] = {"arm_step_ms": arm_ms, "base_step_ms": base_ms, "tau": tau,
                           "base_blocks_ms": {"alone": median_gap(alone), "beside": median_gap(beside)},
                           "gaps": {"arm": len(arm_gaps), "base": len(base_gaps)}}
    if arm_ms is None or base_ms is None or not tau:
        out["S"] = None
        out["why"] = ("not measurable: no tokens per step (tau)" if not tau else _no_step_why(arm_gaps, base_gaps))
        out.update(precision(None, None, None, None))
        return out
    out["S"] = tau * base_ms / arm_ms
    out["ci"] = _interval(arm_streams, base_streams, float(tau))
    out.update(precision(out["S"], out["ci"], _spent(arm_streams), _spent(base_streams)))
    return out


def _no_step_why(arm_gaps: list[float], base_gaps: list[float]) -> str:
    """Why a side has no median step: too few gaps, or chunks that arrived together (median gap 0)."""
    sides = [(name, [g for g in gaps if g >= 0]) for name, gaps in (("this arm", arm_gaps), ("base", base_gaps))]
    if any(len(kept) < MIN_GAPS for _, kept in sides):
        return f"not measurable: fewer than {MIN_GAPS} chunk gaps on a side"
    burst = next(name for name, kept in sides if statistics.median(kept) <= 0)
    return (f"not measurable: {burst}'s chunks arrived together (median gap 0 ms: the client read several at once), "
            "so arrival times do not show its step")


def _per_stream(results: Iterable[Any]) -> list[list[float]]:
    """Each result's chunk gaps (ms), one list per result: read once, for the medians and the interval alike."""
    return [chunk_gaps([r]) for r in results]


def _joined(per_stream: list[list[float]]) -> list[float]:
    return [g for gaps in per_stream for g in gaps]


def _streams(per_stream: list[list[float]]) -> list[list[float]]:
    """The non-negative gaps of each stream, the streams with at least one (what the interval resamples)."""
    return [g for g in ([x for x in gaps if x >= 0] for gaps in per_stream) if g]


def _spent(streams: list[list[float]]) -> tuple[int, float]:
    """(streams, seconds between their first and last chunks): the decode traffic S_step is made of."""
    return len(streams), sum(sum(g) for g in streams) / 1000.0


def _interval(arm: list[list[float]], base: list[list[float]], tau: float) -> list[float] | None:
    """95% cluster bootstrap interval of tau x median(base gaps) / median(arm gaps), streams resampled whole;
    None with fewer than two streams on a side (no spread to resample)."""
    if len(arm) < 2 or len(base) < 2:
        return None
    rng = np.random.default_rng(SEED)
    draws = np.empty(BOOT)
    a_arr, b_arr = [np.asarray(g) for g in arm], [np.asarray(g) for g in base]
    for i in range(BOOT):
        ia, ib = rng.integers(0, len(arm), len(arm)), rng.integers(0, len(base), len(base))
        a_med = float(np.median(np.concatenate([a_arr[j] for j in ia])))
        b_med = float(np.median(np.concatenate([b_arr[j] for j in ib])))
        # a resample whose median gap is 0 (chunks that arrived together, as on a CPU-starved host) has no step
        draws[i] = tau * b_med / a_med if a_med > 0 and b_med > 0 else np.nan
    draws = draws[np.isfinite(draws)]
    if len(draws) < BOOT // 2:
        return None
    return [float(np.percentile(draws, 2.5)), float(np.percentile(draws, 97.5))]
