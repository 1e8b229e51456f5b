"""`observatory gate`: the nightly gate (compare, report, exit code for CI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from observatory.commands.compare import compare_options, metrics_out_option, run_compare
from observatory.judge.reasons import known_summary, verdict_lines
from observatory.judge.verdict import EXIT
from observatory.report.data import build
from observatory.report.html import render_session
from observatory.report.jsonout import to_json
from observatory.report.junit import junit_xml
from observatory.report.openmetrics import openmetrics_text
from observatory.report.outputs import OutputFile, ReportDir
from observatory.report.terminal import print_closing, print_summary


@click.command(name="gate")
@compare_options
@click.option("--report", "report_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the HTML report.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write the session JSON here.")
@metrics_out_option
def gate(report_dir: str, junit_file: str | None, json_file: str | None, metrics_out: str | None, **kw: Any) -> int:
    """Run a compare, write the report, and exit 0 PASS/WARN, 1 FAIL, 2 INVALID, 3 setup error, 4 internal
    error, 5 storage failure.

    \b
    observatory gate --arms base,base,mtp1,mtp2 --report report/ --junit junit.xml
    observatory gate --image vllm/vllm-openai:nightly --model /models/m --arms base,mtp2 --report out/
    observatory gate --arms base,base,mtp2 --fail-on 'speedup<1.0,ttft_ratio>3' --report out/
    """
    # Issue 19 item 3: every output is checked before any arm launches (exit 3), not after the session.
    outputs: dict[str, Any] = {}

    def check_outputs() -> None:
        outputs["report"] = ReportDir(Path(report_dir), "--report")
        outputs["junit"] = OutputFile(Path(junit_file), "--junit") if junit_file else None
        outputs["json"] = OutputFile(Path(json_file), "--json") if json_file else None
        outputs["metrics"] = OutputFile(Path(metrics_out), "--metrics-out") if metrics_out else None

    store, session_id, _ = run_compare(kw, before_run=check_outputs)
    report, junit, json_out = outputs["report"], outputs["junit"], outputs["json"]
    with store:  # closed here, not at interpreter exit: SQLite folds its -wal file back into the database
        data = build(store, session_id)
    index = report.write(lambda d: render_session(data, d))
    if junit is not None:
        junit.write_text(junit_xml(data))
    if json_out is not None:
        json_out.write_text(to_json(data))
    if outputs["metrics"] is not None:
        outputs["metrics"].write_text(openmetrics_text(data))
    print_summary(data)
    # One verdict in every output: `decide`'s, which the report, JUnit, the JSON and the metrics above rendered
    # (an interrupted session is stored so: INVALID "session interrupted", unless something FAILed).
    verdict = data.verdict.verdict
    click.echo(f"gate: {verdict}", err=True)
    lines = verdict_lines(data.verdict)
    for line in lines[:20]:
        click.echo(f"  - {line}", err=True)
    if len(lines) > 20:
        click.echo(f"  ... and {len(lines) - 20} more (see the report)", err=True)
    known = known_summary(data.verdict)
    if known:
        click.echo(f"  {known} (see the report)", err=True)
    click.echo(f"report: {index}", err=True)
    paths = {"report": str(index)}
    paths.update({k: str(o.path) for k, o in (("junit", junit), ("json", json_out), ("metrics", outputs["metrics"]))
                  if o is not None})
    print_closing(data, paths)
    return EXIT[verdict]
