"""What the commands share about the files CI reads: their options, and the exit status an exception ends with
(as observatory.cli maps it), which those files record on every exit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from observatory.commands import INTERRUPTED_EXIT
from observatory.model.errors import ObservatoryError
from observatory.model.vocabulary import INTERNAL_ERROR, SETUP_ERROR, STORAGE_ERROR
from observatory.report.console import QUIET, VERBOSE, set_verbosity
from observatory.store import storage_failure


def exit_code_of(e: BaseException) -> int:
    """The status the command line ends with for E (observatory.cli): 3 setup, 5 storage, 130 interrupted, 4 else."""
    if isinstance(e, (ObservatoryError, click.UsageError)):
        return SETUP_ERROR
    if isinstance(e, (KeyboardInterrupt, click.exceptions.Abort)):
        return INTERRUPTED_EXIT
    if isinstance(e, click.exceptions.Exit):
        return int(e.exit_code)
    if isinstance(e, SystemExit):
        return e.code if isinstance(e.code, int) else 1
    if storage_failure.failed_in(e) is not None or storage_failure.problem(e) is not None:
        return STORAGE_ERROR
    return INTERNAL_ERROR


metrics_out_option = click.option(
    "--metrics-out", type=click.Path(dir_okay=False),
    help="Write alpha, tau, S (with its interval), tok/s, latency percentiles, verdicts and the exit code as "
         "OpenMetrics text here (name it *.prom for a Prometheus textfile collector; written on every exit).")
summary_md_option = click.option(
    "--summary-md", type=click.Path(dir_okay=False),
    help="Write the verdict, its reasons and each arm's figures as markdown here, e.g. \"$GITHUB_STEP_SUMMARY\" "
         "(written on every exit).")


def _set_level(level: int) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if value:
            set_verbosity(level)
    return callback


def verbosity_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``-q``/``--quiet`` (the verdict and the closing block, no tables) and ``-v``/``--verbose`` (every reason,
    every note) on a command that prints sessions (observatory.report.console)."""
    f = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_set_level(VERBOSE),
                     help="Print every reason and note, not the first ones.")(f)
    return click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_set_level(QUIET),
                        help="Print the verdict and its reasons only: no tables.")(f)
