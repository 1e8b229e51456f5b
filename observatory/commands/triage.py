"""`observatory triage`: which engine knob a stored session's failure depends on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from observatory.commands import INTERRUPTED_EXIT
from observatory.session.runner import Interrupted
from observatory.store.session_store import Store
from observatory.triage import bundle
from observatory.triage.experiment import Progress, run_triage
from observatory.triage.search import DEFAULT_MAX_RUNS
from observatory.triage.source import find_target


class _Echo(Progress):
    """Progress lines on stderr (stdout stays clean for --json)."""

    def line(self, text: str) -> None:
        """Print one line."""
        click.echo(text, err=True)


@click.command(name="triage")
@click.argument("session_id", type=int, required=False)
@click.option("--arm", help="The failing arm (default: the arm with the most failures against base).")
@click.option("--probe", "probes", multiple=True, help="Only this failing probe (repeatable).")
@click.option("--knob", "knobs", multiple=True, help="Only this knob (repeatable; default: every knob declared).")
@click.option("--max-runs", type=int, default=DEFAULT_MAX_RUNS, show_default=True,
              help="Most engine launches (the reproduction included); ~20 min on the CPU engine for one probe.")
@click.option("--resume", is_flag=True, help="Continue the arm's last unfinished triage, reusing its runs.")
@click.option("--bundle", "bundle_dir", type=click.Path(file_okay=False), help="Write a reproduction bundle here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--db", envvar="OBSERVATORY_DB", help="SQLite file or SQLAlchemy URL (default runs.db).")
@click.option("--log-dir", default="logs", show_default=True, help="Where engine logs go.")
@click.option("--request-timeout", type=float, default=300.0, show_default=True, help="Seconds per request.")
def triage(session_id: int | None, arm: str | None, probes: tuple[str, ...], knobs: tuple[str, ...], max_runs: int,
           resume: bool, bundle_dir: str | None, as_json: bool, db: str | None, log_dir: str,
           request_timeout: float) -> None:
    """Relaunch a failing arm under one engine knob change at a time: which knob makes it disappear?

    Reproduces the failure, tries each knob alone, then narrows to a minimal
    set of changes; every run is stored with the session.

    \b
    observatory triage 12 --arm mtp2
    observatory triage 12 --probe primes --knob num_speculative_tokens --knob prefix_caching
    observatory triage 12 --bundle repro/ --json
    observatory triage 12 --resume
    """
    store = Store(db, create=False)
    target = find_target(store, session_id, arm, list(probes) or None)
    try:
        result = run_triage(store, target, Path(log_dir), max_runs, list(knobs) or None, resume, _Echo(),
                            request_timeout)
    except (Interrupted, KeyboardInterrupt):
        click.echo(f"Interrupted: engine stopped; triage of session {target.session.id} stored as interrupted. "
                   f"Continue with `observatory triage {target.session.id} --arm {target.arm_row.name} --resume`.",
                   err=True)
        sys.exit(INTERRUPTED_EXIT)
    if bundle_dir:
        bundle.write_bundle(target, result, bundle_dir)
        click.echo(f"bundle: {bundle_dir}", err=True)
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, default=str))
        return
    click.echo(f"triage {result['triage']}: session {result['session']}, arm {result['arm']}: {result['summary']}")
    for r in result["runs"]:
        change = ", ".join(f"{k}={v}" for k, v in r["change"].items()) or "as the session ran it"
        at = "" if r["first_divergence"] is None else f" (first divergence at token {r['first_divergence']})"
        click.echo(f"  {change}: {r['verdict']}{at}")
    click.echo(f"flips: {', '.join(result['flips']) or 'none'}; minimal: {result['minimal']}")
    for n in result["not_tried"]:
        what = n.get("knob") or (", ".join(f"{k}={v}" for k, v in (n.get("change") or {}).items()) or "the rest")
        click.echo(f"  not tried: {what}: {n['why']}")
