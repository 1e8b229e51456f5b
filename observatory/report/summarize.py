"""Write the per-arm summaries history reads: a judged session's view, boiled down, one row per arm.

The figures themselves are made by `observatory.judge.summaries.arm_summaries`
from the session's view (`observatory.report.data.build`); this module builds
that view and stores the rows, for one session after it is judged or lazily
for older sessions the first time history reads them (`ensure_summaries`).
"""

from __future__ import annotations

from typing import Any

from observatory.judge.summaries import ASSUMED_WHILE_RUNNING, arm_summaries, session_verdict
from observatory.report.data import build
from observatory.store.session_store import Store
from observatory.store.summary_rows import replace_summaries, stale_sessions, summary_rows


def write_summaries(store: Store, session_id: int) -> int:
    """(Re)write one session's summaries from its judged data; returns how many arms."""
    data = build(store, session_id)
    status = data.session.status
    assumed = ASSUMED_WHILE_RUNNING if status == "running" else status
    verdict = session_verdict(data, assumed)
    arm_ids = {a.position: a.id for a in store.arms(session_id)}
    rows = [{"arm_id": arm_ids[x["position"]], "session_verdict": verdict, "verdict_status": assumed, **x}
            for x in arm_summaries(data) if x["position"] in arm_ids]
    return replace_summaries(store, session_id, rows)


def ensure_summaries(store: Store, model: str | None = None, limit: int = 100) -> list[int]:
    """Build the summaries missing (or stale) among the latest LIMIT sessions of MODEL; returns their ids."""
    stale = stale_sessions(store, model, limit, ASSUMED_WHILE_RUNNING)
    for sid in stale:
        write_summaries(store, sid)
    return stale


def read_summaries(store: Store, model: str | None = None, arm: str | None = None,
                   limit: int = 100) -> list[dict[str, Any]]:
    """Summary fields plus the session's ``started_at``, ``host`` and ``session_status`` of the latest
    LIMIT sessions whose model contains MODEL (case-insensitive), only arm ARM if given; oldest
    session first, arms in run order. Missing summaries are built first."""
    ensure_summaries(store, model, limit)
    return summary_rows(store, model, arm, limit)
