"""`observatory report` (a static HTML report of one session, or two side by side) and `observatory history`."""

from __future__ import annotations

from pathlib import Path

import click

from observatory.commands.ci_options import metrics_out_option, summary_md_option, verbosity_options
from observatory.commands.sessions import db_option
from observatory.judge.summaries import DEFAULT_ACCEPTANCE_TOLERANCE
from observatory.model.errors import ObservatoryError
from observatory.model.vocabulary import EXIT
from observatory.report.ci_files import CiFiles
from observatory.report.data import build
from observatory.report.html import render_cross, render_session
from observatory.report.jsonout import to_json
from observatory.report.outputs import ReportDir
from observatory.report.trends import (
    find_alerts,
    history_json,
    load_points,
    print_history,
    render_history,
)
from observatory.store.session_store import Store


def _out_dir(out: str) -> Path:
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise ObservatoryError(f"--out {out} is a file; give a directory (it is created if missing).")
    return path


@click.command(name="report")
@click.argument("session_id", type=int, required=False)
@click.option("--out", default=None,
              help="Directory to write (index.html, results/): new, empty, or an earlier report (replaced whole); "
                   "created with its parents if missing.")
@db_option
@click.option("--vs", "vs_id", type=int, default=None,
              help="Place another session's arms side by side (flagged: sessions are not comparable).")
@click.option("--allow-cross-session", is_flag=True,
              help="With --vs: also compute speedups across the two sessions, each flagged CROSS-SESSION.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False), help="Also write the session's JUnit XML here.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Also write the session JSON here.")
@metrics_out_option
@summary_md_option
def report(session_id: int | None, out: str | None, db: str | None, vs_id: int | None, allow_cross_session: bool,
           junit_file: str | None, json_file: str | None, metrics_out: str | None, summary_md: str | None) -> None:
    """Write a static HTML report of a session (the latest when none is named), and re-export what CI reads.

    The directory opens offline (file:// or a CI artifact): no scripts, no
    external resources. Model output is escaped everywhere. An existing
    --out must be empty or hold an earlier observatory report, which is
    replaced whole; links are never followed. --junit, --json, --metrics-out
    and --summary-md write the same files `gate` writes, from the stored
    verdicts (run `observatory judge` first to re-judge); each file's
    directory must exist.

    \b
    observatory report --out report/
    observatory report 12 --out report/ --db nightly.db
    observatory report 12 --vs 9 --out cmp/
    observatory report 12 --vs 9 --allow-cross-session --out cmp/
    observatory report 12 --db nightly.db --junit junit.xml --metrics-out nightly.prom --summary-md summary.md
    """
    if allow_cross_session and vs_id is None:
        raise ObservatoryError("--allow-cross-session only applies with --vs OTHER_SESSION.")
    if out is None and not any((junit_file, json_file, metrics_out, summary_md)):
        raise ObservatoryError("Nothing to write: give --out DIR for the HTML report, or --junit, --json, "
                               "--metrics-out or --summary-md FILE.")
    if vs_id is not None and out is None:
        raise ObservatoryError("--vs writes a side-by-side HTML report: give --out DIR.")
    target = ReportDir(Path(out), "--out") if out is not None else None
    ci = CiFiles.checked(junit_file, metrics_out, json_file, summary_md)
    store = Store(db, create=False)
    data = build(store, session_id)
    index = None
    if target is not None and vs_id is None:
        index = target.write(lambda d: render_session(data, d))
    elif target is not None:
        if vs_id == data.session.id:
            raise ObservatoryError(f"--vs {vs_id} is the report's own session; name another session "
                                   "(`observatory sessions` lists them).")
        other = build(store, vs_id)
        index = target.write(lambda d: render_cross(data, other, d, allow_cross_session))
    ci.write_session(data, EXIT[data.verdict.verdict], str(index) if index else None)
    if index is not None:
        click.echo(f"wrote {index}")
    for label, path in ci.paths().items():
        click.echo(f"wrote {path} ({label})")


@click.command(name="history")
@verbosity_options
@db_option
@click.option("--model", default=None, help="Only sessions whose model contains this (case-insensitive).")
@click.option("--arm", default=None, help="Only this arm name (e.g. mtp2).")
@click.option("--limit", default=100, show_default=True, help="How many of the latest sessions to read.")
@click.option("--acceptance-tolerance", type=float, default=DEFAULT_ACCEPTANCE_TOLERANCE, show_default=True,
              help="Relative move of alpha or tau that raises an alert.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
@click.option("--out", default=None, help="Also write DIR/history.html with sparklines.")
def history(db: str | None, model: str | None, arm: str | None, limit: int, acceptance_tolerance: float,
            as_json: bool, out: str | None) -> None:
    """Acceptance, speedup and verdicts per session over time, with regression alerts.

    Each arm run is compared with the previous trusted run of the same model,
    arm and probe suite: alpha/tau beyond the acceptance tolerance, the
    speedup S beyond the A/A noise floor, probes that newly FAIL.

    \b
    observatory history
    observatory history --arm mtp2 --model Qwen3 --json
    observatory history --out site/
    """
    if acceptance_tolerance < 0:
        raise ObservatoryError("--acceptance-tolerance must be >= 0 (e.g. 0.05 for 5%).")
    points = load_points(Store(db, create=False), model, arm, limit)
    if not points:
        raise ObservatoryError("No matching sessions. Run `observatory sessions` to list them, "
                               "or loosen --model / --arm.")
    alerts = find_alerts(points, acceptance_tolerance)
    if out is not None:
        path = render_history(points, alerts, _out_dir(out), acceptance_tolerance)
        if not as_json:
            click.echo(f"wrote {path}")
    if as_json:
        click.echo(to_json(history_json(points, alerts)))
    else:
        print_history(points, alerts)
