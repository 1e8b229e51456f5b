"""`observatory sessions`, `observatory show` and `observatory judge`."""

from __future__ import annotations

import json

import click

from observatory.report_data import build
from observatory.store import Store
from observatory.terminal import print_summary

db_option = click.option(
    "--db", envvar="OBSERVATORY_DB", default=None,
    help="SQLite file or SQLAlchemy URL (default: runs.db, or $OBSERVATORY_DB).",
)


@click.command(name="sessions")
@db_option
@click.option("--limit", default=50, show_default=True, help="How many sessions to list.")
def sessions(db: str | None, limit: int) -> None:
    """List sessions, newest first.

    \b
    observatory sessions
    observatory sessions --db nightly.db --limit 10
    """
    store = Store(db, create=False)
    for s in store.sessions(limit):
        arms = store.arms(s.id)
        names = ",".join(a.name for a in arms)
        click.echo(f"{s.id}\t{s.started_at:%Y-%m-%d %H:%M:%S}\t{s.status}\t{s.host}\t{s.model}\t{names}")


@click.command(name="show")
@click.argument("session_id", type=int, required=False)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def show(session_id: int | None, db: str | None, as_json: bool) -> None:
    """Show one session (the latest when none is named).

    \b
    observatory show
    observatory show 12 --json | jq '.arms[].counters'
    """
    data = build(Store(db, create=False), session_id)
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=False, default=str))
    else:
        print_summary(data)


@click.command(name="judge")
@click.argument("session_id", type=int, required=False)
@db_option
def judge(session_id: int | None, db: str | None) -> None:
    """Re-judge a stored session with the current gates and recompute its figures.

    \b
    observatory judge 12
    """
    from observatory.evaluate import evaluate  # here: it pulls in numpy, which reading commands never need

    store = Store(db, create=False)
    s = store.session(session_id)
    n = evaluate(store, s.id)
    click.echo(f"session {s.id}: {n} verdicts; figures recomputed")
