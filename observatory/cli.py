"""The `observatory` command line: click groups, one module per subcommand.

Domain code raises ObservatoryError; this module turns it into one clean
error line (exit 3, the gate's "usage or setup error") in one place. A
storage failure (database locked past its busy timeout, disk full:
`observatory.store.storage_failure`) is one line and exit 5. Any other unexpected
exception is an internal error: one line naming the file its traceback was
written to, exit 4, never 2 (INVALID, which CI reads as a measurement).
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
from observatory.model.env_vars import epilog as env_epilog
from observatory.model.errors import ObservatoryError
from observatory.model.redact import redact_text

# An unexpected exception exits INTERNAL_ERROR: nothing measured can be trusted, never a traceback.
from observatory.model.vocabulary import INTERNAL_ERROR, SETUP_ERROR
from observatory.report.verbosity import NORMAL, set_verbosity
from observatory.store import storage_failure

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
    "suite": ("observatory.commands.suite_cmd", "suite"),
    "known": ("observatory.commands.known_cmd", "known"),
}


class QuietPipe:
    """A standard stream that goes quiet once its reader has gone (a closed pipe: `observatory sessions | head -1`).

    The command goes on and ends with its own status (a gate's verdict stays its exit code, under `pipefail`
    too); what it would still have printed is dropped: the stream's descriptor is pointed at /dev/null, so
    nothing fails at exit either. Everything else is the wrapped stream's.
    """

    def __init__(self, stream: Any):
        self._stream = stream
        self._gone = False

    def write(self, text: Any) -> int:
        """Write TEXT, or drop it once the reader has gone."""
        if self._gone:
            return len(text)
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._go_quiet()
            return len(text)

    def flush(self) -> None:
        """Flush, unless the reader has gone."""
        if self._gone:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._go_quiet()

    def _go_quiet(self) -> None:
        self._gone = True
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # a stream without a descriptor (a test's buffer): dropping the text is enough

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class ObservatoryGroup(click.Group):
    """A group that reports ObservatoryError and usage errors as one line and exits 3.

    Exit codes are a contract with CI (see `observatory gate`): 0 pass, 1 fail,
    2 invalid measurement, 3 usage or setup error, 4 internal error, 5 storage
    failure, 130 interrupted. Click's
    own usage errors would exit 2, so they are mapped to 3 here.
    """

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run without click's standalone handling so exit codes stay ours."""
        kwargs["standalone_mode"] = False
        set_verbosity(NORMAL)  # each command line starts at the default (-q / -v set it while parsing)
        for name in ("stdout", "stderr"):  # `observatory sessions | head -1`: a closed pipe ends nothing
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, QuietPipe):
                setattr(sys, name, QuietPipe(stream))
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

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The environment variables, the engines' own among them: read from the adapters when help is shown."""
        # here: every adapter is loaded for --help, not at each command's start
        from observatory.engines.arm_engines import env_vars

        self.epilog = env_epilog(env_vars())
        super().format_epilog(ctx, formatter)

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
            if os.environ.get("OBSERVATORY_RAISE_ERRORS"):
                raise
            if storage_failure.failed_in(e) is not None or storage_failure.problem(e) is not None:
                click.echo(f"Error: {_one_line(storage_failure.one_line(e))}", err=True)
                sys.exit(storage_failure.STORAGE_EXIT)
            if "pytest" in sys.modules:
                raise
            where = _write_traceback(e)
            click.echo(f"Error: internal error, {type(e).__name__}: {_one_line(e)[:300]} (this is a bug in "
                       f"observatory; the traceback is in {where}: please report it)", err=True)
            sys.exit(INTERNAL_ERROR)


def _write_traceback(e: BaseException) -> str:
    """E's traceback, credentials masked, written to a new file in the temp directory; that file's path."""
    import tempfile
    import traceback

    text = redact_text(f"observatory {__version__}: {' '.join(sys.argv)[:2000]}\n"
                       + "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    try:
        fd, path = tempfile.mkstemp(prefix="observatory-internal-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
    except OSError as err:
        return f"no file ({err.strerror}; rerun with OBSERVATORY_RAISE_ERRORS=1 to see it)"
    return path


def _one_line(e: BaseException | str) -> str:
    """An error message as one line, credentials masked."""
    # control characters (a terminal escape in a server's answer quoted by an error) become '?'
    return redact_text("".join(c if c.isprintable() else "?" for c in " ".join(str(e).split())))


def _verbosity(level: int) -> Any:
    def callback(ctx: click.Context, param: click.Parameter, value: bool) -> None:
        if value:
            set_verbosity(level)
    return callback


@click.group(cls=ObservatoryGroup, epilog=env_epilog())
@click.version_option(__version__, prog_name="observatory")
@click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_verbosity(-1),
              help="Print verdicts and reasons only, no tables (also after each command).")
@click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_verbosity(1),
              help="Print every reason and note (also after each command).")
def cli() -> None:
    """Correctness-and-regression observatory for speculative decoding.

    \b
    observatory compare --arms base,mtp1,mtp2
    observatory show --json
    observatory report --out report/

    Output that is not a terminal (a pipe, a CI log) is laid out 240 columns
    wide, so no figure wraps; COLUMNS sets another width.
    """


if __name__ == "__main__":  # python -m observatory.cli
    cli()
