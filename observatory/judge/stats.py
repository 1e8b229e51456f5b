"""Two-sample tests on categorical samples (the sampling channel's statistics).

The question: are two sets of draws (token ids at one position, from base
and from a spec arm) from the same categorical distribution? The test is
Pearson's chi-square on the 2 x K contingency table, with categories of
small pooled count merged into one ("rare"), so that the chi-square
approximation holds (every kept category has a pooled count of at least
`MIN_POOLED`). The p-value is the chi-square survival function, computed in
closed form (no scipy). Many such tests (prompts x positions) are combined
with Holm's step-down correction, which bounds the family-wise false-alarm
rate by ``alpha`` under any dependence between the tests (positions of one
prompt are dependent). `null_rate` and `power` simulate the whole procedure
with numpy, so the false-alarm rate and the smallest detectable shift are
measured, not assumed (tests/channels/test_channel_sampling.py; docs/channels.md).

`mean_shift` is the other question, asked of one number per draw (the
target's mean logprob of the tokens it sampled): do the arm's draws sit
higher or lower than base's, probe by probe? Per probe Welch's z of the
difference in means, combined over probes by Stouffer's sum. Where every
position's distribution is wide (a real model's prose at temperature 1:
thousands of tokens, most merged into "rare"), the chi-square tests lose the
shift a biased sampler makes; the likelihood of what was sampled keeps it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_POOLED = 10  # a category needs this many draws (both samples together) to be kept on its own
RARE = "rare"  # the merged category

# |z| beyond which a normal test rejects at two-sided p < 0.001 (one-sided p < 0.0005) for one comparison: the rule
# every z-judged drop shares (soak's trend, engine conditions, long prompts' tails, volume's collapse)
Z_P001 = 3.29


@dataclass(frozen=True)
class TwoSample:
    """One two-sample chi-square test: statistic, degrees of freedom, p-value, and the table."""

    stat: float
    df: int
    p: float
    categories: list[Hashable]  # kept categories (RARE last if present)
    counts_a: list[int]
    counts_b: list[int]

    @property
    def testable(self) -> bool:
        """Whether the table had at least two categories (else p is 1 and says nothing)."""
        return self.df > 0


def binom_sf(k: int, n: int, p: float) -> float:
    """P(X >= K) for X ~ Binomial(N, P), summed in log space (exact; no overflow at any N)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    base = math.lgamma(n + 1)
    terms = [base - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * lp + (n - j) * lq for j in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def binom_upper(k: int, n: int, confidence: float) -> float:
    """The one-sided Clopper-Pearson upper bound on a binomial rate with K successes in N trials (N > 0): the p
    at which P(X <= K) = 1 - CONFIDENCE, by bisection."""
    if k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        below_or_at = 1.0 - binom_sf(k + 1, n, mid)
        lo, hi = (mid, hi) if below_or_at > 1 - confidence else (lo, mid)
    return hi


def chi2_sf(x: float, df: int) -> float:
    """P(X >= x) for X chi-square with integer DF >= 1 (closed form; no scipy)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if x <= 0:
        return 1.0
    h = x / 2.0
    if df % 2 == 0:  # Q(k, h) = exp(-h) * sum_{i<k} h^i / i!
        term, total = 1.0, 1.0
        for i in range(1, df // 2):
            term *= h / i
            total += term
        return min(1.0, math.exp(-h) * total)
    # odd: erfc(sqrt(h)) + exp(-h) * sum_{i=1}^{(df-1)/2} h^(i-1/2) / Gamma(i+1/2)
    total = math.erfc(math.sqrt(h))
    term = math.exp(-h) * math.sqrt(h) / math.gamma(1.5)
    for i in range(1, (df - 1) // 2 + 1):
        total += term
        term *= h / (i + 0.5)
    return min(1.0, total)


def chi2_two_sample(a: Sequence[Hashable], b: Sequence[Hashable], min_pooled: int = MIN_POOLED) -> TwoSample:
    """Pearson's chi-square test that draws A and B come from one categorical distribution.

    Categories with a pooled count under MIN_POOLED are merged into RARE; if
    RARE itself stays under MIN_POOLED it is merged into the smallest kept
    category. Fewer than two categories left: not testable (p = 1, df = 0).
    """
    ca, cb = Counter(a), Counter(b)
    pooled = ca + cb
    kept = sorted((k for k, n in pooled.items() if n >= min_pooled), key=lambda k: (-pooled[k], str(k)))
    rare = [k for k in pooled if k not in kept]
    rows_a = [ca[k] for k in kept]
    rows_b = [cb[k] for k in kept]
    cats: list[Hashable] = list(kept)
    if rare:
        ra, rb = sum(ca[k] for k in rare), sum(cb[k] for k in rare)
        if ra + rb >= min_pooled or not kept:
            cats.append(RARE)
            rows_a.append(ra)
            rows_b.append(rb)
        else:  # too few to stand alone: into the smallest kept category
            rows_a[-1] += ra
            rows_b[-1] += rb
    na, nb = sum(rows_a), sum(rows_b)
    if len(cats) < 2 or na == 0 or nb == 0:
        return TwoSample(0.0, 0, 1.0, cats, rows_a, rows_b)
    n = na + nb
    stat = 0.0
    for xa, xb in zip(rows_a, rows_b):
        col = xa + xb
        ea, eb = na * col / n, nb * col / n
        stat += (xa - ea) ** 2 / ea + (xb - eb) ** 2 / eb
    df = len(cats) - 1
    return TwoSample(stat, df, chi2_sf(stat, df), cats, rows_a, rows_b)


@dataclass(frozen=True)
class MeanShift:
    """`mean_shift`'s answer: Stouffer's z (B above A is positive), its two-sided p, and each group's B - A."""

    z: float
    p: float
    groups: int
    deltas: list[float]


def mean_shift(a_groups: Sequence[Sequence[float]], b_groups: Sequence[Sequence[float]],
               min_n: int = 2) -> MeanShift:
    """Whether B's values sit above or below A's across paired groups (group i of A vs group i of B).

    Per group: Welch's z = (mean B - mean A) / sqrt(var A / nA + var B / nB), normal by the central limit
    theorem at the counts used (128 draws a side). Combined: Stouffer's sum / sqrt(groups), two-sided
    normal p. A group with fewer than MIN_N values on a side, or no spread on both, is left out; none
    left: not testable (z 0, p 1).
    """
    zs: list[float] = []
    deltas: list[float] = []
    for a, b in zip(a_groups, b_groups):
        xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if len(xa) < min_n or len(xb) < min_n:
            continue
        se = math.sqrt(xa.var(ddof=1) / len(xa) + xb.var(ddof=1) / len(xb))
        if se == 0.0:
            continue
        delta = float(xb.mean() - xa.mean())
        zs.append(delta / se)
        deltas.append(delta)
    if not zs:
        return MeanShift(0.0, 1.0, 0, [])
    z = sum(zs) / math.sqrt(len(zs))
    return MeanShift(z, math.erfc(abs(z) / math.sqrt(2.0)), len(zs), deltas)


def holm(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise level ALPHA (any dependence)."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    rejected = [False] * m
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def shifted(p: Sequence[float], d: float) -> np.ndarray:
    """P with D moved onto its first (top) category, taken from the others in proportion."""
    q = np.asarray(p, dtype=float)
    rest = 1.0 - q[0]
    out = q.copy()
    out[0] = min(1.0, q[0] + d)
    if rest > 0:
        out[1:] = q[1:] * (1.0 - out[0]) / rest
    return out


def family_rejects(rng: np.random.Generator, p: Sequence[float], q: Sequence[float], n: int, m: int,
                   alpha: float) -> bool:
    """One simulated family: M tests of N draws from P vs N from Q (only the first differs when P != Q)."""
    pvals = []
    for j in range(m):
        a = rng.choice(len(p), size=n, p=p)
        b = rng.choice(len(p), size=n, p=q if j == 0 else p)
        pvals.append(chi2_two_sample(a.tolist(), b.tolist()).p)
    return any(holm(pvals, alpha))


def null_rate(p: Sequence[float], n: int, m: int, alpha: float, sims: int, seed: int = 0) -> float:
    """Simulated family-wise false-alarm rate: M tests, N draws per side, all from P."""
    rng = np.random.default_rng(seed)
    return sum(family_rejects(rng, p, p, n, m, alpha) for _ in range(sims)) / sims


def power(p: Sequence[float], d: float, n: int, m: int, alpha: float, sims: int, seed: int = 0) -> float:
    """Simulated power: one of M tests sees P's top category shifted by D (N draws per side)."""
    rng = np.random.default_rng(seed)
    q = shifted(p, d).tolist()
    return sum(family_rejects(rng, p, q, n, m, alpha) for _ in range(sims)) / sims
