"""Triage rows: every query on them (issue 26 item 5: all SQL under store/).

`observatory.triage.store` turns these rows into triage runs and the
``triage --json`` object; what a run means is decided there.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from observatory.store.db import TriageRow, TriageRunRow
from observatory.store.session_store import Store


def latest_unfinished(store: Store, session_id: int, arm: str) -> TriageRow | None:
    """The latest triage of ARM in the session that did not complete, if any."""
    with store.tx() as s:
        row: TriageRow | None = s.scalars(
            select(TriageRow).where(TriageRow.session_id == session_id, TriageRow.arm == arm,
                                    TriageRow.status != "complete")
            .order_by(TriageRow.id.desc()).limit(1)).first()
        return row


def run_rows(store: Store, triage_id: int) -> list[TriageRunRow]:
    """A triage's run rows, in the order they were made."""
    with store.tx() as s:
        return list(s.scalars(select(TriageRunRow).where(TriageRunRow.triage_id == triage_id)
                              .order_by(TriageRunRow.position)).all())


def add_run_row(store: Store, triage_id: int, **values: Any) -> None:
    """Store one run row as the triage's next position."""
    with store.tx() as s:
        n = s.scalar(select(func.count(TriageRunRow.id)).where(TriageRunRow.triage_id == triage_id)) or 0
        s.add(TriageRunRow(triage_id=triage_id, position=n, **values))


def triage_rows(store: Store, session_id: int) -> list[TriageRow]:
    """Every triage of a session, oldest first."""
    with store.tx() as s:
        return list(s.scalars(select(TriageRow).where(TriageRow.session_id == session_id)
                              .order_by(TriageRow.id)).all())


def triage_row(store: Store, triage_id: int) -> TriageRow:
    """One triage row (it must exist)."""
    with store.tx() as s:
        row: TriageRow | None = s.get(TriageRow, triage_id)
        assert row is not None, triage_id
        return row
