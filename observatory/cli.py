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
    """A group that reports ObservatoryError as one line and exits 3."""

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
    try:
        from observatory.commands import gates_cmd
    except ImportError:  # pragma: no cover - during development only
        return
    cli.add_command(gates_cmd.gates)
    if hasattr(gates_cmd, "calibrate"):
        cli.add_command(gates_cmd.calibrate)


_mount()
