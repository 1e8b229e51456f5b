"""Named append-only migrations (issue 2): blank database, newer database refused, schema = models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from observatory.model.errors import ObservatoryError
from observatory.store.db import Base, open_engine
from observatory.store.migrations import MIGRATIONS, applied, migrate


def test_blank_database_gets_every_migration(tmp_path: Path) -> None:
    engine = open_engine(str(tmp_path / "a.db"))
    assert applied(engine) == [m.__name__ for m in MIGRATIONS]
    # opening again applies nothing
    assert migrate(engine) == []


def test_migrated_schema_equals_the_models(tmp_path: Path) -> None:
    engine = open_engine(str(tmp_path / "a.db"))
    insp = inspect(engine)
    for table in Base.metadata.sorted_tables:
        got = {c["name"] for c in insp.get_columns(table.name)}
        assert got == {c.name for c in table.columns}, table.name


def test_newer_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    engine = open_engine(str(path))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO _migrations (name, applied_at) VALUES ('m999_future', CURRENT_TIMESTAMP)"))
    with pytest.raises(ObservatoryError, match="newer observatory.*m999_future"):
        open_engine(str(path))


def test_duplicate_migration_names_rejected() -> None:
    engine = create_engine("sqlite://")
    with pytest.raises(ObservatoryError, match="Duplicate migration names: m001_initial"):
        migrate(engine, [MIGRATIONS[0], MIGRATIONS[0]])


def test_oldest_schema_is_upgraded_in_place(tmp_path: Path) -> None:
    """A database written by the first release gains later columns and keeps its rows."""
    path = tmp_path / "old.db"
    old = create_engine(f"sqlite:///{path}")
    migrate(old, MIGRATIONS[:1])
    with old.begin() as conn:
        conn.execute(text(
            "INSERT INTO sessions (started_at, status, host, machine, observatory_version, command, options, suite)"
            " VALUES (CURRENT_TIMESTAMP, 'complete', 'h', '{}', '0.0.1', '[]', '{}', 'default')"
        ))
    old.dispose()
    engine = open_engine(str(path))
    assert applied(engine) == [m.__name__ for m in MIGRATIONS]
    assert "text_raw" in {c["name"] for c in inspect(engine).get_columns("results")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT host FROM sessions")).scalar() == "h"


def test_loser_of_a_migration_race_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runs opening a new SQLite database at once: the loser read the applied names before the winner
    recorded its migrations, so its DDL found the tables made (a no-op) and recording the name hit
    "UNIQUE constraint failed: _migrations.name" (seen once in tests/store/test_storage.py's two writers). The
    loser retries, reads the names again, and has nothing left to apply."""
    import observatory.store.migrations as mig

    url = f"sqlite:///{tmp_path / 'race.db'}"
    assert migrate(create_engine(url)) == [m.__name__ for m in MIGRATIONS]  # the winner
    reads: list[int] = []
    real = mig.applied

    def stale_first_read(engine):  # type: ignore[no-untyped-def]
        reads.append(1)
        return [] if len(reads) == 1 else real(engine)

    monkeypatch.setattr(mig, "applied", stale_first_read)
    assert migrate(create_engine(url)) == []
    assert len(reads) == 2
    assert sorted(real(create_engine(url))) == sorted(m.__name__ for m in MIGRATIONS)


