"""The `observatory` command line: click groups, one module per subcommand.

Domain code raises ObservatoryError; this module turns it into one clean
error line (exit 3, the gate's "usage or setup error") in one place.
Unexpected exceptions re-raise under pytest or with OBSERVATORY_RAISE_ERRORS.

Commands are imported when they run, not when the CLI starts (`COMMANDS`):
importing all of them pulled in SQLAlchemy, numpy, jinja2 and the HTTP
stack, 2-3 s before `observatory --version` could answer.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from observatory import __version__
from observatory.env_vars import epilog as env_epilog
from observatory.errors import ObservatoryError

SETUP_ERROR = 3
# An unexpected exception: nothing measured can be trusted (the gate's INVALID), never a traceback.
INTERNAL_ERROR = 2

# name -> (module, attribute): each command is imported when it is looked up.
COMMANDS: dict[str, tuple[str, str]] = {
    "compare": ("observatory.commands.compare", "compare"),
    "sessions": ("observatory.commands.sessions", "sessions"),
    "show": ("observatory.commands.sessions", "show"),
    "judge": ("observatory.commands.sessions", "judge"),
    "gate": ("observatory.commands.gate_cmd", "gate"),
    "selftest": ("observatory.commands.selftest", "selftest"),
    "report": ("observatory.commands.report_cmd", "report"),
    "history": ("observatory.commands.report_cmd", "history"),
    "gates": ("observatory.commands.gates_cmd", "gates"),
    "calibrate": ("observatory.commands.gates_cmd", "calibrate"),
    "triage": ("observatory.commands.triage", "triage"),
}


class ObservatoryGroup(click.Group):
    """A group that reports ObservatoryError and usage errors as one line and exits 3.

    Exit codes are a contract with CI (see `observatory gate`): 0 pass, 1 fail,
    2 invalid measurement (also an internal error), 3 usage or setup error,
    130 interrupted. Click's
    own usage errors would exit 2, so they are mapped to 3 here.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run without click's standalone handling so exit codes stay ours."""
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except click.UsageError as e:
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            click.echo(f"Error: {_one_line(e.format_message())}{hint}", err=True)
            sys.exit(SETUP_ERROR)
        except click.ClickException as e:
            e.show()
            sys.exit(e.exit_code)
        sys.exit(rv if isinstance(rv, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, without importing any command."""
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """The command, imported now if it is one of COMMANDS."""
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command, converting domain errors to clean messages."""
        try:
            return super().invoke(ctx)
        except ObservatoryError as e:
            if os.environ.get("OBSERVATORY_RAISE_ERRORS"):
                raise
            click.echo(f"Error: {_one_line(e)}", err=True)
            sys.exit(SETUP_ERROR)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own: handled in main()
        except Exception as e:
            if os.environ.get("OBSERVATORY_RAISE_ERRORS") or "pytest" in sys.modules:
                raise
            click.echo(f"Error: internal error, {type(e).__name__}: {_one_line(e)} (this is a bug in observatory; "
                       "rerun with OBSERVATORY_RAISE_ERRORS=1 for the traceback and report it)", err=True)
            sys.exit(INTERNAL_ERROR)


def _one_line(e: BaseException | str) -> str:
    """An error message as one line, credentials masked."""
    from observatory.redact import redact_text

    return redact_text(" ".join(str(e).split()))


@click.group(cls=ObservatoryGroup, epilog=env_epilog())
@click.version_option(__version__, prog_name="observatory")
def cli() -> None:
    """Correctness-and-regression observatory for speculative decoding.

    \b
    observatory compare --arms base,mtp1,mtp2
    observatory show --json
    observatory report --out report/
    """


if __name__ == "__main__":  # python -m observatory.cli
    cli()
