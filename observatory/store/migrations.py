"""Named, append-only migrations: the schema is what they build.

Each migration is a function ``mNNN_name(conn)`` added to MIGRATIONS in
order and never edited once released. Applied names are recorded in the
``_migrations`` table; every open applies the missing ones. A database that
records a migration this version does not know was written by a newer
observatory and is refused.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from observatory.model.errors import ObservatoryError
from observatory.store.arm_facts import launch_facts
from observatory.store.clock import utcnow

Migration = Callable[[Connection], None]


def _id() -> Column:  # type: ignore[type-arg]
    return Column("id", Integer, primary_key=True, autoincrement=True)


def m001_initial(conn: Connection) -> None:
    """Sessions, arms, probes, results, verdicts, measurements."""
    md = MetaData()
    Table(
        "sessions",
        md,
        _id(),
        Column("started_at", DateTime, nullable=False),
        Column("finished_at", DateTime),
        Column("status", String(32), nullable=False),
        Column("reason", Text),
        Column("host", String(255), nullable=False),
        Column("machine", JSON, nullable=False),
        Column("gpu", String(255)),
        Column("observatory_version", String(64), nullable=False),
        Column("model", Text),
        Column("image", Text),
        Column("command", JSON, nullable=False),
        Column("options", JSON, nullable=False),
        Column("suite", String(255), nullable=False),
    )
    Table(
        "arms",
        md,
        _id(),
        Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, index=True),
        Column("position", Integer, nullable=False),
        Column("name", String(255), nullable=False),
        Column("status", String(32), nullable=False),
        Column("reason", Text),
        Column("launch", JSON, nullable=False),
        Column("engine_version", String(64)),
        Column("model", Text),
        Column("log_path", Text),
        Column("log_tail", Text),
        Column("started_at", DateTime),
        Column("ready_at", DateTime),
        Column("finished_at", DateTime),
        Column("counters", JSON, nullable=False),
        Column("validity", JSON, nullable=False),
        Column("figures", JSON, nullable=False),
    )
    Table(
        "probes",
        md,
        _id(),
        Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, index=True),
        Column("position", Integer, nullable=False),
        Column("name", String(255), nullable=False),
        Column("category", String(64), nullable=False),
        Column("content_hash", String(64), nullable=False),
        Column("definition", JSON, nullable=False),
        Column("params", JSON, nullable=False),
    )
    Table(
        "results",
        md,
        _id(),
        Column("arm_id", Integer, ForeignKey("arms.id"), nullable=False, index=True),
        Column("probe_id", Integer, ForeignKey("probes.id"), nullable=False, index=True),
        Column("mode", String(32), nullable=False),
        Column("repeat", Integer, nullable=False),
        Column("created_at", DateTime, nullable=False),
        Column("ok", Boolean, nullable=False),
        Column("error", Text),
        Column("text", Text, nullable=False),
        Column("content", Text),
        Column("token_ids", JSON, nullable=False),
        Column("token_texts", JSON, nullable=False),
        Column("top_logprobs", JSON, nullable=False),
        Column("tool_calls", JSON),
        Column("finish_reason", String(32)),
        Column("usage", JSON, nullable=False),
        Column("ttft_ms", Float),
        Column("duration_ms", Float),
        Column("chunks", JSON, nullable=False),
        Column("counters_delta", JSON, nullable=False),
        Column("concurrency", Integer, nullable=False),
    )
    Table(
        "verdicts",
        md,
        _id(),
        Column("arm_id", Integer, ForeignKey("arms.id"), nullable=False, index=True),
        Column("result_id", Integer, ForeignKey("results.id")),
        Column("probe_id", Integer, ForeignKey("probes.id")),
        Column("gate", String(64), nullable=False),
        Column("gate_version", String(64), nullable=False),
        Column("verdict", String(32), nullable=False),
        Column("reason", Text, nullable=False),
        Column("details", JSON, nullable=False),
        Column("created_at", DateTime, nullable=False),
    )
    Table(
        "measurements",
        md,
        _id(),
        Column("arm_id", Integer, ForeignKey("arms.id"), nullable=False, index=True),
        Column("concurrency", Integer, nullable=False),
        Column("repeat", Integer, nullable=False),
        Column("requests", Integer, nullable=False),
        Column("completion_tokens", Integer, nullable=False),
        Column("wall_s", Float, nullable=False),
        Column("counters_delta", JSON, nullable=False),
        Column("created_at", DateTime, nullable=False),
    )
    md.create_all(conn)


def m002_result_text_raw(conn: Connection) -> None:
    """Keep a result's exact text as code points when it is not storable as text."""
    conn.execute(text("ALTER TABLE results ADD COLUMN text_raw JSON"))


