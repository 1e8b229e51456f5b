"""How rare a corruption a number of judged requests could have seen: the verdict's power, computed exactly.

A check that reads every request (the volume channel: each output equal to
base's, or teacher-forced and found to be base's choice at every token) flags
a corruption class that hits a share p of the requests as soon as one
corrupted request is among the n judged. Requests are independent draws of
the traffic, so the number corrupted is Binomial(n, p) and

    P(seen) = P(X > allowed) = 1 - sum_{i <= allowed} C(n, i) p^i (1 - p)^(n - i)

where ``allowed`` is how many flagged requests the verdict tolerates before
it fires (0 for a check whose clean control flags none by construction: a
token that is base's choice within the near-tie bound is never counted; more
where the check has a clean rate of its own, e.g. identifier near-misses the
model makes by itself, read from the control). `detectable_rate` is the
smallest p with P(seen) >= CONFIDENCE, found by bisection on that exact sum
(no normal approximation: at n = 2,000 and allowed = 0 the approximation is
fine, at n = 30 it is not). With allowed = 0 it has the closed form

    p = 1 - (1 - CONFIDENCE)^(1/n)      (n = 2,000: 0.150%; n = 300: 0.994%)

docs/design.md section 4 ("The power of a volume replay") writes the
derivation and what the nightly's n buys.
"""

from __future__ import annotations

import math
from typing import Any

CONFIDENCE = 0.95


def seen_probability(n: int, p: float, allowed: int = 0) -> float:
    """P(more than ALLOWED of N requests are flagged) when each is, independently, with probability P."""
    if n <= 0 or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0 if n > allowed else 0.0
    # the lower tail term by term in log space (n up to millions without overflow)
    log_q, log_p = math.log1p(-p), math.log(p)
    tail = 0.0
    for i in range(0, min(allowed, n) + 1):
        tail += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                         + (n - i) * log_q)
    return max(0.0, 1.0 - tail)


def detectable_rate(n: int, allowed: int = 0, confidence: float = CONFIDENCE) -> float | None:
    """The smallest share of corrupted requests that N judged requests would show (more than ALLOWED flagged)
    with probability CONFIDENCE; None when N is too small to show any (N <= ALLOWED)."""
    if n <= allowed:
        return None
    if allowed == 0:
        return float(1.0 - (1.0 - confidence) ** (1.0 / n))
    lo, hi = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any share a report prints
        mid = (lo + hi) / 2
        if seen_probability(n, mid, allowed) >= confidence:
            hi = mid
        else:
            lo = mid
    return hi


def statement(n: int, k: int, allowed: int = 0, what: str = "corrupted") -> dict[str, Any]:
    """The rate with its power: "n requests, k corrupted; a corruption in at least p% of requests would have been
    seen with 95% probability", as text and as figures (``p`` a fraction, None when N cannot show any)."""
    p = detectable_rate(n, allowed)
    if p is None:
        text = f"{n} requests, {k} {what}: too few to see any corruption rate with {CONFIDENCE:.0%} probability"
    else:
        text = (f"{n} requests, {k} {what}; a corruption in at least {100 * p:.3g}% of requests would have been "
                f"seen with {CONFIDENCE:.0%} probability")
    return {"n": n, "k": k, "allowed": allowed, "detectable_rate": p, "confidence": CONFIDENCE,
            "observed_rate": k / n if n else None, "text": text}
