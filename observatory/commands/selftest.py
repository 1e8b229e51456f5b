"""`observatory selftest`: prove the gates fire on the real engine (negative controls).

The command parses its options, asks `observatory.session.fault_selftest.plan_selftest` for the session (base,
its A/A copy, the clean spec arm and one arm per injected fault), runs it as `compare` does, and renders what
`selftest_findings` and `fault_rows` found caught each fault; what the selftest is, and why, is that module's.
Exits 0 only if every fault is caught and both controls are clean.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from observatory.commands import INTERRUPTED_EXIT
from observatory.commands.compare import compare_options, run_compare
from observatory.report.console import make_console
from observatory.report.data import build
from observatory.session.fault_selftest import (
    DEFAULT_ARM,
    ISSUE_ITEMS,
    control_lines,
    fault_rows,
    passed,
    plan_selftest,
    selftest_findings,
)


@click.command(name="selftest")
@compare_options(exclude=("arms", "arms_file", "speculative_config"))
@click.option("--spec-arm", default=DEFAULT_ARM, show_default=True,
              help="The speculating preset each fault is injected into (mtpK).")
@click.option("--faults", "fault_names", help="Comma list of faults to inject (default: all of the profile's).")
@click.option("--repair", "repair", default="auto", show_default=True,
              help="Engine bugs repaired in the clean and fault arms (observatory/faults/repairs.py), the shipped "
                   "arm run beside them: auto (on a host without GPUs, the CPU build's repairs of bugs in the "
                   "channels run), none, or a comma list.")
@click.option("--list", "list_only", is_flag=True,
              help="Print the plan (each fault, its issue item, what must catch it, the arms) and launch nothing.")
def selftest(spec_arm: str, fault_names: str | None, repair: str, list_only: bool, **kw: Any) -> int:
    """Inject each known fault into a real engine and show which gates and channels catch it.

    \b
    observatory selftest
    observatory selftest --spec-arm mtp2 --db selftest.db
    observatory selftest --profile nightly --spec-arm mtp2
    observatory selftest --profile nightly --list
    """
    plan = plan_selftest(spec_arm, fault_names, repair, kw.get("profile"), kw.get("channels"), kw.get("suite"),
                         kw.get("model"))
    kw.update(arms=",".join(plan.arms), arms_file=None, speculative_config=plan.speculative_config, suite=plan.suite)
    if list_only:
        table = Table(title="selftest plan")
        for col in ("fault", "issue item", "must be caught by", "arm"):
            table.add_column(col)
        for fault, arm in plan.fault_arms():
            table.add_row(fault, ISSUE_ITEMS.get(fault, "-"), str(plan.expected[fault]), Text(arm))
        make_console().print(table)
        click.echo(f"controls: {', '.join(plan.controls)} (repairs: {', '.join(plan.repairs) or 'none'})")
        return 0
    store, session_id, interrupted = run_compare(kw)
    if interrupted:
        return INTERRUPTED_EXIT
    findings = selftest_findings(build(store, session_id))
    rows = fault_rows(plan.expected, findings)
    console = make_console()
    table = Table(title=f"selftest (session {session_id})")
    # the fault's name is never wrapped or cut (a reader, and the engine test, look each one up); the
    # other columns fold in a narrow terminal rather than lose text to an ellipsis
    table.add_column("fault", no_wrap=True, min_width=max(len(f) for f in plan.faults))
    for col in ("issue item", "must be caught by", "arm", "drafts", "caught by", ""):
        table.add_column(col, overflow="fold")
    for r in rows:
        style = "green" if r["caught"] else "bold red"
        table.add_row(r["fault"], r["item"], r["must"], Text(r["arm"]), "-" if r["drafts"] is None else str(r["drafts"]),
                      Text(r["caught_by"]), Text(r["outcome"], style=style))
    console.print(table)
    for line, clean in control_lines(findings):
        console.print(Text(line, style="green" if clean else "bold red"))
    shipped = findings["shipped"]
    if shipped is not None:  # the unrepaired result, kept beside the repaired control (issue 27 item 4)
        console.print(Text(f"shipped spec arm {shipped['arm']} (unrepaired): {len(shipped['engine_bugs'])} FAIL(s) "
                           f"from known engine bugs, {len(shipped['unexplained'])} unexplained",
                           style="green" if shipped["clean"] else "bold red"))
        for b in shipped["engine_bugs"]:
            console.print(Text(f"  engine bug {b['bug']} ({b['engine']}; reproduction: {b['reproduction']}): "
                               f"{b['reason']}"))
        for text in shipped["unexplained"]:
            console.print(Text(f"  UNEXPLAINED: {text}", style="bold red"))
    return 0 if passed(rows, findings) else 1
