"""S from paired timing (``--timing paired``): each spec request beside a base request of the same probe.

Arms timed one after another put whatever the host did between them into S:
on the 2-core CI host the same code read S = 1.08 [1.00, 1.16] in one session
and 0.68 [0.62, 0.74] in the next (benchmarks/README.md, "Speed on a shared
host"); each interval only describes the noise inside one arm's timed block.
With ``--timing paired`` the base arm's server stays up beside each spec arm,
and the spec arm's single-stream requests alternate with base's, one request
alone at a time (observatory/session/measure.py, `ArmRun.paired_block`). A
pair is one probe and repeat on both servers, seconds apart, so a drift slower
than a pair moves both of its sides alike and cancels in their ratio.

S is the ratio of the two sides' end-to-end rates over the complete pairs
(tokens over seconds, summed, as for unpaired S), and its 95% interval a
bootstrap that resamples *pairs*: each draw keeps a spec request with the base
request it was timed beside, so the shared drift stays inside each draw
instead of widening the interval. Pairs whose either side failed or reported
no tokens are left out and counted.

That interval answers "what S would other prompts like these see": it holds
the spread between probes (code accepts more drafts than prose), which on a
dedicated GPU is most of its width. Night against night the probes are the
same (channel history compares sessions of one suite), so what can move S
there is only the timing of the same requests: ``ci_suite`` resamples each
probe's own pairs (its repeats) and keeps every probe in every draw, a
bootstrap stratified by probe. It needs at least two repeats of some probe
(else None), and is what history takes as the session's own S noise.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from observatory.judge.speed import tokens_of
from observatory.store.db import ResultRow

BOOTSTRAP_SAMPLES = 2000


def _sample(r: ResultRow) -> tuple[float, float] | None:
    n = tokens_of(r)
    if not r.ok or not n or not r.duration_ms or r.duration_ms <= 0:
        return None
    return float(n), float(r.duration_ms) / 1000.0


def pairs(spec_timed: list[ResultRow], paired_base: list[ResultRow],
          left_out: Collection[tuple[int, int]] = ()) -> dict[str, Any] | None:
    """The complete pairs ([spec tokens, spec s, base tokens, base s], ...) of one spec arm, matched on
    (probe, repeat); None when the arm was not timed in pairs. The (probe, repeat) keys LEFT_OUT (the spec
    arm's warm-up, observatory.judge.steady_state) are left out on both sides: neither a pair nor incomplete."""
    if not paired_base:
        return None
    mine = {(r.probe_id, r.repeat): r for r in spec_timed if r.concurrency == 1}
    skip = set(left_out)
    paired_base = [b for b in paired_base if (b.probe_id, b.repeat) not in skip]
    out: list[list[float]] = []
    probes: list[int] = []
    for b in paired_base:
        s = mine.get((b.probe_id, b.repeat))
        ss, bs = (_sample(s) if s is not None else None), _sample(b)
        if ss is not None and bs is not None:
            out.append([ss[0], ss[1], bs[0], bs[1]])
            probes.append(int(b.probe_id))
    return {"pairs": out, "probes": probes, "incomplete": len(paired_base) - len(out)}


def paired_ratio(rows: list[list[float]], seed: int = 0) -> tuple[float | None, list[float] | None]:
    """(S, its 95% pair-bootstrap interval) from pairs [spec tokens, spec s, base tokens, base s]."""
    if not rows:
        return None, None
    a = np.asarray(rows, dtype=float)
    if a[:, 1].sum() <= 0 or a[:, 3].sum() <= 0 or a[:, 2].sum() <= 0:
        return None, None
    S = float((a[:, 0].sum() / a[:, 1].sum()) / (a[:, 2].sum() / a[:, 3].sum()))
    if len(a) < 2:
        return S, None
    idx = np.random.default_rng(seed).integers(0, len(a), size=(BOOTSTRAP_SAMPLES, len(a)))
    d = a[idx]  # draws x pairs x 4
    ratio = (d[..., 0].sum(1) / d[..., 1].sum(1)) / (d[..., 2].sum(1) / d[..., 3].sum(1))
    return S, [float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))]


def suite_interval(rows: list[list[float]], probes: list[int], seed: int = 0) -> list[float] | None:
    """95% interval of the paired S on this suite: a bootstrap stratified by probe (each draw resamples every
    probe's own pairs, so every probe is in every draw); None without a probe timed at least twice."""
    if not rows or len(probes) != len(rows):
        return None
    a = np.asarray(rows, dtype=float)
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(probes):
        groups.setdefault(p, []).append(i)
    if max(len(g) for g in groups.values()) < 2:
        return None
    rng = np.random.default_rng(seed)
    cols = [np.asarray(g)[rng.integers(0, len(g), size=(BOOTSTRAP_SAMPLES, len(g)))] for g in groups.values()]
    d = a[np.concatenate(cols, axis=1)]  # draws x pairs x 4, every probe's count of pairs kept
    ratio = (d[..., 0].sum(1) / d[..., 1].sum(1)) / (d[..., 2].sum(1) / d[..., 3].sum(1))
    return [float(np.percentile(ratio, 2.5)), float(np.percentile(ratio, 97.5))]


def paired_vs_base(paired: dict[str, Any]) -> dict[str, Any]:
    """The paired S fields of vs_base: S, ci (pairs resampled), ci_suite (within probes), the pairs' count and
    side rates."""
    rows = paired["pairs"]
    S, ci = paired_ratio(rows)
    a = np.asarray(rows, dtype=float) if rows else None
    return {
        "S": S, "ci": ci, "ci_suite": suite_interval(rows, paired.get("probes") or []),
        "design": "paired", "pairs": len(rows), "incomplete_pairs": paired["incomplete"],
        "paired_tok_s": None if a is None else {"arm": float(a[:, 0].sum() / a[:, 1].sum()),
                                                "base": float(a[:, 2].sum() / a[:, 3].sum())},
    }


def sides(paired: dict[str, Any]) -> tuple[list[list[float]], list[list[float]]]:
    """Each side's [tokens, seconds] samples of the complete pairs (for `precision.spent`)."""
    rows = paired["pairs"]
    return [[r[0], r[1]] for r in rows], [[r[2], r[3]] for r in rows]
