"""`observatory gate`: the nightly gate (compare, report, exit code for CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from observatory.commands.compare import compare_options, run_compare
from observatory.junit import write_junit
from observatory.report import render_session
from observatory.report_data import build
from observatory.terminal import print_summary
from observatory.verdict import EXIT, session_verdict


@click.command(name="gate")
@compare_options
@click.option("--report", "report_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the HTML report.")
@click.option("--junit", "junit_file", type=click.Path(dir_okay=False), help="Write JUnit XML here.")
@click.option("--json", "json_file", type=click.Path(dir_okay=False), help="Write the session JSON here.")
def gate(report_dir: str, junit_file: str | None, json_file: str | None, **kw: Any) -> int:
    """Run a compare, write the report, and exit 0 PASS/WARN, 1 FAIL, 2 INVALID, 3 setup error.

    \b
    observatory gate --arms base,base,mtp1,mtp2 --report report/ --junit junit.xml
    observatory gate --image vllm/vllm-openai:nightly --model /models/m --arms base,mtp2 --report out/
    observatory gate --arms base,base,mtp2 --fail-on 'speedup<1.0,ttft_ratio>3' --report out/
    """
    store, session_id, interrupted = run_compare(kw)
    data = build(store, session_id)
    render_session(data, Path(report_dir))
    if junit_file:
        write_junit(data, junit_file)
    if json_file:
        Path(json_file).write_text(json.dumps(data, ensure_ascii=False, default=str), encoding="utf-8")
    print_summary(data)
    verdict, reasons = session_verdict(data)
    if interrupted:
        verdict, reasons = "INVALID", ["the session was interrupted", *reasons]
    click.echo(f"gate: {verdict}", err=True)
    for r in reasons[:20]:
        click.echo(f"  - {r}", err=True)
    click.echo(f"report: {Path(report_dir) / 'index.html'}", err=True)
    return EXIT[verdict]
