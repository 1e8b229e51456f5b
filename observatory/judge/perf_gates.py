"""Performance gates of one spec arm against the base arm (docs/design.md section 3).

Each check gives PASS, WARN, FAIL or SKIP with its reason, value and threshold:

- ``speedup``: S below the threshold (1.0 unless the user set one) beyond the
  noise (the A/A throughput spread, else the bootstrap CI of S). Below but
  within the noise is a WARN, never a FAIL.
- ``ttft_ratio``: median TTFT of the spec arm over base's above the threshold.
- ``acceptance_floor``: alpha below the floor, the arm's and each
  concurrency level's (acceptance can collapse under concurrency alone).
- ``stream_tau``: tokens per streamed chunk against tau from the counters
  (catches counters that lie or count the wrong thing). WARN only; value is
  the stream's tau, threshold the counters' tau; the allowed gap is three
  standard errors of the chunk sizes plus 5% of tau. The first chunk (the
  prefill's token) and the last (a step a stop may cut) of each response are
  left out, so a truthful engine gives the same tau both ways.
- ``token_count``: streamed ids against ``usage.completion_tokens``. WARN
  only; value is the ids' total, threshold the usage total.

Without user thresholds (``--fail-on``) a breach is a WARN; with them, the
checks the user named FAIL. A figure that cannot be measured (bursty stream,
counters not reported, no base arm, an arm that ran apart from base:
CROSS_SESSION) is a SKIP saying why, never a PASS.
"""

from __future__ import annotations

import re
from typing import Any

from observatory.model.errors import ObservatoryError

# Defaults when the user set no threshold: breaches WARN.
DEFAULTS = {"speedup": 1.0, "ttft_ratio": 2.0, "acceptance": 0.2}
# history_drop: the history channel's (observatory/channels/history.py) relative move that FAILs
_OPS = {"speedup": "<", "ttft_ratio": ">", "acceptance": "<", "history_drop": ">"}
STREAM_TAU_SIGMAS = 3.0
STREAM_TAU_REL = 0.05  # allowance for chunks a parser swallows or merges
_RULE = re.compile(r"(?P<name>[a-z_]+)\s*(?P<op>[<>])\s*(?P<value>[0-9]*\.?[0-9]+)")


def parse_fail_on(text: str | None) -> dict[str, float]:
    """'speedup<1.0,ttft_ratio>3,acceptance<0.5' -> {"speedup": 1.0, "ttft_ratio": 3.0, "acceptance": 0.5}."""
    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = _RULE.fullmatch(part.strip())
        if m is None or _OPS.get(m["name"]) != m["op"]:
            raise ObservatoryError(f"--fail-on: cannot read {part.strip()!r}; write e.g. "
                                   "'speedup<1.0,ttft_ratio>3,acceptance<0.5' (speedup<, ttft_ratio>, acceptance<, history_drop>)")
        out[m["name"]] = float(m["value"])
    return out


def _entry(check: str, verdict: str, reason: str, value: float | None, threshold: float | None) -> dict[str, Any]:
    return {"check": check, "verdict": verdict, "reason": reason, "value": value, "threshold": threshold}


def _threshold(name: str, fail_on: dict[str, float]) -> tuple[float, str]:
    """(threshold, verdict of a breach): the user's with FAIL, else the default with WARN."""
    if name in fail_on:
        return fail_on[name], "FAIL"
    return DEFAULTS[name], "WARN"


def speedup_check(vb: dict[str, Any] | None, floor: dict[str, Any] | None, fail_on: dict[str, float]) -> dict[str, Any]:
    """S against its threshold, beyond the noise."""
    thr, bad = _threshold("speedup", fail_on)
    S = (vb or {}).get("S")
    if vb is None:
        return _entry("speedup", "SKIP", "no base arm in this session: S not measurable", None, thr)
    if S is None:
        return _entry("speedup", "SKIP", "S not measurable (no single-stream rate on this arm or base)", None, thr)
    if S >= thr:
        return _entry("speedup", "PASS", f"S = {S:.2f} >= {thr:.2f}", S, thr)
    spread = (floor or {}).get("throughput_spread")
    ci = vb.get("ci")
    if spread is not None:
        beyond, noise = S + spread < thr, f"A/A spread {spread:.2f}"
    elif ci:
        beyond, noise = ci[1] < thr, f"95% CI [{ci[0]:.2f}, {ci[1]:.2f}]"
    else:
        beyond, noise = True, "no A/A control and no CI: noise unknown"
    if beyond:
        return _entry("speedup", bad, f"S = {S:.2f} < {thr:.2f} beyond the noise ({noise})", S, thr)
    return _entry("speedup", "WARN", f"S = {S:.2f} < {thr:.2f} but within the noise ({noise})", S, thr)


