"""The `observatory` command line: click groups, one module per subcommand.

Domain code raises ObservatoryError; this module turns it into one clean
error line (exit 3, the gate's "usage or setup error") in one place.
Unexpected exceptions re-raise under pytest or with OBSERVATORY_RAISE_ERRORS.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from observatory import __version__
from observatory.errors import ObservatoryError

SETUP_ERROR = 3


class ObservatoryGroup(click.Group):
    """A group that reports ObservatoryError and usage errors as one line and exits 3.

    Exit codes are a contract with CI (see `observatory gate`): 0 pass, 1 fail,
    2 invalid measurement, 3 usage or setup error, 130 interrupted. Click's
    own usage errors would exit 2, so they are mapped to 3 here.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        """Run without click's standalone handling so exit codes stay ours."""
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except click.UsageError as e:
            e.show()
            sys.exit(SETUP_ERROR)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, converting domain errors to clean messages."""
        try:
            return super().invoke(ctx)
        except ObservatoryError as e:
            if os.environ.get("OBSERVATORY_RAISE_ERRORS"):
                raise
            click.echo(f"Error: {e}", err=True)
            sys.exit(SETUP_ERROR)


@click.group(cls=ObservatoryGroup)
@click.version_option(__version__, prog_name="observatory")
def cli() -> None:
    """Correctness-and-regression observatory for speculative decoding.

    \b
    observatory compare --arms base,mtp1,mtp2
    observatory show --json
    observatory report --out report/
    """


def _mount() -> None:
    from observatory.commands import compare, sessions

    cli.add_command(compare.compare)
    cli.add_command(sessions.sessions)
    cli.add_command(sessions.show)
    cli.add_command(sessions.judge)
    from observatory.commands import gate_cmd, selftest

    cli.add_command(gate_cmd.gate)
    cli.add_command(selftest.selftest)
    from observatory.commands import report_cmd

    cli.add_command(report_cmd.report)
    cli.add_command(report_cmd.history)
    from observatory.commands import triage

    cli.add_command(triage.triage)
    try:
        from observatory.commands import gates_cmd
    except ImportError:  # pragma: no cover - during development only
        return
    cli.add_command(gates_cmd.gates)
    if hasattr(gates_cmd, "calibrate"):
        cli.add_command(gates_cmd.calibrate)


_mount()

if __name__ == "__main__":  # python -m observatory.cli
    cli()
