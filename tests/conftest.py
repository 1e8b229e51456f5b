"""Fixtures every floor shares: no test touches ./runs.db; a fresh store; one PostgreSQL server per module.

The suite is in folders by the floor of the package each test checks (model/, store/, client/, engines/, ...),
with real_engine/ for every test that launches a real engine; each folder's conftest.py says what its tests
check. What the folders share that is no fixture (stub servers, synthetic sessions, paths) is tests/support/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from observatory.store.session_store import Store
from tests.support.postgres import pg_bin, postgres_server

REAL_ENGINE = Path(__file__).resolve().parent / "real_engine"


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own database (issue 2: runs.db is never touched by tests)."""
    db = tmp_path / "test.db"
    monkeypatch.setenv("OBSERVATORY_DB", str(db))
    monkeypatch.delenv("OBSERVATORY_API_KEY", raising=False)
    return db


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A fresh database."""
    return Store(str(tmp_path / "runs.db"))


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL server's URL (tests/support/postgres.py), skipped where PostgreSQL is not installed."""
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (bash scripts/setup.sh --test installs it)")
    with postgres_server() as url:
        yield url


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `engine` (it launches a real engine) belongs in real_engine/, where every test is marked."""
    if item.get_closest_marker("engine") and REAL_ENGINE not in item.path.resolve().parents:
        pytest.fail(f"{item.nodeid} launches a real engine: it belongs in {REAL_ENGINE}", pytrace=False)
