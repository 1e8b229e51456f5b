"""S from bracketed timing: each spec arm's timed block between two blocks of base's, and the host's drift.

Arms timed one after another put whatever the host did between them into S
(docs/design.md section 4): on the 2-core CI host a clean mtp1 read S = 0.51
[0.43, 0.60] while mtp2 read 1.24 in the same session (issue 46). The
interval of S resamples each arm's own requests and cannot see the host
move between arms. With bracketed timing (`--timing bracketed`, the default
where base's server can stay up beside the spec arms) base's server stays
up, and each spec arm's single-stream repeat is timed between two blocks of
base's requests, one right before and one right after it
(observatory/session/measure.py, `ArmRun.bracketed_blocks`): base, spec,
base, spec, ..., base. Blocks, not alternating requests: on a 2-core CPU
host two engines answering in turn slow each other (an engine's threads
spin on after its request; clean paired nights read S 0.18-1.10 while the
per-step figure held at 0.63-0.70, examples/cpu-fault-nights/README.md).

What this module computes from the stored requests (mode ``bracket_base``,
repeat k = the k-th base block; spec repeat r sits between blocks r and
r + 1), every figure matched per probe so both sides time the same prompts:

- ``drift``: how far base's own rate moved across each spec block
  (block r + 1 against block r), the largest relative move over the blocks
  (signed); this is the host's drift while the spec arm was timed, measured
  in every session that has a base arm, A/A copy or not;
- ``S``: the spec arm's rate over base's rate in both of its brackets pooled
  (tokens over seconds, summed), and ``ci_mid`` its pair bootstrap;
- ``S_before`` / ``S_after`` with their intervals: against each bracket alone;
- ``ci``: the drift-corrected interval, the union of the two: where the host
  drifted, base's speed during the spec block is known only to lie between
  its speed before and after, so S is known only to lie in either interval.
  The speed check FAILs only when this whole interval lies below the floor,
  and calls S "not measurable" where the drift is larger than the effect
  (observatory/judge/perf_gates.py).
"""

from __future__ import annotations

from collections.abc import Collection
from itertools import pairwise
from typing import Any

import numpy as np

from observatory.judge.paired import paired_ratio, suite_interval
from observatory.judge.speed import tokens_of
from observatory.store.db import ResultRow


def _sample(r: ResultRow | None) -> tuple[float, float] | None:
    if r is None:
        return None
    n = tokens_of(r)
    if not r.ok or not n or not r.duration_ms or r.duration_ms <= 0:
        return None
    return float(n), float(r.duration_ms) / 1000.0


def brackets(spec_timed: list[ResultRow], bracket_base: list[ResultRow],
             left_out: Collection[tuple[int, int]] = ()) -> dict[str, Any] | None:
    """One spec arm's bracketed requests as rows [spec tokens, spec s, before tokens, before s, after tokens,
    after s], matched on (probe, repeat); None when the arm was not timed between base blocks. The spec arm's
    (probe, repeat) keys LEFT_OUT (its warm-up, observatory.judge.steady_state) are left out."""
    if not bracket_base:
        return None
    base = {(int(r.probe_id), int(r.repeat)): r for r in bracket_base if r.concurrency == 1}
    skip = set(left_out)
    rows: list[list[float]] = []
    probes: list[int] = []
    repeats: list[int] = []
    ttft: dict[str, list[float]] = {"arm": [], "before": [], "after": []}
    incomplete = 0
    for s in sorted((r for r in spec_timed if r.concurrency == 1), key=lambda r: (r.repeat, r.probe_id)):
        key = (int(s.probe_id), int(s.repeat))
        if key in skip:
            continue
        mine, before, after = _sample(s), _sample(base.get(key)), _sample(base.get((key[0], key[1] + 1)))
        if mine is None or before is None or after is None:
            incomplete += 1
            continue
        rows.append([*mine, *before, *after])
        probes.append(key[0])
        repeats.append(key[1])
        for side, r in (("arm", s), ("before", base[key]), ("after", base[(key[0], key[1] + 1)])):
            if r.ttft_ms is not None:
                ttft[side].append(float(r.ttft_ms))
    return {"rows": rows, "probes": probes, "repeats": repeats, "incomplete": incomplete,
            "blocks": _block_rates(bracket_base),
            "ttft_ms": {side: (float(np.median(v)) if v else None) for side, v in ttft.items()}}


