"""The semantics channels on the real CPU engine (issue 15 items 5, 6, 8, 9, 12).

One gate session on a tiny suite (tests/fixtures/semantics.toml) with the
clean mtp2 arm and one mtp2 copy per fault: each fault is caught by its
channel (or the stream-integrity check), the suite alone (the quick
profile's verdicts of the same arm) misses it, and the clean arm stays
clean. History needs earlier nights: three placeholder sessions are made
before the run (so their ids come first) and filled after it with the clean
mtp2 arm's own summary under the faulted arm's name (what a clean night of
that arm looks like); the session is then re-judged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from observatory.cli import cli
from observatory.store.db import ArmRow, SessionRow, SummaryRow
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES

pytestmark = [pytest.mark.field_engine, requires_engine]

SUITE = FIXTURES / "semantics.toml"
# stream_drop is left out to keep the session short (it is caught by the suite's token_diff:nonstream too,
# and by token_diff:stream_text: tests/judge/test_stream_integrity.py)
FAULTS = ("past_stop", "inflate_accepted", "draft_noise")
NIGHTS = 3


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the session once, give history its nights, re-judge; return `show --json`."""
    d = tmp_path_factory.mktemp("semantics")
    db = str(d / "runs.db")
    store = Store(db)
    nights = [store.add(SessionRow(host="h", status="complete", observatory_version="0", command=[])).id
              for _ in range(NIGHTS)]
    arms = ",".join(["base", "mtp2", *(f"mtp2+fault={f}" for f in FAULTS)])
    r = CliRunner().invoke(cli, [
        "gate", "--arms", arms, "--suite", str(SUITE), "--channels", "finish,counters,history",
        "--concurrency", "1", "--fail-on", "history_drop>0.3", "--db", db, "--log-dir", str(d / "logs"),
        "--report", str(d / "report"), "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output  # faults are in: the gate fails
    sid = store.sessions(1)[0].id
    with store.tx() as tx:
        clean = tx.execute(select(SummaryRow).where(SummaryRow.session_id == sid, SummaryRow.arm == "mtp2")).scalar_one()
        template = {c.name: getattr(clean, c.name) for c in SummaryRow.__table__.c if c.name not in ("id", "arm_id",
                                                                                                   "session_id", "arm")}
    # the gate FAILs (faults are in); clean nights of the arm passed, and a FAIL night is kept out of history
    template["session_verdict"] = "PASS"
    model = store.session(sid).model
    for night in nights:
        store.update(SessionRow, night, model=model)
        a = store.add(ArmRow(session_id=night, position=0, name="mtp2+fault=draft_noise", status="ok", model=model,
                             engine_version=template["engine_version"]))
        store.add(SummaryRow(session_id=night, arm_id=a.id, arm="mtp2+fault=draft_noise", **template))
    rj = CliRunner().invoke(cli, ["judge", str(sid), "--db", db], catch_exceptions=False)
    assert rj.exit_code == 0, rj.output
    shown = CliRunner().invoke(cli, ["show", str(sid), "--db", db, "--json"], catch_exceptions=False)
    out: dict[str, Any] = json.loads(shown.output)
    return out


def _arm(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in data["arms"] if a["name"] == name)


def _suite_fails(arm: dict[str, Any]) -> list[str]:
    """The suite's own FAIL verdicts of an arm (what the quick profile would report)."""
    return [f"{r['probe']}:{g}" for r in arm["results"] for g, v in r["verdicts"].items()
            if v["verdict"] == "FAIL" and g != "token_diff:stream_text"]


def _channel(arm: dict[str, Any], gate: str) -> str:
    return str((arm["channel_verdicts"].get(gate) or {}).get("verdict"))


def test_the_clean_arm_stays_clean(data: dict[str, Any]) -> None:
    """Clean control: mtp2 without a fault has no FAIL or INVALID from the suite, the channels or the stream check."""
    arm = _arm(data, "mtp2")
    assert _suite_fails(arm) == []
    assert _channel(arm, "finish") == "PASS"
    assert _channel(arm, "counters:invariants") == "PASS"
    assert _channel(arm, "history") == "SKIP"  # no earlier nights of this arm: not measurable
    assert all(v["verdict"] not in ("FAIL", "INVALID", "UNJUDGED") for v in arm["channel_verdicts"].values())
    assert all(r["verdicts"].get("token_diff:stream_text", {}).get("verdict") in ("PASS", "SKIP")
               for r in arm["results"])


def test_output_past_a_stop_is_caught_by_finish_only(data: dict[str, Any]) -> None:
    """Issue 15 items 5, 12: past_stop FAILs channel finish; the suite alone passes it."""
    arm = _arm(data, "mtp2+fault=past_stop")
    assert _channel(arm, "finish") == "FAIL", arm["channel_verdicts"].get("finish")
    assert _suite_fails(arm) == []


def test_inflated_counters_are_caught_by_counters_only(data: dict[str, Any]) -> None:
    """Issue 15 items 8, 12: inflate_accepted FAILs counters:invariants; the suite alone passes it."""
    arm = _arm(data, "mtp2+fault=inflate_accepted")
    assert _channel(arm, "counters:invariants") == "FAIL", arm["channel_verdicts"].get("counters:invariants")
    assert _suite_fails(arm) == []


def test_noise_drafts_are_caught_by_history_only(data: dict[str, Any]) -> None:
    """Issue 15 items 9, 12: draft_noise collapses acceptance, output intact: history FAILs (history_drop>0.3)."""
    arm = _arm(data, "mtp2+fault=draft_noise")
    assert _channel(arm, "history") == "FAIL", arm["channel_verdicts"].get("history")
    assert _suite_fails(arm) == []
