"""Per-arm summaries: the few figures history reads, stored when a session is judged.

`history` used to build every session whole (every result, its top
logprobs, every verdict) to keep a dozen numbers per arm: 96 s over 1,000
sessions. `observatory.report.summarize.write_summaries` (called by
`observatory.commands.evaluate` after the judge and the figures) stores those
numbers as one `SummaryRow` per arm, made here (`arm_summaries`) from the
session's view, and `read_summaries` reads them back with the filters in SQL.

Databases written before summaries existed get theirs built once, lazily,
the first time history reads those sessions (`observatory.report.summarize.ensure_summaries`).

The session verdict is the nightly gate's (`session_verdict`, the one call
of `observatory.judge.verdict` here). A session is judged while it still runs and
marked complete right after, so the verdict is taken as the policy states it
for the complete session, and the status it assumed is stored with it; a
session that ended otherwise (interrupted, failed) is summarised again when
history next reads it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from observatory.judge.verdict import decide
from observatory.model.read_model import SessionView
from observatory.model.vocabulary import FAIL, INVALID_CODES

# A session still running is summarised as the verdict it would have once complete.
ASSUMED_WHILE_RUNNING = "complete"
# History's default regression tolerance on acceptance: 5% of the mean (docs/design.md).
DEFAULT_ACCEPTANCE_TOLERANCE = 0.05


def summary_model(arm_model: str | None, session_model: str | None) -> str | None:
    """The model an arm's summary is filed under: the one its server served (a URL arm's own), else the
    session's --model. History never draws one trend across two models that one session model string hid
    (issue 32 item 7), and it looks the nights up by this same key (observatory.channels.history)."""
    return arm_model or session_model


def suite_hash(hashes: Iterable[str]) -> str:
    """A hash of a session's probe content HASHES (same probes, same hash)."""
    joined = ",".join(sorted(hashes))
    return hashlib.sha256(joined.encode()).hexdigest()[:12]


def session_verdict(data: SessionView, status: str | None = None) -> str:
    """The session verdict of one `report_data.build` view, as the policy states it had the session
    ended with STATUS (default: its own status); the one call of the verdict policy here."""
    session = data.session if status is None else replace(data.session, status=status)
    return decide(session, data.arms).verdict


def arm_summaries(data: SessionView) -> list[dict[str, Any]]:
    """One dict of SummaryRow fields per arm of a `report_data.build` view (no ids, no verdict)."""
    s = data.session
    spread = next((a.figures.noise_floor.get("throughput_spread") for a in data.arms if a.figures.noise_floor),
                  None)
    suite = suite_hash(p.hash for p in data.probes)
    out = []
    for a in data.arms:
        codes = [v.code for v in a.validity]
        fig = a.figures
        acc, vs, spd = fig.acceptance or {}, fig.vs_base or {}, fig.speed or {}
        ci = vs.get("ci")
        ci = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else None
        cells = [r.verdict for r in a.results if r.verdict]
        out.append({
            "position": a.position, "arm": a.name, "model": summary_model(a.model, s.model),
            "engine_version": a.engine_version, "image": s.image, "suite_hash": suite,
            "status": a.status, "validity": codes,
            "trusted": a.status == "ok" and not any(c in INVALID_CODES for c in codes),
            "alpha": acc.get("alpha"), "tau": acc.get("tau"), "S": vs.get("S"),
            "S_lo": ci[0] if ci else None, "S_hi": ci[1] if ci else None, "spread": spread,
            "S_step": (vs.get("step") or {}).get("S"),
            "ttft_ms": (spd.get("ttft_ms") or {}).get("median"),
            "verdicts": dict(Counter(cells)),
            "failing": sorted(r.probe for r in a.results if r.verdict == FAIL),
        })
    return out