def m003_session_lease(conn: Connection) -> None:
    """A running session's lease: the runner's process id and host, and when it last refreshed it."""
    conn.execute(text("ALTER TABLE sessions ADD COLUMN lease_pid INTEGER"))
    conn.execute(text("ALTER TABLE sessions ADD COLUMN lease_host VARCHAR(255)"))
    timestamp = "TIMESTAMP" if conn.dialect.name == "postgresql" else "DATETIME"
    conn.execute(text(f"ALTER TABLE sessions ADD COLUMN lease_at {timestamp}"))


def m004_reasoning_and_summaries(conn: Connection) -> None:
    """A result's reasoning text; per-arm summaries that history reads instead of whole sessions."""
    conn.execute(text("ALTER TABLE results ADD COLUMN reasoning TEXT"))
    md = MetaData()
    md.reflect(conn, only=["sessions", "arms"])
    Table(
        "summaries",
        md,
        _id(),
        Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, index=True),
        Column("arm_id", Integer, ForeignKey("arms.id"), nullable=False, unique=True),
        Column("position", Integer, nullable=False),
        Column("arm", String(255), nullable=False, index=True),
        Column("model", Text),
        Column("engine_version", String(64)),
        Column("image", Text),
        Column("suite_hash", String(64), nullable=False),
        Column("status", String(32)),
        Column("validity", JSON, nullable=False),
        Column("trusted", Boolean, nullable=False),
        Column("alpha", Float),
        Column("tau", Float),
        Column("S", Float),
        Column("S_lo", Float),
        Column("S_hi", Float),
        Column("spread", Float),
        Column("ttft_ms", Float),
        Column("verdicts", JSON, nullable=False),
        Column("failing", JSON, nullable=False),
        Column("session_verdict", String(32)),
        Column("verdict_status", String(32)),
        Column("created_at", DateTime, nullable=False),
    )
    md.tables["summaries"].create(conn)


def m005_triage(conn: Connection) -> None:
    """Triages of a session's failing arm and their runs (one per set of knob changes)."""
    md = MetaData()
    Table("sessions", md, _id())  # for the foreign key only; not created here
    Table(
        "triages",
        md,
        _id(),
        Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, index=True),
        Column("arm", String(255), nullable=False),
        Column("status", String(32), nullable=False),
        Column("reason", Text),
        Column("started_at", DateTime, nullable=False),
        Column("finished_at", DateTime),
        Column("probes", JSON, nullable=False),
        Column("options", JSON, nullable=False),
        Column("outcome", JSON, nullable=False),
    )
    Table(
        "triage_runs",
        md,
        _id(),
        Column("triage_id", Integer, ForeignKey("triages.id"), nullable=False, index=True),
        Column("position", Integer, nullable=False),
        Column("change", JSON, nullable=False),
        Column("verdict", String(32), nullable=False),
        Column("first_divergence", Integer),
        Column("reason", Text, nullable=False),
        Column("details", JSON, nullable=False),
        Column("log_path", Text),
        Column("duration_s", Float),
        Column("created_at", DateTime, nullable=False),
    )
    md.tables["triages"].create(conn)
    md.tables["triage_runs"].create(conn)


def m006_result_logprobs_stop_reason(conn: Connection) -> None:
    """A result's per-token logprobs of the emitted tokens, and vLLM's stop_reason (issue 28 item 2)."""
    conn.execute(text("ALTER TABLE results ADD COLUMN logprobs JSON"))
    conn.execute(text("ALTER TABLE results ADD COLUMN stop_reason JSON"))


def m007_result_sdk(conn: Connection) -> None:
    """A result's openai SDK verdict (issue 28 item 7: the official client as a conformance judge)."""
    conn.execute(text("ALTER TABLE results ADD COLUMN sdk JSON"))


def m008_warm_measurement_gpu(conn: Connection) -> None:
    """GPU clocks and utilisation sampled beside each timed block (issue 29 item 3; observatory.engines.gpu_clocks)."""
    conn.execute(text("ALTER TABLE measurements ADD COLUMN gpu JSON"))


def m009_summary_s_step(conn: Connection) -> None:
    """S at the median engine step, per summarised arm (issue 29 item 5; observatory.judge.step_time)."""
    conn.execute(text('ALTER TABLE summaries ADD COLUMN "S_step" FLOAT'))  # quoted: PostgreSQL folds bare names to lower case


