"""Storage: SQLAlchemy 2.0 models and the one place that opens a database.

Everything needed to re-judge a run is stored (docs/design.md section 5): the full
prompt and request parameters (`ProbeRow.definition`), the arm's launch
config (`ArmRow.launch`), token ids, top logprobs, text, timings and counter
deltas (`ResultRow`), and gate verdicts with their details (`VerdictRow`).

The schema is made by the named migrations in `observatory.store.migrations`, which
are applied every time a database is opened; these models must describe the
same schema (a test asserts it).
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    Text,
    create_engine,
    event,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, sessionmaker

from observatory.model.errors import ObservatoryError
from observatory.store import storage_failure
from observatory.store.clock import utcnow
from observatory.store.compressed import CompressedJSON, CompressedText, compact_json
from observatory.store.migrations import _migrations_table, migrate
from observatory.store.packed import PackedChunks, PackedLogprobs

DEFAULT_DB = "runs.db"



class Base(DeclarativeBase):
    """Declarative base of all observatory tables."""


class SessionRow(Base):
    """One invocation on one machine: arms are only compared within one."""

    __tablename__ = "sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # running | complete | interrupted | failed (shown as "abandoned": running, but its lease is dead)
    status: Mapped[str] = mapped_column(String(32), default="running")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    host: Mapped[str] = mapped_column(String(255), default="")
    # {"cpu": ..., "cpus": n, "memory_gib": ..., "gpus": [...], "driver": ..., "python": ..., "platform": ...}
    machine: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    gpu: Mapped[str | None] = mapped_column(String(255), nullable=True)
    observatory_version: Mapped[str] = mapped_column(String(64), default="")
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
    image: Mapped[str | None] = mapped_column(Text, nullable=True)
    # argv of the observatory command and the resolved options
    command: Mapped[list[str]] = mapped_column(JSON, default=list)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    suite: Mapped[str] = mapped_column(String(255), default="")
    # the lease of the process running the session (`observatory.store.lease`): who, where, last refreshed
    lease_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    lease_host: Mapped[str | None] = mapped_column(String(255), nullable=True)
    lease_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class ArmRow(Base):
    """One server configuration run inside a session."""

    __tablename__ = "arms"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(255))
    # pending | starting | running | ok | failed | crashed | hung | interrupted | skipped
    status: Mapped[str] = mapped_column(String(32), default="pending")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    # {"argv": [...], "env": {...}, "speculative_config": {...}|null, "url": ..., "fault": ..., "copy_of": ...}
    launch: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    engine_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the arm's role (observatory.model.roles) and the engine it ran on, written with the session (m010 filled
    # older rows; `observatory.store.arm_facts` fills a row written without them when it is read)
    role: Mapped[str | None] = mapped_column(String(32), nullable=True)
    engine: Mapped[str | None] = mapped_column(String(64), nullable=True)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    log_tail: Mapped[str | None] = mapped_column(CompressedText, nullable=True)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    ready_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # spec counters summed over the arm's measured probe requests
    counters: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # [{"code": "INVALID"|"CONFOUNDED"|"LOW_N"|..., "detail": "..."}]
    validity: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    # derived figures (acceptance, speed, vs_base), recomputable from results
    figures: Mapped[dict[str, Any]] = mapped_column(CompressedJSON, default=dict)


class ProbeRow(Base):
    """A probe as it was run in a session: full prompt and parameters."""

    __tablename__ = "probes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(255))
    category: Mapped[str] = mapped_column(String(64))
    content_hash: Mapped[str] = mapped_column(String(64))
    # Probe.to_dict(): messages/prompt, tools, expectations, gates, max_tokens
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)
    # the exact request parameters sent (temperature, seed, logprobs, ...)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ResultRow(Base):
    """One response of one arm to one probe request."""

    __tablename__ = "results"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    arm_id: Mapped[int] = mapped_column(ForeignKey("arms.id"), index=True)
    probe_id: Mapped[int] = mapped_column(ForeignKey("probes.id"), index=True)
    # stream (the judged result) | nonstream | batch | warmup | timed
    mode: Mapped[str] = mapped_column(String(32), default="stream")
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    ok: Mapped[bool] = mapped_column(Boolean, default=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    text: Mapped[str] = mapped_column(Text, default="")
    # The exact text as a list of code points, only when `text` had to be
    # made storable (lone surrogates, NUL): see `observatory.store.session_store.storable`.
    text_raw: Mapped[list[int] | None] = mapped_column(JSON, nullable=True)
    content: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the thinking a reasoning parser split off (vLLM reasoning_content); None when none was sent
    reasoning: Mapped[str | None] = mapped_column(Text, nullable=True)
    # the large columns no query filters on are compressed on SQLite (observatory.store.compressed)
    token_ids: Mapped[list[int]] = mapped_column(CompressedJSON, default=list)
    token_texts: Mapped[list[str]] = mapped_column(CompressedJSON, default=list)
    # per position: [[token_id, logprob], ...] best first (stored packed: observatory.store.packed)
    top_logprobs: Mapped[list[Any]] = mapped_column(PackedLogprobs, default=list)
    # per position: the logprob the engine gave the emitted token (null where it was not finite); kept
    # where top_logprobs are
    logprobs: Mapped[list[Any]] = mapped_column(CompressedJSON, default=list)
    tool_calls: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    finish_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    # vLLM's stop_reason: the stop string (text) or stop token id (integer) that ended the answer
    stop_reason: Mapped[Any] = mapped_column(JSON, nullable=True)
    usage: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    duration_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    # streamed chunks that carried tokens: [[ms since request start, tokens in chunk], ...]
    chunks: Mapped[list[Any]] = mapped_column(PackedChunks, default=list)
    # spec counters moved by this request: {"drafts", "draft_tokens", "accepted", "accepted_per_pos"}
    counters_delta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    # the openai SDK's verdict on this answer (observatory.client.openai_sdk): {"sdk": version, "error", "differs",
    # "events", "ms"}; None: not read by it (a timed pass, no answer, or stored before the SDK judged answers)
    sdk: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class VerdictRow(Base):
    """A gate's verdict on one result (or on a spec/base pair, or an arm)."""

    __tablename__ = "verdicts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    arm_id: Mapped[int] = mapped_column(ForeignKey("arms.id"), index=True)
    result_id: Mapped[int | None] = mapped_column(ForeignKey("results.id"), nullable=True)
    probe_id: Mapped[int | None] = mapped_column(ForeignKey("probes.id"), nullable=True)
    gate: Mapped[str] = mapped_column(String(64))
    gate_version: Mapped[str] = mapped_column(String(64), default="")
    # PASS | WARN | FAIL | SKIP | NOT_DISCRIMINATING
    verdict: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(CompressedJSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class MeasurementRow(Base):
    """Aggregate throughput of one arm at one concurrency level, one repeat."""

    __tablename__ = "measurements"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    arm_id: Mapped[int] = mapped_column(ForeignKey("arms.id"), index=True)
    concurrency: Mapped[int] = mapped_column(Integer)
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    requests: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    wall_s: Mapped[float] = mapped_column(Float)
    counters_delta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # GPU clocks and utilisation sampled during the block (observatory.engines.gpu_clocks); None before m008
    gpu: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class SummaryRow(Base):
    """One arm of one judged session, in the few figures history reads (written by `evaluate`)."""

    __tablename__ = "summaries"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    arm_id: Mapped[int] = mapped_column(ForeignKey("arms.id"), unique=True)
    position: Mapped[int] = mapped_column(Integer)
    arm: Mapped[str] = mapped_column(String(255), index=True)
    model: Mapped[str | None] = mapped_column(Text, nullable=True)
    engine_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    image: Mapped[str | None] = mapped_column(Text, nullable=True)
    # hash of the session's probe content hashes: same probes, same hash
    suite_hash: Mapped[str] = mapped_column(String(64))
    status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    validity: Mapped[list[str]] = mapped_column(JSON, default=list)
    trusted: Mapped[bool] = mapped_column(Boolean)
    alpha: Mapped[float | None] = mapped_column(Float, nullable=True)
    tau: Mapped[float | None] = mapped_column(Float, nullable=True)
    S: Mapped[float | None] = mapped_column(Float, nullable=True)
    S_lo: Mapped[float | None] = mapped_column(Float, nullable=True)
    S_hi: Mapped[float | None] = mapped_column(Float, nullable=True)
    # S at the median engine step (observatory.judge.step_time), None where not measurable
    S_step: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the session's A/A throughput spread (noise floor), None without an A/A control
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    # {verdict: count} over the arm's judged probes, and the probes that FAIL
    verdicts: Mapped[dict[str, int]] = mapped_column(JSON, default=dict)
    failing: Mapped[list[str]] = mapped_column(JSON, default=list)
    # the session verdict (observatory.judge.verdict) and the session status it assumed
    session_verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    verdict_status: Mapped[str | None] = mapped_column(String(32), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


def database_url(db: str | None = None) -> str:
    """A SQLAlchemy URL from --db, OBSERVATORY_DB, or the default file."""
    value = db or os.environ.get("OBSERVATORY_DB") or DEFAULT_DB
    if "://" in value:
        return value
    return f"sqlite:///{value}"


def shown_url(url: str) -> str:
    """URL as it may be printed: any password replaced by ***."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1] if "@" in url else url


# A new SQLite database gets 2 kB pages, not SQLite's 4 kB: every table and
# index holds at least one page (22 of them, most empty after a compare),
# and a page only part filled by one large row wastes less: 55 kB of a
# default session's 0.44 MB file (benchmarks/README.md, storage_size.py).
# SQLite applies it only to an empty database: an existing one keeps its size.
PAGE_SIZE = 2048


def busy_timeout_ms() -> int:
    """How long SQLite waits for another writer's lock: OBSERVATORY_SQLITE_BUSY_MS, default 30000 (30 s)."""
    raw = os.environ.get("OBSERVATORY_SQLITE_BUSY_MS", "")
    return int(raw) if raw.isdigit() else 30000


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA page_size={PAGE_SIZE}")  # before WAL, which fixes the page size of a new file
    # WAL + a busy timeout: two observatory runs can write one file at once.
    # A read-only database cannot switch journal mode; reading it still works.
    try:
        cur.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError:
        pass
    cur.execute(f"PRAGMA busy_timeout={busy_timeout_ms()}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


_SQLITE_HEADER = b"SQLite format 3\x00"
_FIX = "Point --db / OBSERVATORY_DB at a SQLite file (it is created if missing) or a SQLAlchemy URL."


def _check_sqlite_path(path: str, create: bool) -> None:
    """The file is absent (and may be created), empty, or a SQLite database."""
    p = Path(path)
    if p.is_dir():
        raise ObservatoryError(f"--db {path} is a directory, not a database file. {_FIX}")
    if p.exists():
        if not p.is_file():
            raise ObservatoryError(f"--db {path} is not a regular file. {_FIX}")
        try:
            with p.open("rb") as f:
                head = f.read(len(_SQLITE_HEADER))
        except OSError as e:
            raise ObservatoryError(f"--db {path} cannot be read ({e.strerror}). {_FIX}") from None
        if head and head != _SQLITE_HEADER:
            raise ObservatoryError(f"--db {path} is not a SQLite database (it holds something else). {_FIX}")
        return
    if not create:
        raise ObservatoryError(
            f"No database at {path}. Run `observatory compare` first, or point --db / OBSERVATORY_DB "
            "at an existing file or URL."
        )
    if not p.parent.is_dir():
        raise ObservatoryError(f"--db {path}: the directory {p.parent} does not exist. Create it first. {_FIX}")


def _engine_for(url: str) -> Engine:
    try:
        return create_engine(url, future=True, json_serializer=compact_json)
    except NoSuchModuleError:
        scheme = url.split("://", 1)[0]
        raise ObservatoryError(
            f"--db: unknown database scheme {scheme!r}. Use a SQLite file path, sqlite:///FILE or "
            "postgresql+psycopg://user@host/db."
        ) from None
    except ArgumentError:
        raise ObservatoryError(f"--db {shown_url(url)} is not a database URL. {_FIX}") from None
    except ImportError as e:
        raise ObservatoryError(
            f"--db {shown_url(url)}: its database driver is not installed ({e}). For PostgreSQL use "
            "postgresql+psycopg://user@host/db (psycopg 3)."
        ) from None


def open_engine(db: str | None = None, create: bool = True, write: bool = False) -> Engine:
    """Open and migrate the database; every problem with it is one ObservatoryError.

    With create=False a SQLite file that is not there is an error (reading
    commands must not leave an empty database behind, e.g. one named after a
    mistyped option: `--db --json`). With write=True a database that cannot
    be written (read-only file, URI mode=ro, read-only role) is an error now,
    before anything runs.
    """
    url = database_url(db)
    engine = _engine_for(url)
    if engine.dialect.name == "sqlite":
        path = engine.url.database
        if path and path != ":memory:" and not path.startswith("file:"):
            _check_sqlite_path(path, create)
        event.listen(engine, "connect", _sqlite_pragmas)
    @storage_failure.retry_locked
    def ready() -> None:  # a database locked by another writer is retried (observatory.store.storage_failure)
        migrate(engine)
        if write:
            _check_writable(engine)

    try:
        ready()
    except DBAPIError as e:
        engine.dispose()
        why = storage_failure.problem(e)
        if why is not None:  # exit 5, not 3: the database is fine, its disk or another writer is not
            raise storage_failure.StorageFailed(
                f"--db {shown_url(url)}: storage failed ({why}) before anything was stored; fix the cause "
                "and run the command again") from None
        raise ObservatoryError(f"--db {shown_url(url)}: {_db_problem(e)}. {_FIX}") from None
    return engine


def _db_problem(e: DBAPIError) -> str:
    """The driver's own message, first line, as a phrase."""
    first = str(e.orig).strip().splitlines()[0] if e.orig is not None else str(e).splitlines()[0]
    if "readonly" in first or "read-only" in first:
        return f"the database is read-only ({first}) and this command must write to it (or migrate it)"
    return f"cannot use this database ({first})"


def _check_writable(engine: Engine) -> None:
    """Write one row and roll it back: a read-only database fails here, not mid-session."""
    with engine.connect() as conn:
        with conn.begin() as tx:
            conn.execute(_migrations_table.insert().values(name="__observatory_write_check__", applied_at=utcnow()))
            tx.rollback()


def session_factory(engine: Engine) -> sessionmaker:  # type: ignore[type-arg]
    """ORM sessions that keep loaded attributes after commit."""
    return sessionmaker(engine, expire_on_commit=False)


class KnownLedgerRow(Base):
    """The known-findings ledger in effect for one session: its entries as loaded (docs/known.md), so the
    judge re-applies it with no file present. Its own row, written once: the session's row stays small (a
    full database must still let it be marked interrupted)."""

    __tablename__ = "known_ledgers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), unique=True)
    # [{"id", "title", "link", "engine", "versions", "checks", ...}, ...]: observatory.model.ledger's stored form
    entries: Mapped[list[Any]] = mapped_column(CompressedJSON, default=list)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class TriageRow(Base):
    """One `observatory triage` of a session's failing arm: which engine knob the failure depends on."""

    __tablename__ = "triages"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id"), index=True)
    arm: Mapped[str] = mapped_column(String(255))
    # running | complete | interrupted | failed
    status: Mapped[str] = mapped_column(String(32), default="running")
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    # [{"probe": name, "channel": "stream"|"nonstream"|"batch", "first_divergence": int|null}, ...]
    probes: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # {"max_runs": n, "knobs": [...], "not_applicable": {knob: why}}
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # {"reproduced": bool|null, "flips": [...], "keeps": [...], "minimal": {...}|null, "not_tried": [...]}
    outcome: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class TriageRunRow(Base):
    """One relaunch of the arm under one set of knob changes, and what the failing probes did."""

    __tablename__ = "triage_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    triage_id: Mapped[int] = mapped_column(ForeignKey("triages.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    # {knob: value}; {} is the arm as the session ran it (the reproduction)
    change: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # PASS | WARN | FAIL | INVALID (the engine did not start or a request failed)
    verdict: Mapped[str] = mapped_column(String(32))
    first_divergence: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # per probe: {"probe", "verdict", "first_divergence", "margin", "token_ids"}; "argv", "engine_version"
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    log_path: Mapped[str | None] = mapped_column(Text, nullable=True)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
