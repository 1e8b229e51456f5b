"""Shared fixtures: no test touches ./runs.db; engine tests share one real session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own database (issue 2: runs.db is never touched by tests)."""
    db = tmp_path / "test.db"
    monkeypatch.setenv("OBSERVATORY_DB", str(db))
    monkeypatch.delenv("OBSERVATORY_API_KEY", raising=False)
    return db


def engine_available() -> bool:
    """Whether vLLM can be launched here."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


requires_engine = pytest.mark.skipif(
    not engine_available() and not os.environ.get("CI"),
    reason="vLLM is not installed (CI installs it; see README)",
)


def example_db(rel: str, dest: Path) -> Path:
    """The committed example database REL (under examples/, stored gzipped to keep the tree small
    enough to travel to the GPU device with its bundle), unpacked to DEST."""
    import gzip

    dest.write_bytes(gzip.decompress((REPO / "examples" / f"{rel}.gz").read_bytes()))
    return dest


def passed_but_for_speed(exit_code: int, db: str | Path) -> bool:
    """Whether the last session of DB passed, or failed on the `speedup` check alone.

    The speed verdict is the host's: on a shared 2-core host S of the same code
    moves 0.68-1.08 between sessions (benchmarks/README.md, "Speed on a shared
    host"), so a functional test of an engine session never asserts it. Every
    other FAIL or INVALID still fails the test.
    """
    import json

    from click.testing import CliRunner

    from observatory.cli import cli

    if exit_code == 0:
        return True
    if exit_code != 1:
        return False
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    reasons = json.loads(shown.output)["verdict"]["reasons"]
    fails = [r for r in reasons if r["level"] in ("FAIL", "INVALID")]
    return bool(fails) and all(r["gate"] == "speedup" for r in fails)


def verdict_exit(db: str | Path, session: int | None = None) -> int:
    """The exit code the verdict of DB's SESSION (default: its latest) stands for: what `compare` and `gate` exit
    with once a session ran to its end (issue 46 item 4). A stub server that speculates nothing makes a spec arm
    INVALID (2), so a test of something else asserts this, not 0."""
    from observatory.report.data import build
    from observatory.store.session_store import Store

    with Store(str(db)) as store:
        return build(store, store.session(session).id).verdict.exit_code
