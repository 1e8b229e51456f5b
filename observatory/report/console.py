"""The one way the observatory makes a terminal console: widths that fit a CI log, and how much to print.

Width: ``COLUMNS`` when set (rich reads it); else the terminal's own width on
a terminal; else (a pipe, a file, a CI log) ``LOG_WIDTH`` columns, so a table
or a figure is never wrapped mid-number at rich's default of 80.

Verbosity (``-q``/``--quiet`` and ``-v``/``--verbose`` on the group and on
the commands that print sessions): ``QUIET`` prints the verdict, its reasons
and the closing block, no tables; ``VERBOSE`` also lists every reason (not
the first ten) and the notes of every history point.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TextIO

from rich.console import Console
from rich.segment import Segment

from observatory.report.verbosity import NORMAL, QUIET, VERBOSE, set_verbosity, verbosity

__all__ = [
    "LOG_WIDTH",
    "NORMAL",
    "QUIET",
    "VERBOSE",
    "SafeConsole",
    "make_console",
    "printable",
    "set_verbosity",
    "verbosity",
    "width_for",
]

LOG_WIDTH = 240
def width_for(stream: TextIO) -> int | None:
    """The width to lay out for STREAM: None (rich decides: COLUMNS, or the terminal's) or LOG_WIDTH."""
    if os.environ.get("COLUMNS", "").isdigit():
        return None
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):
        pass
    return LOG_WIDTH


def printable(text: str) -> str:
    """TEXT with every control character but newline and tab as '?': ESC starts CSI and OSC sequences
    (colours, the window title, hyperlinks, clearing the screen), 0x9b is CSI alone; a stored string (a
    server's model name, an answer quoted in a reason) must never drive the terminal."""
    return "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)


class SafeConsole(Console):
    """A rich console that prints every piece of text through `printable`; its own styles and cursor moves
    (colours, progress bars) are rich's control segments and stay as they are. Rich itself drops BEL and a
    few others but passes ESC through (measured: rich 14, Text and plain strings alike)."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(printable(seg.text), seg.style, seg.control) for seg in buffer)


def make_console(stderr: bool = False) -> Console:
    """A console on stdout (or STDERR) that fits a CI log when it is not a terminal and never passes on a
    terminal escape sequence from stored text."""
    stream = sys.stderr if stderr else sys.stdout
    return SafeConsole(stderr=stderr, width=width_for(stream))
