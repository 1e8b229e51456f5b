"""`observatory gate`: the nightly gate (compare, report, exit code for CI)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from observatory.commands.ci_options import exit_code_of, metrics_out_option, summary_md_option
from observatory.commands.compare import compare_options, run_compare
from observatory.judge.reasons import known_summary, verdict_lines
from observatory.model.vocabulary import EXIT, SETUP_ERROR
from observatory.report.ci_files import CiFiles
from observatory.report.console import printable
from observatory.report.data import build
from observatory.report.html import render_session
from observatory.report.outputs import ReportDir
from observatory.report.terminal import print_closing, print_summary
from observatory.session.plan import embedded_model


@click.command(name="gate")
@compare_options
@click.option("--report", "report_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the HTML report.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False),
              help="Write JUnit XML here (on every exit: a setup error is one failing `setup` case).")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write the session JSON here.")
@metrics_out_option
@summary_md_option
def gate(report_dir: str, junit_file: str | None, json_file: str | None, metrics_out: str | None,
         summary_md: str | None, **kw: Any) -> int:
    """Run a compare, write the report, and exit 0 PASS/WARN, 1 FAIL, 2 INVALID, 3 setup error, 4 internal
    error, 5 storage failure. JUnit, metrics and the summary are written on every exit.

    \b
    observatory gate --arms base,base,mtp1,mtp2 --report report/ --junit junit.xml
    observatory gate --image vllm/vllm-openai:nightly --model /models/m --arms base,mtp2 --report out/
    observatory gate --arms base,base,mtp2 --fail-on 'speedup<1.0,ttft_ratio>3' --report out/
    observatory gate --arms base,base,mtp2 --report out/ --metrics-out nightly.prom --summary-md "$GITHUB_STEP_SUMMARY"
    """
    # Issue 19 item 3: every output is checked before any arm launches (exit 3), not after the session.
    outputs: dict[str, Any] = {}
    model = kw.get("model") or str(embedded_model(kw.get("profile")).path)

    def check_outputs() -> None:
        outputs["report"] = ReportDir(Path(report_dir), "--report")
        outputs["ci"] = CiFiles.checked(junit_file, metrics_out, json_file, summary_md)

    try:
        store, session_id, _ = run_compare(kw, before_run=check_outputs)
        with store:  # closed here, not at interpreter exit: SQLite folds its -wal file back into the database
            data = build(store, session_id)
    except BaseException as e:
        code = exit_code_of(e)
        if code != 0:  # issue 50 item 3: CI reads its files on every exit
            words = str(e) if code == SETUP_ERROR else f"{type(e).__name__}: {e}"
            CiFiles.best_effort(junit_file, metrics_out, None, summary_md).write_failure(code, words, model)
        raise
    report: ReportDir = outputs["report"]
    ci: CiFiles = outputs["ci"]
    # One verdict in every output: `decide`'s, which the report, JUnit, the JSON and the metrics render (an
    # interrupted session is stored so: INVALID "session interrupted", unless something FAILed).
    verdict = data.verdict.verdict
    index = report.write(lambda d: render_session(data, d))
    ci.write_session(data, EXIT[verdict], str(index))
    print_summary(data)
    click.echo(f"gate: {verdict}", err=True)
    lines = verdict_lines(data.verdict)
    for line in lines[:20]:
        click.echo(f"  - {printable(line)}", err=True)
    if len(lines) > 20:
        click.echo(f"  ... and {len(lines) - 20} more (see the report)", err=True)
    known = known_summary(data.verdict)
    if known:
        click.echo(f"  {printable(known)} (see the report)", err=True)
    click.echo(f"report: {index}", err=True)
    print_closing(data, {"report": str(index), **ci.paths()})
    return EXIT[verdict]
