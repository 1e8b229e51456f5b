"""How much the commands print: ``-q`` QUIET (the verdict and its reasons, no tables), NORMAL, ``-v`` VERBOSE (every
reason and note). One process-wide setting, reset by every command line (observatory.cli) and read by the
terminal printers (observatory.report.console)."""

from __future__ import annotations

QUIET, NORMAL, VERBOSE = -1, 0, 1
_level = NORMAL


def set_verbosity(level: int) -> None:
    """Set how much the commands print (QUIET, NORMAL, VERBOSE); the most recent call wins."""
    global _level
    _level = max(QUIET, min(VERBOSE, level))


def verbosity() -> int:
    """The current verbosity."""
    return _level
