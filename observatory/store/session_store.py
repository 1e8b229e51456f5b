"""The store: every write and read of session data goes through here.

Each write is its own short transaction, so a crash at any moment leaves
whole rows only (a result and its counter deltas land together or not at all).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from sqlalchemy import Column, delete, select, update
from sqlalchemy.engine import CursorResult, Engine
from sqlalchemy.orm import Session

from observatory.model.errors import ObservatoryError
from observatory.model.redact import redact, redact_pieces, redact_text
from observatory.store import lease
from observatory.store.arm_facts import launch_facts
from observatory.store.clock import utcnow
from observatory.store.db import (
    ArmRow,
    KnownLedgerRow,
    MeasurementRow,
    ProbeRow,
    ResultRow,
    SessionRow,
    SummaryRow,
    VerdictRow,
    open_engine,
    session_factory,
)
from observatory.store.storage_failure import retry_locked

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
TRUNCATED = "…[truncated]"


def storable(value: Any) -> Any:
    """VALUE with lone surrogates and NUL replaced by U+FFFD in every string, and non-finite floats as None.

    Model output is untrusted: a server may send lone surrogates (valid JSON
    escapes, invalid UTF-8) or NUL, which SQLite text and PostgreSQL reject,
    and NaN or infinite numbers, which PostgreSQL's JSON rejects (issue 19
    item 2): stored as null ("not measurable") on every backend alike.
    """
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    return value


def _usable_logprobs(top: Any) -> Any:
    """Top-k logprobs without the entries whose logprob is not a finite number (no margin can use them)."""
    if not isinstance(top, list):
        return top
    return [[pair for pair in pos if not (isinstance(pair, list) and len(pair) == 2 and pair[1] is None)]
            if isinstance(pos, list) else pos for pos in top]


def clean(column: Column[Any], value: Any) -> Any:
    """VALUE as it may be stored in COLUMN on any backend: storable, redacted, within the column's length.

    The one storage boundary for untrusted values (issue 19 items 2 and 5):
    every row written through the Store passes here.
    """
    if value is None:
        return None
    value = storable(value)
    if column.key == "token_texts" and isinstance(value, list) and all(isinstance(t, str) for t in value):
        # a key split over two tokens is masked in both pieces, not only in the joined text (issue 32 item 1)
        value = redact_pieces(value)
    value = redact(value)
    if column.key == "text_raw" and isinstance(value, list) and all(isinstance(c, int) for c in value):
        raw = "".join(map(chr, value))
        if redact_text(raw) != raw:
            value = [ord(c) for c in redact_text(raw)]
    if column.key == "top_logprobs":
        value = _usable_logprobs(value)
    length = getattr(column.type, "length", None)
    if isinstance(value, str) and length and len(value) > length:
        # String(n) columns (versions, finish reasons): PostgreSQL rejects longer values.
        value = value[: length - len(TRUNCATED)] + TRUNCATED
    return value


def _clean_row(row: Any) -> Any:
    for column in row.__table__.columns:
        value = getattr(row, column.key, None)
        if value is not None:
            setattr(row, column.key, clean(column, value))
    return row


def _shown(row: SessionRow) -> SessionRow:
    """ROW (detached) with the status to show: a running session whose lease is dead is "abandoned"."""
    row.status = lease.shown_status(row)
    return row


class Store:
    """Typed access to one observatory database."""

    def __init__(self, db: str | None = None, engine: Engine | None = None, create: bool = True,
                 write: bool = False):
        self.engine = engine or open_engine(db, create=create, write=write)
        self._sessions = session_factory(self.engine)

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def tx(self) -> Iterator[Session]:
        """One transaction."""
        with self._sessions.begin() as s:
            yield s

    # -- writes ---------------------------------------------------------
    @retry_locked
    def add(self, row: Any) -> Any:
        """Insert ROW in its own transaction; return it with its id."""
        with self.tx() as s:
            s.add(_clean_row(row))
        return row

    @retry_locked
    def update(self, cls: type, row_id: int, **values: Any) -> None:
        """Set VALUES on one row."""
        with self.tx() as s:
            obj = s.get(cls, row_id)
            if obj is None:  # pragma: no cover
                raise ObservatoryError(f"{cls.__name__} {row_id} vanished from the database")
            columns = cls.__table__.columns
            for k, v in values.items():
                setattr(obj, k, clean(columns[k], v))

    @retry_locked
    def update_many(self, cls: type, changes: Mapping[int, Mapping[str, Any]]) -> None:
        """Set each row's values (row id -> values) in one transaction, as `update` sets one row's."""
        with self.tx() as s:
            for row_id, values in changes.items():
                obj = s.get(cls, row_id)
                if obj is None:  # pragma: no cover
                    raise ObservatoryError(f"{cls.__name__} {row_id} vanished from the database")
                columns = cls.__table__.columns
                for k, v in values.items():
                    setattr(obj, k, clean(columns[k], v))

    @retry_locked
    def replace_verdicts(self, session_id: int, rows: list[VerdictRow]) -> None:
        """Atomically swap a session's verdicts for ROWS (judging is idempotent)."""
        with self.tx() as s:
            arm_ids = select(ArmRow.id).where(ArmRow.session_id == session_id)
            s.execute(delete(VerdictRow).where(VerdictRow.arm_id.in_(arm_ids)))
            s.add_all([_clean_row(r) for r in rows])

    @retry_locked
    def set_known(self, session_id: int, entries: list[Any]) -> None:
        """Store ENTRIES as the known-findings ledger in effect for SESSION_ID (replacing any)."""
        with self.tx() as s:
            s.execute(delete(KnownLedgerRow).where(KnownLedgerRow.session_id == session_id))
            s.add(KnownLedgerRow(session_id=session_id, entries=entries))

    def known(self, session_id: int) -> list[Any] | None:
        """The known-findings ledger stored with SESSION_ID (its entries), or None when it has none."""
        with self._sessions() as s:
            row = s.scalars(select(KnownLedgerRow).where(KnownLedgerRow.session_id == session_id)).first()
            return None if row is None else list(row.entries or [])

    @retry_locked
    def clear_arm(self, arm_id: int) -> None:
        """Drop an arm's partial rows before it is run again (--resume)."""
        with self.tx() as s:
            s.execute(delete(VerdictRow).where(VerdictRow.arm_id == arm_id))
            s.execute(delete(ResultRow).where(ResultRow.arm_id == arm_id))
            s.execute(delete(MeasurementRow).where(MeasurementRow.arm_id == arm_id))

    def check_not_running(self, session_id: int) -> SessionRow:
        """SESSION_ID's row, or an error if another live process holds its lease."""
        row = self.session(session_id)
        if row.status == "running" and (row.lease_pid, row.lease_host) != lease.holder():
            raise ObservatoryError(
                f"Session {session_id} is still running ({lease.describe(row)}); wait for it to finish or "
                "stop that process before `compare --resume`."
            )
        return row

    def take_lease(self, session_id: int) -> None:
        """Hold SESSION_ID's lease for this process and mark it running; refuse a session still run elsewhere.

        A compare-and-set on the lease values read, so of two processes resuming
        one session at once exactly one wins (issue 19 item 6).
        """
        row = self.check_not_running(session_id)
        pid, host = lease.holder()
        same = [getattr(SessionRow, k).is_(None) if getattr(row, k) is None
                else getattr(SessionRow, k) == getattr(row, k) for k in ("lease_pid", "lease_host", "lease_at")]
        with self.tx() as s:
            taken = cast(CursorResult[Any], s.execute(
                update(SessionRow).where(SessionRow.id == session_id, *same).values(
                    lease_pid=pid, lease_host=host, lease_at=utcnow(), status="running", finished_at=None,
                    reason=None)
            )).rowcount
        if taken != 1:
            raise ObservatoryError(f"Session {session_id} was taken over by another process just now; "
                                   "`observatory sessions` shows its state.")

    @retry_locked
    def refresh_lease(self, session_id: int) -> None:
        """Mark this process's lease on SESSION_ID as alive now."""
        pid, host = lease.holder()
        with self.tx() as s:
            s.execute(update(SessionRow).where(SessionRow.id == session_id, SessionRow.lease_pid == pid,
                                               SessionRow.lease_host == host).values(lease_at=utcnow()))

    @retry_locked
    def finish_session(self, session_id: int, status: str, reason: str | None = None) -> None:
        """Mark the session finished with STATUS."""
        self.update(SessionRow, session_id, status=status, reason=reason, finished_at=utcnow())

    # -- reads ----------------------------------------------------------
    def session(self, session_id: int | None = None) -> SessionRow:
        """Session SESSION_ID, or the latest one."""
        with self._sessions() as s:
            if session_id is None:
                row = s.scalars(select(SessionRow).order_by(SessionRow.id.desc()).limit(1)).first()
                if row is None:
                    raise ObservatoryError(
                        "No sessions in this database yet. Run `observatory compare` first, "
                        "or point --db / OBSERVATORY_DB at another database."
                    )
                return _shown(row)
            row = s.get(SessionRow, session_id)
            if row is None:
                raise ObservatoryError(f"No session {session_id}. Run `observatory sessions` to list them.")
            return _shown(row)

    def sessions(self, limit: int = 50) -> list[SessionRow]:
        """The latest sessions, newest first."""
        with self._sessions() as s:
            return [_shown(r) for r in s.scalars(select(SessionRow).order_by(SessionRow.id.desc()).limit(limit))]

    def arms(self, session_id: int) -> list[ArmRow]:
        """A session's arms in run order, each with its role and engine (`observatory.store.arm_facts`)."""
        with self._sessions() as s:
            rows = list(s.scalars(select(ArmRow).where(ArmRow.session_id == session_id).order_by(ArmRow.position)))
        if any(r.role is None or r.engine is None for r in rows):  # a row written without them (by hand)
            for r, (role, engine) in zip(rows, launch_facts([(r.name, r.launch) for r in rows])):
                r.role, r.engine = r.role or role, r.engine or engine
        return rows

    def probes(self, session_id: int) -> list[ProbeRow]:
        """A session's probes in suite order."""
        with self._sessions() as s:
            return list(
                s.scalars(select(ProbeRow).where(ProbeRow.session_id == session_id).order_by(ProbeRow.position))
            )

    def results(self, arm_id: int, mode: str | None = None) -> list[ResultRow]:
        """An arm's results (optionally of one mode), in the order they were made."""
        with self._sessions() as s:
            q = select(ResultRow).where(ResultRow.arm_id == arm_id)
            if mode is not None:
                q = q.where(ResultRow.mode == mode)
            return list(s.scalars(q.order_by(ResultRow.id)))

    def result_durations(self, session_id: int) -> list[tuple[int, int, float | None]]:
        """(arm id, probe id, duration_ms) of every result of a session: the timing alone, no texts or ids."""
        with self._sessions() as s:
            rows = s.execute(select(ResultRow.arm_id, ResultRow.probe_id, ResultRow.duration_ms)
                             .join(ArmRow, ArmRow.id == ResultRow.arm_id).where(ArmRow.session_id == session_id))
            return [(int(a), int(p), None if d is None else float(d)) for a, p, d in rows]

    def verdicts(self, arm_id: int) -> list[VerdictRow]:
        """An arm's verdicts."""
        with self._sessions() as s:
            return list(s.scalars(select(VerdictRow).where(VerdictRow.arm_id == arm_id).order_by(VerdictRow.id)))

    def earlier_verdicts(self, gate_prefix: str, before_session: int, limit: int = 5000) -> list[VerdictRow]:
        """The verdicts whose gate starts with GATE_PREFIX, of sessions before BEFORE_SESSION, newest first (a
        judge's history: observatory.judge.rates)."""
        with self._sessions() as s:
            q = (select(VerdictRow).join(ArmRow, ArmRow.id == VerdictRow.arm_id)
                 .where(ArmRow.session_id < before_session, VerdictRow.gate.startswith(gate_prefix, autoescape=True))
                 .order_by(VerdictRow.id.desc()).limit(limit))
            return list(s.scalars(q))

    def stored_verdict(self, session_id: int) -> tuple[str | None, str | None] | None:
        """(session verdict, the session status it was judged at) from the session's stored summaries; None
        when none is stored."""
        with self._sessions() as s:
            row = s.execute(select(SummaryRow.session_verdict, SummaryRow.verdict_status)
                            .where(SummaryRow.session_id == session_id).limit(1)).first()
        return None if row is None else (row[0], row[1])

    def measurements(self, arm_id: int) -> list[MeasurementRow]:
        """An arm's throughput measurements."""
        with self._sessions() as s:
            return list(
                s.scalars(select(MeasurementRow).where(MeasurementRow.arm_id == arm_id).order_by(MeasurementRow.id))
            )
