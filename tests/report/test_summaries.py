"""History reads per-arm summaries stored when a session is judged (issue "A fast instrument" item 3)."""

from __future__ import annotations

from sqlalchemy import delete, func, select

from observatory.commands.evaluate import evaluate
from observatory.judge.verdict import session_verdict
from observatory.report.data import build
from observatory.report.summarize import ensure_summaries
from observatory.report.trends import load_points, session_points
from observatory.store.db import SummaryRow
from observatory.store.session_store import Store
from tests.support.judged_sessions import make_session


def _summaries(store: Store) -> int:
    with store.tx() as tx:
        return int(tx.execute(select(func.count()).select_from(SummaryRow)).scalar_one())


def test_judging_a_session_stores_what_history_shows(store: Store) -> None:
    """load_points used to build every session whole (96 s over 1,000 sessions); now evaluate stores
    one summary per arm and history reads those: the same points as from the whole session."""
    sid = make_session(store)
    data = build(store, sid)
    assert _summaries(store) == len(data.arms)
    stored = load_points(store)
    assert [(p.arm, p.alpha, p.tau, p.S, p.S_ci, p.verdicts, p.failing, p.trusted) for p in stored] == \
        [(p.arm, p.alpha, p.tau, p.S, p.S_ci, p.verdicts, p.failing, p.trusted) for p in session_points(data)]
    assert {p.session_verdict for p in stored} == {session_verdict(data)[0]}
    assert stored[0].engine_version == "0.32.0" and stored[0].ttft_ms is not None


def test_an_old_database_gets_its_summaries_built_once(store: Store) -> None:
    """Databases from before summaries: history builds the missing ones lazily, once."""
    make_session(store)
    make_session(store, accept=0.5)
    expected = [(p.session, p.arm, p.alpha) for p in load_points(store)]
    with store.tx() as tx:
        tx.execute(delete(SummaryRow))
    assert [(p.session, p.arm, p.alpha) for p in load_points(store)] == expected
    assert _summaries(store) == 8 and ensure_summaries(store) == []


def test_a_session_that_did_not_complete_is_summarised_again(store: Store) -> None:
    """A session is judged while it runs; the stored verdict assumes it completes. If it was
    interrupted instead, the next history read summarises it again with the real status."""
    sid = make_session(store, divergences={})
    assert {p.session_verdict for p in load_points(store)} <= {"PASS", "WARN"}
    store.finish_session(sid, "running")
    evaluate(store, sid)
    assert {p.session_verdict for p in load_points(store)} == {None}  # still running: no verdict yet
    store.finish_session(sid, "interrupted", "SIGTERM")
    assert ensure_summaries(store) == [sid]
    assert {p.session_verdict for p in load_points(store)} == {"INVALID"}


def test_filters_and_limit_are_applied_in_sql(store: Store) -> None:
    make_session(store, model="/models/Qwen3_27B")
    make_session(store, model="/models/other")
    make_session(store, model="/models/QwenX27B")
    assert {p.session for p in load_points(store, model="qwen3_")} == {1}  # "_" is not a wildcard
    assert {p.session for p in load_points(store, model="qwen", limit=1)} == {3}  # latest 1 of that model
    assert {p.arm for p in load_points(store, arm="mtp1")} == {"mtp1"}
    assert load_points(store, model="nothing") == []


def test_the_terminal_table_shows_the_latest_points_and_says_where_the_rest_are(store: Store) -> None:
    """4,000 points took rich 12 s to lay out; the table keeps the latest TABLE_ROWS, alerts stay whole."""
    import io

    from rich.console import Console

    from observatory.report import trends as history

    make_session(store)
    points = load_points(store) * 60  # 240 points
    out = io.StringIO()
    history.print_history(points, [], Console(file=out, width=300))
    text = out.getvalue()
    assert f"the latest {history.TABLE_ROWS} of {len(points)} points" in text and "--json" in text