def _block_rates(bracket_base: list[ResultRow]) -> list[float | None]:
    """Base's rate (tokens / seconds) in each of its blocks, in block order."""
    sums: dict[int, list[float]] = {}
    for r in bracket_base:
        s = _sample(r)
        if s is not None and r.concurrency == 1:
            acc = sums.setdefault(int(r.repeat), [0.0, 0.0])
            acc[0] += s[0]
            acc[1] += s[1]
    if not sums:
        return []
    return [(sums[k][0] / sums[k][1]) if k in sums and sums[k][1] > 0 else None for k in range(max(sums) + 1)]


def _side(a: np.ndarray, cols: tuple[int, int]) -> list[list[float]]:
    out: list[list[float]] = a[:, [0, 1, cols[0], cols[1]]].tolist()
    return out


def bracketed_vs_base(br: dict[str, Any]) -> dict[str, Any]:
    """The vs_base fields of a bracketed arm: S against both brackets, the drift-corrected interval, the drift."""
    rows = br["rows"]
    out: dict[str, Any] = {"design": "bracketed", "pairs": len(rows), "incomplete_pairs": br["incomplete"],
                           "S": None, "ci": None, "ci_mid": None, "ci_suite": None, "drift": None,
                           "before": None, "after": None, "base_blocks_tok_s": br.get("blocks")}
    if not rows:
        return out
    a = np.asarray(rows, dtype=float)
    # base's two brackets pooled: [spec tokens, spec s, before + after tokens, before + after s]
    mid = np.column_stack([a[:, 0], a[:, 1], a[:, 2] + a[:, 4], a[:, 3] + a[:, 5]]).tolist()
    S, ci_mid = paired_ratio(mid)
    Sb, ci_b = paired_ratio(_side(a, (2, 3)))
    Sa, ci_a = paired_ratio(_side(a, (4, 5)))
    rate = {"arm": float(a[:, 0].sum() / a[:, 1].sum()), "before": float(a[:, 2].sum() / a[:, 3].sum()),
            "after": float(a[:, 4].sum() / a[:, 5].sum())}
    out.update(S=S, ci_mid=ci_mid, ci_suite=suite_interval(mid, br.get("probes") or []),
               before={"S": Sb, "ci": ci_b}, after={"S": Sa, "ci": ci_a}, tok_s=rate,
               drift=drift(br.get("blocks") or []), ttft_ms=br.get("ttft_ms"))
    if ci_b is not None and ci_a is not None:
        out["ci"] = [min(ci_b[0], ci_a[0]), max(ci_b[1], ci_a[1])]
    return out


def drift(blocks: list[float | None]) -> float | None:
    """The largest relative move of base's rate from one block to the next (signed: negative, base slowed);
    None with fewer than two measured blocks in a row."""
    moves = [after / before - 1.0 for before, after in pairwise(blocks) if before and after]
    return max(moves, key=abs) if moves else None


def sides(br: dict[str, Any]) -> tuple[list[list[float]], list[list[float]]]:
    """Each side's [tokens, seconds] samples (for `precision.spent`): the spec arm's, and base's both brackets."""
    rows = br["rows"]
    base: dict[tuple[int, int], list[float]] = {}  # (probe, block): a block between two spec repeats counted once
    for r, probe, rep in zip(rows, br.get("probes") or [], br.get("repeats") or []):
        base[(probe, rep)] = [r[2], r[3]]
        base[(probe, rep + 1)] = [r[4], r[5]]
    return [[r[0], r[1]] for r in rows], list(base.values())
