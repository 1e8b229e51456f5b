"""The per-arm summary rows history reads: every query on them (issue 26 item 5: all SQL under store/).

What goes into a row is decided above (`observatory.judge.summaries` makes
the figures, `observatory.report.summarize` writes them when a session is
judged); here they are stored, found stale and read back with the filters in SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
from sqlalchemy import Text, delete, func, literal, or_, select, type_coerce

from observatory.model.vocabulary import FAIL, INVALID, WARN
from observatory.store.db import ArmRow, SessionRow, SummaryRow, VerdictRow
from observatory.store.session_store import Store

_decode = msgspec.json.Decoder().decode
# the JSON columns read as text and decoded with msgspec (4,000 rows: SQLAlchemy's json.loads was half the time)
_JSON_FIELDS = ("validity", "verdicts", "failing")


def replace_summaries(store: Store, session_id: int, rows: Sequence[dict[str, Any]]) -> int:
    """Replace the session's summary rows with ROWS (SummaryRow fields); returns how many."""
    with store.tx() as tx:
        tx.execute(delete(SummaryRow).where(SummaryRow.session_id == session_id))
        tx.add_all([SummaryRow(session_id=session_id, **r) for r in rows])
    return len(rows)


def _latest_sessions(model: str | None, limit: int) -> Any:
    q = select(SessionRow.id)
    if model:
        served = select(ArmRow.session_id).where(func.lower(ArmRow.model).contains(model.lower(), autoescape=True))
        q = q.where(or_(func.lower(SessionRow.model).contains(model.lower(), autoescape=True),
                        SessionRow.id.in_(served)))
    return q.order_by(SessionRow.id.desc()).limit(limit)


def stale_sessions(store: Store, model: str | None, limit: int, assumed_while_running: str) -> list[int]:
    """Among the latest LIMIT sessions of MODEL, those whose summaries are missing or were taken under
    another status than the session's (a running session is summarised as ASSUMED_WHILE_RUNNING)."""
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
    return sorted(stale)


def summary_rows(store: Store, model: str | None = None, arm: str | None = None,
                 limit: int = 100) -> list[dict[str, Any]]:
    """Summary fields plus the session's ``started_at``, ``host`` and ``session_status`` of the latest
    LIMIT sessions whose model contains MODEL (case-insensitive), only arm ARM if given; oldest
    session first, arms in run order."""
    t = SummaryRow.__table__
    cols = [type_coerce(c, Text).label(c.name) if c.name in _JSON_FIELDS else c for c in t.c]
    q = (select(*cols, SessionRow.started_at, SessionRow.host, SessionRow.status.label("session_status"))
         .join(SessionRow, t.c.session_id == SessionRow.id)
         .where(t.c.session_id.in_(_latest_sessions(model, limit).scalar_subquery())))
    if arm is not None:
        q = q.where(t.c.arm == arm)
    if model:
        q = q.where(func.lower(t.c.model).contains(model.lower(), autoescape=True))
    with store.tx() as tx:
        rows = [dict(r) for r in tx.execute(q.order_by(t.c.session_id, t.c.position)).mappings()]
    for r in rows:
        for f in _JSON_FIELDS:
            r[f] = _decode(r[f]) if r[f] is not None else None
    return rows


# session verdicts that keep a night out of the history baseline (observatory.judge.summaries.session_verdict)
KEPT_OUT_VERDICTS = (FAIL, INVALID)


def earlier_trusted(store: Store, before_session: int, arm: str, model: str | None, suite_hash: str,
                    engine_version: str | None, nights: int,
                    flagged_by: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(baseline, kept out): alpha, tau and S of the last NIGHTS trusted summaries of ARM before
    BEFORE_SESSION with this model, suite and engine version whose session verdict was not FAIL or
    INVALID and whose arm the channel FLAGGED_BY (a gate name) did not WARN or FAIL; and the trusted
    nights newer than the oldest of those that were kept out, each with ``kept_out`` saying why.
    Both oldest first (the history channel's baseline: one bad night never joins it)."""
    t = SummaryRow.__table__
    flagged = (select(VerdictRow.id).where(VerdictRow.arm_id == t.c.arm_id, VerdictRow.gate == flagged_by,
                                           VerdictRow.verdict.in_((WARN, FAIL))).exists()
               if flagged_by else literal(False))
    bad_verdict = func.coalesce(t.c.session_verdict, "").in_(KEPT_OUT_VERDICTS)
    base = (select(t.c.session_id, t.c.arm_id, t.c.alpha, t.c.tau, t.c.S, t.c.S_step, t.c.session_verdict,
                   flagged.label("flagged"))
            .where(t.c.session_id < before_session, t.c.arm == arm, t.c.model == model, t.c.suite_hash == suite_hash,
                   t.c.engine_version == engine_version, t.c.trusted.is_(True)))
    with store.tx() as tx:
        kept = [dict(r) for r in tx.execute(base.where(~bad_verdict, ~flagged)
                                             .order_by(t.c.session_id.desc()).limit(nights)).mappings()]
        oldest = min((r["session_id"] for r in kept), default=-1)
        out = [dict(r) for r in tx.execute(base.where(bad_verdict | flagged, t.c.session_id > oldest)
                                            .order_by(t.c.session_id.desc()).limit(nights)).mappings()]
    for r in out:
        r["kept_out"] = (f"flagged by {flagged_by}" if r["flagged"]
                         else f"session verdict {r['session_verdict']}")
    return kept[::-1], out[::-1]
