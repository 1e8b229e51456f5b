"""The speed section's figures as the report shows them (issue 50 item 5).

The latency table reads the judge's percentiles (observatory.judge.latency:
TTFT, TPOT, ITL, E2EL per concurrency level, as `vllm bench serve` reports
them); a figure the bursty-stream rule calls not measurable is shown as such,
with the reason, and the speed chart never draws it (`decode_or_why`): the
page never charts a number its own table calls unmeasurable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LATENCY_COLUMNS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2el_ms", "E2EL"))
QUANTILES = ("p50", "p90", "p99")


def latency_rows(spd: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per concurrency level: requests, and per figure its p50/p90/p99 or why it is not measurable."""
    levels = (spd.get("latency") or {}).get("levels") or {}
    rows = []
    for level in sorted(levels, key=int):
        row = levels[level] or {}
        why = row.get("not_measurable") or {}
        figures = []
        for key, label in LATENCY_COLUMNS:
            fig = row.get(key)
            figures.append({"label": label, "text": " / ".join(ms(fig.get(q)) for q in QUANTILES) if fig else None,
                            "why": None if fig else str(why.get(key) or "not measurable")})
        rows.append({"level": level, "requests": row.get("requests"), "figures": figures})
    return rows


def ms(v: Any) -> str:
    """Milliseconds as the latency table prints them: 2 decimals under 10 ms, 1 above."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return "—"
    return f"{v:.2f}" if abs(v) < 10 else f"{v:.1f}"


def bursty_level_one(spd: Mapping[str, Any]) -> str | None:
    """Why TPOT is not measurable at concurrency 1 under the bursty-stream rule, else None."""
    row = ((spd.get("latency") or {}).get("levels") or {}).get("1") or {}
    why = (row.get("not_measurable") or {}).get("tpot_ms")
    return str(why) if why and "BURSTY" in str(why) else None


def decode_or_why(spd: Mapping[str, Any]) -> float | str | None:
    """The decode rate the speed chart may draw, or the words it shows instead (never a bursty stream's rate)."""
    if (spd.get("bursty") or {}).get("bursty") or bursty_level_one(spd):
        return "not measurable (bursty)"
    v = spd.get("decode_tok_s")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
