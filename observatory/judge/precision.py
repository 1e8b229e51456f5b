"""How precise a speedup S is: the smallest change it can detect and the traffic a target needs (issue 29 item 1).

Derivation (docs/design.md section 4, "How precise S is"):

- SE(S) = (hi - lo) / (2 z_0.975), reading S's 95% bootstrap interval [lo, hi]
  (observatory.judge.figures) as a normal one; an asymmetric interval gives the
  mean of its two halves;
- the relative half-width h = (hi - lo) / (2 S);
- ``detectable_change`` = (z_0.975 + z_0.8) SE(S) / S ~= 2.80 SE / S: the
  smallest relative change in S (against a fixed reference such as S = 1 or a
  floor) that a two-sided test at 95% confidence finds with 80% power. Between
  two sessions of this precision it is sqrt(2) times larger;
- ``traffic_for`` a target half-width t: the interval narrows as 1/sqrt(n), so
  both arms' timed traffic times (h / t)^2. Assumed: more traffic of the same
  mix, requests independent (no drift between them), base and spec scaled alike.

A figure without an interval (fewer than two timed requests on an arm, or an
interval of zero width: the bootstrap saw no spread) gives None, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Z_975 = 1.959963984540054  # two-sided 95% confidence
Z_80 = 0.8416212335729143  # 80% power
TARGET_HALF_WIDTH = 0.02  # the precision issue 29 asks of S: a 95% interval within +-2%
ASSUMPTION = ("half-width scales as 1/sqrt(n): more timed traffic of the same mix on both arms, "
              "requests independent (no drift)")


def spent(samples: list[list[float]] | None) -> tuple[int, float] | None:
    """(timed requests, their summed seconds) of one arm's single-stream samples ([tokens, seconds], ...)."""
    if samples is None:
        return None
    return len(samples), float(sum(float(s[1]) for s in samples))


def precision(S: float | None, ci: list[float] | None, arm: tuple[int, float] | None,
              base: tuple[int, float] | None, target: float = TARGET_HALF_WIDTH) -> dict[str, Any]:
    """The precision fields of vs_base: se, half_width, detectable_change, timed_requests, timed_s, traffic_for.

    ARM and BASE are each side's (timed requests, seconds) from `spent`; TARGET the relative half-width
    ``traffic_for`` is computed for.
    """
    out: dict[str, Any] = {
        "se": None, "half_width": None, "detectable_change": None,
        "timed_requests": None if arm is None or base is None else {"arm": arm[0], "base": base[0]},
        "timed_s": None if arm is None or base is None else {"arm": arm[1], "base": base[1]},
        "traffic_for": None,
    }
    if S is None or S <= 0 or not ci or len(ci) != 2 or not ci[1] > ci[0]:
        return out
    se = (float(ci[1]) - float(ci[0])) / (2.0 * Z_975)
    half = (float(ci[1]) - float(ci[0])) / (2.0 * S)
    out.update(se=se, half_width=half, detectable_change=(Z_975 + Z_80) * se / S)
    if arm is not None and base is not None:
        scale = (half / target) ** 2
        out["traffic_for"] = {
            "half_width": target, "scale": scale,
            "requests": {"arm": _whole(arm[0] * scale), "base": _whole(base[0] * scale)},
            "s": {"arm": arm[1] * scale, "base": base[1] * scale},
            "assumption": ASSUMPTION,
        }
    return out


def detectable_words(vb: Mapping[str, Any] | None, spread: float | None = None) -> str:
    """The speedup check's phrase: what change this session cannot see (or that it cannot say).

    SPREAD, the A/A throughput spread when the check judged S by it: a change inside it is not seen
    either, so the phrase names the larger of the two.
    """
    mde = (vb or {}).get("detectable_change")
    if spread is not None and (mde is None or spread > mde):
        return f"a change in S smaller than {spread:.0%} (the A/A spread) is not detectable in this session"
    if mde is None:
        return "the smallest detectable change is not measurable (no interval on S)"
    return f"a change in S smaller than {mde:.0%} is not detectable in this session"


def short_phrase(vb: Mapping[str, Any] | None) -> str:
    """A few words for the terminal's closing block: the detectable change and the traffic for +-2%."""
    mde = (vb or {}).get("detectable_change")
    if mde is None:
        return "precision not measurable"
    need = (vb or {}).get("traffic_for") or {}
    secs = need.get("s") or {}
    more = (f"; ±{need['half_width']:.0%} needs ~{max(secs.values()):.0f} s timed per arm"
            if secs and need.get("half_width") else "")
    return f"detects ≥{mde:.0%}{more}"


def step_phrase(vb: Mapping[str, Any] | None) -> str:
    """A few words for the terminal: S at the median engine step (observatory.judge.step_time) and its precision."""
    step = (vb or {}).get("step") or {}
    S = step.get("S")
    if S is None:
        return "S_step not measurable"
    half = step.get("half_width")
    return f"S_step {S:.3f}" + (f" ±{half:.1%}" if half is not None else " (interval not measurable)")


def _whole(n: float) -> int:
    """Requests to time: N rounded up, float noise (4.0000000001) not counted as one more."""
    return math.ceil(round(n, 6))
