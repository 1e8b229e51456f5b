"""`observatory sessions`, `observatory show` and `observatory judge`."""

from __future__ import annotations

import json
from typing import Any

import click

from observatory.commands.ci_options import verbosity_options
from observatory.commands.known_cmd import ledger_for, with_known_options
from observatory.judge.apply_gates import remember_gates_dirs
from observatory.judge.reasons import verdict_lines
from observatory.model.vocabulary import KNOWN, NOTE
from observatory.report.console import printable
from observatory.report.data import build
from observatory.report.jsonout import to_json
from observatory.report.terminal import print_summary
from observatory.store.db import SessionRow
from observatory.store.session_store import Store

db_option = click.option(
    "--db", envvar="OBSERVATORY_DB", default=None,
    help="SQLite file or SQLAlchemy URL (default: runs.db, or $OBSERVATORY_DB).",
)


def _verdict(store: Store, s: SessionRow) -> str:
    """The session verdict: the stored summaries' when judged at the session's current status, else decided now."""
    row = store.stored_verdict(s.id)
    if row is not None and row[0] and row[1] == s.status:
        return str(row[0])
    return build(store, s.id).verdict.verdict


@click.command(name="sessions")
@verbosity_options
@db_option
@click.option("--limit", default=50, show_default=True, help="How many sessions to list.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON list instead of the table.")
def sessions(db: str | None, limit: int, as_json: bool) -> None:
    """List sessions, newest first: id, start (UTC), status, verdict, model, arms, host (tab-separated).

    \b
    observatory sessions
    observatory sessions --db nightly.db --limit 10
    observatory sessions --json | jq '.[] | select(.verdict == "FAIL") | .id'
    """
    store = Store(db, create=False)
    rows: list[dict[str, Any]] = []
    for s in store.sessions(limit):
        rows.append({"id": s.id, "started_at": f"{s.started_at:%Y-%m-%dT%H:%M:%S}Z" if s.started_at else None,
                     "status": s.status, "verdict": _verdict(store, s), "model": s.model,
                     "arms": [a.name for a in store.arms(s.id)], "host": s.host})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    click.echo("\t".join(("id", "started (UTC)", "status", "verdict", "model", "arms", "host")))
    for r in rows:
        click.echo("\t".join(_one_line(x) for x in (r["id"], r["started_at"], r["status"], r["verdict"], r["model"],
                                                   ",".join(r["arms"]), r["host"])))


def _one_line(v: object) -> str:
    """A table cell: tabs, line breaks and control characters (terminal escapes) in a stored name become one
    space or '?': they would break the columns or drive the terminal."""
    return "-" if v is None else "".join(c if c.isprintable() else "?" for c in " ".join(str(v).split()))


@click.command(name="show")
@verbosity_options
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
@verbosity_options
@click.argument("session_id", type=int, required=False)
@db_option
@click.option("--gates-dir", "gates_dirs", multiple=True, type=click.Path(file_okay=False),
              help="Also run the gate files (*.py) of this folder; remembered for the session. Repeatable.")
@with_known_options
def judge(session_id: int | None, db: str | None, gates_dirs: tuple[str, ...], known_files: tuple[str, ...],
          no_builtin_known: bool) -> None:
    """Re-judge a stored session with the current gates and recompute its figures.

    The known-findings ledger stored with the session is applied again; --known or --no-builtin-known replace
    it (a session stored without one gets the ledger a new session would: ./observatory-known.toml if present
    and the built-ins), and the new one is stored.

    \b
    observatory judge 12
    observatory judge 12 --gates-dir my_gates/
    observatory judge 12 --known observatory-known.toml
    """
    from observatory.commands.evaluate import evaluate  # here: it pulls in numpy, which reading commands never need

    given = {"known_files": known_files, "no_builtin_known": no_builtin_known}
    ledger = ledger_for(given) if known_files or no_builtin_known else None  # a bad ledger: exit 3, first
    store = Store(db, create=False, write=True)
    s = store.session(session_id)
    stored = store.known(s.id)
    ledger = ledger or ledger_for(given, stored, s.id)
    if gates_dirs:
        remember_gates_dirs(store, s.id, gates_dirs)
    before = build(store, s.id).verdict
    if stored != ledger.to_stored():
        store.set_known(s.id, ledger.to_stored())
    n = evaluate(store, s.id)
    after = build(store, s.id).verdict
    click.echo(f"session {s.id}: {n} verdicts; figures recomputed")
    click.echo(f"verdict: {before.verdict} -> {after.verdict}" if before.verdict != after.verdict
               else f"verdict: {after.verdict} (unchanged)")
    old, new = before.texts(), after.texts()
    for text in [t for t in new if t not in old]:
        click.echo(f"  + {printable(' '.join(text.split())[:300])}")
    for text in [t for t in old if t not in new]:
        click.echo(f"  - {printable(' '.join(text.split())[:300])}")
    for line in verdict_lines(after, (KNOWN, NOTE)):
        click.echo(f"  {printable(' '.join(line.split())[:300])}")
