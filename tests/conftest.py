"""Fixtures every floor shares: no test touches ./runs.db.

The suite is in folders by the floor of the package each test checks (model/, store/, client/, engines/, ...),
with real_engine/ for the tests that launch a real engine; what those folders share that is no fixture (stub
servers, synthetic sessions, paths) is the package tests/support/.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own database (issue 2: runs.db is never touched by tests)."""
    db = tmp_path / "test.db"
    monkeypatch.setenv("OBSERVATORY_DB", str(db))
    monkeypatch.delenv("OBSERVATORY_API_KEY", raising=False)
    return db
