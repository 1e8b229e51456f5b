"""Named append-only migrations (issue 2): blank database, newer database refused, schema = models."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from observatory.db import Base, open_engine
from observatory.errors import ObservatoryError
from observatory.migrations import MIGRATIONS, applied, migrate


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
