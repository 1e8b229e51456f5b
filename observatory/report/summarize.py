"""Write the per-arm summaries history reads: a judged session's view, boiled down, one row per arm.

The figures themselves are made by `observatory.judge.summaries.arm_summaries`
from the session's view (`observatory.report.data.build`); this module builds
that view and stores the rows, for one session after it is judged or lazily
for older sessions the first time history reads them (`ensure_summaries`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import Text, delete, func, select, type_coerce

from observatory.judge.summaries import ASSUMED_WHILE_RUNNING, arm_summaries, session_verdict
from observatory.report.data import build
from observatory.store.db import ArmRow, SessionRow, SummaryRow

_decode = msgspec.json.Decoder().decode


def write_summaries(store: Any, session_id: int) -> int:
    """(Re)write one session's summaries from its judged data; returns how many arms."""
    data = build(store, session_id)
    status = data.session.status
    assumed = ASSUMED_WHILE_RUNNING if status == "running" else status
    verdict = session_verdict(data, assumed)
    arm_ids = {a.position: a.id for a in store.arms(session_id)}
    rows = [SummaryRow(session_id=session_id, arm_id=arm_ids[x["position"]], session_verdict=verdict,
                       verdict_status=assumed, **x)
            for x in arm_summaries(data) if x["position"] in arm_ids]
    with store.tx() as tx:
        tx.execute(delete(SummaryRow).where(SummaryRow.session_id == session_id))
        tx.add_all(rows)
    return len(rows)


def _latest_sessions(model: str | None, limit: int) -> Any:
    q = select(SessionRow.id)
    if model:
        q = q.where(func.lower(SessionRow.model).contains(model.lower(), autoescape=True))
    return q.order_by(SessionRow.id.desc()).limit(limit)


def ensure_summaries(store: Any, model: str | None = None, limit: int = 100) -> list[int]:
    """Build the summaries missing (or stale) among the latest LIMIT sessions of MODEL; returns their ids."""
    latest = _latest_sessions(model, limit).subquery()
    with store.tx() as tx:
        status = dict(tx.execute(select(SessionRow.id, SessionRow.status)
                                 .where(SessionRow.id.in_(select(latest)))).tuples().all())
        arms = dict(tx.execute(select(ArmRow.session_id, func.count()).where(ArmRow.session_id.in_(status))
                               .group_by(ArmRow.session_id)).tuples().all())
        summed = {sid: (n, assumed) for sid, n, assumed in tx.execute(
            select(SummaryRow.session_id, func.count(), func.min(SummaryRow.verdict_status))
            .where(SummaryRow.session_id.in_(status)).group_by(SummaryRow.session_id))}
    stale = []
    for sid, n_arms in arms.items():
        n, assumed = summed.get(sid, (0, None))
        if n < n_arms or (status[sid] != "running" and assumed != status[sid]):
            stale.append(sid)
    for sid in sorted(stale):
        write_summaries(store, sid)
    return sorted(stale)


# the JSON columns read as text and decoded with msgspec (4,000 rows: SQLAlchemy's json.loads was half the time)
_JSON_FIELDS = ("validity", "verdicts", "failing")


def read_summaries(store: Any, model: str | None = None, arm: str | None = None,
                   limit: int = 100) -> list[dict[str, Any]]:
    """Summary fields plus the session's ``started_at``, ``host`` and ``session_status`` of the latest
    LIMIT sessions whose model contains MODEL (case-insensitive), only arm ARM if given; oldest
    session first, arms in run order."""
    ensure_summaries(store, model, limit)
    t = SummaryRow.__table__
    cols = [type_coerce(c, Text).label(c.name) if c.name in _JSON_FIELDS else c for c in t.c]
    q = (select(*cols, SessionRow.started_at, SessionRow.host, SessionRow.status.label("session_status"))
         .join(SessionRow, t.c.session_id == SessionRow.id)
         .where(t.c.session_id.in_(_latest_sessions(model, limit).scalar_subquery())))
    if arm is not None:
        q = q.where(t.c.arm == arm)
    with store.tx() as tx:
        rows = [dict(r) for r in tx.execute(q.order_by(t.c.session_id, t.c.position)).mappings()]
    for r in rows:
        for f in _JSON_FIELDS:
            r[f] = _decode(r[f]) if r[f] is not None else None
    return rows
