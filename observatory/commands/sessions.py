"""`observatory sessions`, `observatory show` and `observatory judge`."""

from __future__ import annotations

from pathlib import Path

import click

from observatory.model.gates import registry_for
from observatory.report.data import build
from observatory.report.jsonout import to_json
from observatory.report.terminal import print_summary
from observatory.store.db import SessionRow
from observatory.store.session_store import Store

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
        click.echo(to_json(data))
    else:
        print_summary(data)


@click.command(name="judge")
@click.argument("session_id", type=int, required=False)
@db_option
@click.option("--gates-dir", "gates_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also run the gate files (*.py) of this folder; remembered for the session. Repeatable.")
def judge(session_id: int | None, db: str | None, gates_dirs: tuple[str, ...]) -> None:
    """Re-judge a stored session with the current gates and recompute its figures.

    \b
    observatory judge 12
    observatory judge 12 --gates-dir my_gates/
    """
    from observatory.commands.evaluate import evaluate  # here: it pulls in numpy, which reading commands never need

    store = Store(db, create=False, write=True)
    s = store.session(session_id)
    if gates_dirs:
        options = dict(s.options or {})
        plan = dict(options.get("plan") or {})
        known = list(plan.get("gates_dirs") or [])
        plan["gates_dirs"] = known + [d for d in (str(Path(x).resolve()) for x in gates_dirs) if d not in known]
        registry_for(plan["gates_dirs"])
        options["plan"] = plan
        store.update(SessionRow, s.id, options=options)
    n = evaluate(store, s.id)
    click.echo(f"session {s.id}: {n} verdicts; figures recomputed")