def ttft_check(spd: dict[str, Any], base_spd: dict[str, Any] | None, fail_on: dict[str, float]) -> dict[str, Any]:
    """Median TTFT of the spec arm over base's."""
    thr, bad = _threshold("ttft_ratio", fail_on)
    if base_spd is None:
        return _entry("ttft_ratio", "SKIP", "no base arm in this session", None, thr)
    a, b = (spd.get("ttft_ms") or {}).get("median"), (base_spd.get("ttft_ms") or {}).get("median")
    if a is None or not b:
        return _entry("ttft_ratio", "SKIP", "TTFT not measured on this arm or base", None, thr)
    ratio = a / b
    text = f"TTFT {a:.0f} ms vs {b:.0f} ms on base: {ratio:.2f}x"
    if ratio > thr:
        return _entry("ttft_ratio", bad, f"{text} > {thr:g}x", ratio, thr)
    return _entry("ttft_ratio", "PASS", f"{text} <= {thr:g}x", ratio, thr)


def acceptance_check(acc: dict[str, Any], by_level: dict[str, Any], fail_on: dict[str, float]) -> dict[str, Any]:
    """The lowest alpha, arm-level or at one concurrency level, against the floor."""
    thr, bad = _threshold("acceptance", fail_on)
    seen = [("the arm", acc.get("alpha"))] + [(f"concurrency {k}", (v or {}).get("alpha")) for k, v in by_level.items()]
    known = [(w, a) for w, a in seen if a is not None]
    if not known:
        return _entry("acceptance_floor", "SKIP", "acceptance not reported by the engine counters", None, thr)
    where, low = min(known, key=lambda p: p[1])
    if low < thr:
        return _entry("acceptance_floor", bad, f"acceptance {low:.1%} at {where} < floor {thr:.0%}", low, thr)
    return _entry("acceptance_floor", "PASS", f"lowest acceptance {low:.1%} ({where}) >= floor {thr:.0%}", low, thr)


def stream_tau_check(st: dict[str, Any] | None, counter_tau: float | None, bursty: bool) -> dict[str, Any]:
    """Tokens per streamed chunk against tau from the counters; WARN beyond noise."""
    if bursty:
        return _entry("stream_tau", "SKIP", "stream bursty: chunks do not follow engine steps", None, None)
    if st is None:
        return _entry("stream_tau", "SKIP", "not measurable: no streamed result has per-chunk token counts that "
                      "cover all its tokens (the engine withheld ids, or sent none)", None, None)
    if counter_tau is None:
        return _entry("stream_tau", "SKIP", "tau not reported by the counters", st["tau"], None)
    tol = STREAM_TAU_SIGMAS * st["se"] + STREAM_TAU_REL * counter_tau
    gap = abs(st["tau"] - counter_tau)
    text = (f"stream tau {st['tau']:.2f} ({st['chunks']} chunks) vs counter tau {counter_tau:.2f}: "
            f"differ by {gap:.2f}")
    if gap > tol:
        return _entry("stream_tau", "WARN", f"{text} > noise {tol:.2f}: the counters may lie or count other requests",
                      st["tau"], counter_tau)
    return _entry("stream_tau", "PASS", f"{text} <= noise {tol:.2f}", st["tau"], counter_tau)


def token_count_check(tc: dict[str, Any]) -> dict[str, Any]:
    """Streamed ids against usage.completion_tokens."""
    if not tc.get("requests"):
        return _entry("token_count", "SKIP", "no request has both streamed ids and usage", None, None)
    if tc["disagree"]:
        return _entry("token_count", "WARN",
                      f"streamed ids ({tc['ids']}) disagree with usage.completion_tokens ({tc['usage']}) in "
                      f"{tc['disagree']} of {tc['requests']} requests: figures use usage", float(tc["ids"]),
                      float(tc["usage"]))
    return _entry("token_count", "PASS", f"ids match usage in all {tc['requests']} requests",
                  float(tc["ids"]), float(tc["usage"]))


def performance(fig: dict[str, Any], base_fig: dict[str, Any] | None, floor: dict[str, Any] | None,
                fail_on: dict[str, float]) -> list[dict[str, Any]]:
    """Every performance check of one spec arm (the figures dict's "performance" list)."""
    spd, acc = fig["speed"], fig["acceptance"]
    bursty = bool((spd.get("bursty") or {}).get("bursty"))
    apart = (fig.get("vs_base") or {}).get("cross_session")
    if apart:
        # not the same session in the sense that matters: no in-session speed comparison to judge
        why = f"cross-session against base ({apart})"
        against_base = [_entry("speedup", "SKIP", why, (fig.get("vs_base") or {}).get("S"), _threshold("speedup", fail_on)[0]),
                        _entry("ttft_ratio", "SKIP", why, None, _threshold("ttft_ratio", fail_on)[0])]
    else:
        against_base = [speedup_check(fig.get("vs_base"), floor, fail_on),
                        ttft_check(spd, base_fig["speed"] if base_fig else None, fail_on)]
    return [
        *against_base,
        acceptance_check(acc, fig.get("by_concurrency") or {}, fail_on),
        stream_tau_check(fig.get("stream_tau"), fig.get("stream_counter_tau"), bursty),
        token_count_check(spd.get("token_count") or {}),
    ]
