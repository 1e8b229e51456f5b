"""Storage that fails mid-session: which database errors they are, retrying them, and the clean failure.

A database locked by another writer past SQLite's busy timeout, and a disk
or database that is full (SQLite "database or disk is full", OSError ENOSPC,
PostgreSQL's "No space left on device"), ended a session in an internal
error with the session left running (issue 32). Now a locked database is
retried (`retry_locked`: RETRIES more times, BACKOFF_S apart, each waiting
the busy timeout again); what still fails, and a full disk, becomes
`StorageFailed`: the runner marks the session interrupted with the reason
(where the database still takes that one small write; otherwise its dead
lease shows it as abandoned), and the CLI prints one line and exits
STORAGE_EXIT. SQLite keeps the database intact (a failed transaction rolls
back), so `compare --resume N` goes on once the cause is gone.
"""

from __future__ import annotations

import errno
import functools
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from observatory.model.vocabulary import STORAGE_ERROR

# The exit code of a storage failure: not 2 (INVALID, a measurement) nor 4 (an internal error, a bug).
STORAGE_EXIT = STORAGE_ERROR  # exit code (observatory.model.vocabulary)
RETRIES = 2
BACKOFF_S = 1.0
# After a storage failure, how long the session is still tried to be marked interrupted (a lock may lift).
MARK_WAIT_S = 30.0
_LOCKED = ("database is locked", "database table is locked", "database is busy", "lock timeout",
           "could not obtain lock")
_FULL = ("database or disk is full", "no space left on device", "disk quota exceeded", "disk i/o error")
_ERRNOS = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded", errno.EIO: "disk I/O error"}

F = TypeVar("F", bound=Callable[..., Any])


class StorageFailed(Exception):
    """The database could not store what the session produced; the message says what and what next."""


def _chain(e: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or any(x is y for y in out) or len(out) > 20:
            continue
        out.append(x)
        todo += [x.__cause__, x.__context__, getattr(x, "orig", None)]
    return out


def problem(e: BaseException) -> str | None:
    """"locked: ..." or "full: ..." when E (or what caused it) is a storage failure; None otherwise."""
    for x in _chain(e):
        if isinstance(x, OSError) and x.errno in _ERRNOS:
            return f"full: {_ERRNOS[x.errno]}"
        text = str(x).lower()
        if any(k in text for k in _LOCKED):
            return "locked: the database is locked by another writer (past the busy timeout)"
        if any(k in text for k in _FULL):
            return f"full: {next(k for k in _FULL if k in text)}"
    return None


def failed_in(e: BaseException) -> StorageFailed | None:
    """The StorageFailed in E's chain (the runner's, with the session it marked), if any."""
    return next((x for x in _chain(e) if isinstance(x, StorageFailed)), None)


def retry_locked(fn: F) -> F:
    """FN retried when the database is locked (a transaction that failed rolled back whole)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for attempt in range(RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                why = problem(e)
                if why is None or not why.startswith("locked") or attempt == RETRIES:
                    raise
            time.sleep(BACKOFF_S * (attempt + 1))
        raise AssertionError("unreachable")  # pragma: no cover

    return wrapper  # type: ignore[return-value]


class Finishable(Protocol):
    """What marking a session interrupted needs of a store (`observatory.store.session_store.Store` has it;
    a Protocol, because session_store imports this module)."""

    def finish_session(self, session_id: int, status: str, reason: str | None = None) -> None: ...


def mark_interrupted(store: Finishable, session_id: int, reason: str) -> str:
    """Mark SESSION_ID interrupted for REASON (a storage failure) as far as the database lets it, retrying
    a lock for MARK_WAIT_S; the CLI's line saying what was stored and how to go on."""
    resume = f"once the cause is gone, `observatory compare --resume {session_id}` goes on"
    give_up = time.monotonic() + MARK_WAIT_S
    checkpointed = False
    while True:
        try:
            store.finish_session(session_id, "interrupted", reason)
            return f"{reason}: session {session_id} stored as interrupted; the database is intact; {resume}."
        except Exception as e:
            why = problem(e)
            if why is None:
                raise
            if why.startswith("full") and not checkpointed:
                checkpointed = _free_wal(store)  # a full disk: fold SQLite's -wal file back, then once more
                if checkpointed:
                    continue
            if not why.startswith("locked") or time.monotonic() > give_up:
                return (f"{reason}: session {session_id} could not be marked interrupted either (it shows "
                        f"as abandoned); the database is intact; {resume}.")
        time.sleep(1.0)


def _free_wal(store: Finishable) -> bool:
    """Checkpoint and truncate a SQLite database's -wal file (on a full disk it is most of what was
    written); whether that ran. The database itself is unchanged: the -wal file's pages move into it."""
    engine = getattr(store, "engine", None)
    if engine is None or engine.dialect.name != "sqlite":
        return False
    try:
        engine.dispose()  # idle pooled connections closed: none of them holds the -wal file's frames
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception:
        return False
    return True


def guarded(store: Finishable, session_id: int, fn: Callable[[], Any]) -> Any:
    """FN() (a write of SESSION_ID's outside the runner); a storage failure marks the session interrupted
    and raises StorageFailed."""
    try:
        return fn()
    except StorageFailed:
        raise
    except Exception as e:
        why = problem(e)
        if why is None:
            raise
        raise StorageFailed(mark_interrupted(store, session_id, f"storage failed ({why})")) from e


def one_line(e: BaseException) -> str:
    """The CLI's line for a storage failure E."""
    found = failed_in(e)
    if found is not None:
        return str(found)
    return (f"storage failed ({problem(e)}); nothing more was stored. The database is intact: fix the cause "
            "and run the command again.")