def m010_known_ledgers(conn: Connection) -> None:
    """The known-findings ledger in effect per session (issue 46 item 1; observatory.model.ledger)."""
    md = MetaData()
    Table("sessions", md, _id())  # for the foreign key only; not created here
    Table(
        "known_ledgers",
        md,
        _id(),
        Column("session_id", Integer, ForeignKey("sessions.id"), nullable=False, unique=True),
        Column("entries", JSON, nullable=False),
        Column("created_at", DateTime, nullable=False),
    )
    md.tables["known_ledgers"].create(conn)


def m011_arm_role_engine(conn: Connection) -> None:
    """Each arm's role and engine as columns (issue 47 item 2), filled for the arms stored before by the rule the
    runner applied (`observatory.store.arm_facts.launch_facts`: the launch's own, else derived in run order)."""
    conn.execute(text("ALTER TABLE arms ADD COLUMN role VARCHAR(32)"))
    conn.execute(text("ALTER TABLE arms ADD COLUMN engine VARCHAR(64)"))
    sessions: dict[int, list[tuple[int, str, dict[str, Any] | None]]] = {}
    for arm_id, session_id, name, launch in conn.execute(
            text("SELECT id, session_id, name, launch FROM arms ORDER BY session_id, position, id")):
        sessions.setdefault(session_id, []).append((arm_id, name, json.loads(launch) if isinstance(launch, str)
                                                    else launch))
    for arms in sessions.values():
        for (arm_id, _, _), (role, engine) in zip(arms, launch_facts([(name, launch) for _, name, launch in arms])):
            conn.execute(text("UPDATE arms SET role = :role, engine = :engine WHERE id = :id"),
                         {"role": role, "engine": engine, "id": arm_id})


MIGRATIONS: list[Migration] = [
    m001_initial, m002_result_text_raw, m003_session_lease, m004_reasoning_and_summaries, m005_triage,
    m006_result_logprobs_stop_reason, m007_result_sdk, m008_warm_measurement_gpu, m009_summary_s_step,
    m010_known_ledgers,
    m011_arm_role_engine,
]

_TRACKING = MetaData()
_migrations_table = Table(
    "_migrations",
    _TRACKING,
    Column("name", String(255), primary_key=True),
    Column("applied_at", DateTime, nullable=False),
)


def _check_unique(migrations: list[Migration]) -> None:
    names = [m.__name__ for m in migrations]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ObservatoryError(f"Duplicate migration names: {', '.join(dupes)}")


def applied(engine: Engine) -> list[str]:
    """Names of the migrations recorded in the database."""
    if not inspect(engine).has_table("_migrations"):
        return []
    with engine.connect() as conn:
        return [r[0] for r in conn.execute(select(_migrations_table.c.name))]


def migrate(engine: Engine, migrations: list[Migration] | None = None) -> list[str]:
    """Apply the missing migrations; return the names applied now.

    Two observatory runs may open one database at the same moment: on
    PostgreSQL an advisory lock serialises them; on SQLite the loser of a race
    sees "already exists" (or, where the winner's tables made its own DDL a
    no-op, a duplicate name when it records the migration: its transaction is
    rolled back) and retries once the winner's migration is recorded.
    """
    if engine.dialect.name == "postgresql":
        with engine.connect() as lock:
            lock.execute(text("SELECT pg_advisory_lock(7316001)"))
            try:
                return _migrate(engine, migrations)
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(7316001)"))
                lock.commit()
    for attempt in range(5):
        try:
            return _migrate(engine, migrations)
        except (OperationalError, IntegrityError):
            if attempt == 4:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def _migrate(engine: Engine, migrations: list[Migration] | None) -> list[str]:
    migrations = MIGRATIONS if migrations is None else migrations
    _check_unique(migrations)
    known = {m.__name__ for m in migrations}
    _TRACKING.create_all(engine)
    done = applied(engine)
    unknown = [n for n in done if n not in known]
    if unknown:
        raise ObservatoryError(
            f"This database was written by a newer observatory (it has migration(s) "
            f"{', '.join(unknown)} that this version does not know). Upgrade observatory, "
            "or use another --db."
        )
    ran = []
    for m in migrations:
        if m.__name__ in done:
            continue
        with engine.begin() as conn:
            m(conn)
            conn.execute(_migrations_table.insert().values(name=m.__name__, applied_at=utcnow()))
        ran.append(m.__name__)
    return ran