def test_m010_gives_old_arms_their_role_and_engine(tmp_path: Path) -> None:
    """Issue 47 item 2: arms stored before role and engine were columns get them by the rule the runner applied:
    the launch's own where it names them, else one base per engine in run order, the engine told by the binary
    for launches older than their "engine" key. Control: a launch that names both keeps them."""
    path = tmp_path / "old.db"
    old = create_engine(f"sqlite:///{path}")
    migrate(old, MIGRATIONS[:9])
    vllm = ["python", "-m", "vllm.entrypoints.openai.api_server"]
    launches = [("base", {"argv": vllm}),
                ("mtp1", {"argv": vllm, "speculative_config": {"method": "mtp", "num_speculative_tokens": 1}}),
                ("base#2", {"argv": vllm, "copy_of": "base"}),
                ("llama.cpp:base", {"argv": ["/x/bin/llama-server", "--model", "m.gguf"]}),
                ("other", {"argv": vllm, "role": "variant", "engine": "sglang"})]
    with old.begin() as conn:
        conn.execute(text(
            "INSERT INTO sessions (id, started_at, status, host, machine, observatory_version, command, options, suite)"
            " VALUES (1, CURRENT_TIMESTAMP, 'complete', 'h', '{}', '0.0.1', '[]', '{}', 'default')"))
        for pos, (name, launch) in enumerate(launches):
            conn.execute(text("INSERT INTO arms (session_id, position, name, status, launch, counters, validity, figures)"
                              " VALUES (1, :pos, :name, 'ok', :launch, '{}', '[]', '{}')"),
                         {"pos": pos, "name": name, "launch": json.dumps(launch)})
    old.dispose()
    engine = open_engine(str(path))
    assert "m011_arm_role_engine" in applied(engine)
    with engine.connect() as conn:
        got = [tuple(r) for r in conn.execute(text("SELECT name, role, engine FROM arms ORDER BY position"))]
    assert got == [("base", "base", "vllm"), ("mtp1", "spec", "vllm"), ("base#2", "aa_copy", "vllm"),
                   ("llama.cpp:base", "base", "llama.cpp"), ("other", "variant", "sglang")]


def test_main_database_gains_request_counters(tmp_path: Path) -> None:
    """A database written through m011_arm_role_engine (the last migration before the volume channel) gains
    results.request_counters in place (m012, issue 48 item 3); its stored answers keep their rows and state no
    counters (NULL: the answer stated none). Control: a fresh database gets the column from the start."""
    assert [m.__name__ for m in MIGRATIONS[9:]] == ["m010_known_ledgers", "m011_arm_role_engine",
                                                   "m012_volume_result_request_counters"]
    path = tmp_path / "main.db"
    old = create_engine(f"sqlite:///{path}")
    migrate(old, MIGRATIONS[:11])
    assert "request_counters" not in {c["name"] for c in inspect(old).get_columns("results")}
    with old.begin() as conn:
        conn.execute(text(
            "INSERT INTO sessions (id, started_at, status, host, machine, observatory_version, command, options, suite)"
            " VALUES (1, CURRENT_TIMESTAMP, 'complete', 'h', '{}', '0.0.1', '[]', '{}', 'default')"))
        conn.execute(text("INSERT INTO probes (id, session_id, position, name, category, content_hash, definition, "
                          "params) VALUES (1, 1, 0, 'p', 'c', 'h', '{}', '{}')"))
        conn.execute(text("INSERT INTO arms (id, session_id, position, name, status, launch, counters, validity, "
                          "figures, role, engine) VALUES (1, 1, 0, 'base', 'ok', '{}', '{}', '[]', '{}', 'base', "
                          "'vllm')"))
        conn.execute(text("INSERT INTO results (arm_id, probe_id, mode, repeat, ok, text, token_ids, token_texts, "
                          "top_logprobs, usage, chunks, counters_delta, concurrency, created_at) VALUES (1, 1, "
                          "'correctness', 0, 1, 'hi', '[1]', '[\"hi\"]', '[]', '{}', '[]', '{}', 1, CURRENT_TIMESTAMP)"))
    old.dispose()
    engine = open_engine(str(path))
    assert applied(engine) == [m.__name__ for m in MIGRATIONS]
    with engine.connect() as conn:
        assert [tuple(r) for r in conn.execute(text("SELECT text, request_counters FROM results"))] == [("hi", None)]
        assert conn.execute(text("SELECT role FROM arms")).scalar() == "base"
    fresh = open_engine(str(tmp_path / "fresh.db"))
    assert "request_counters" in {c["name"] for c in inspect(fresh).get_columns("results")}
    assert migrate(fresh) == []
