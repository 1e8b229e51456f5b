"""A launch's command line read back as its flags: the one parser of ``--flag value`` / ``--flag=value`` argv.

`flag_pairs` gives every flag in order with its value (None: a flag standing alone); the figures compare two
arms' flags with it (`observatory.judge.figures`) and the lossy-settings table reads an arm's
(`observatory.engines.lossy_knobs`). Anything not starting with ``--`` (the program, its module, a flag's value)
is not a flag.
"""

from __future__ import annotations

from collections.abc import Sequence


def flag_pairs(args: Sequence[str]) -> list[tuple[str, str | None]]:
    """(flag, value) for every ``--flag`` of ARGS in order: ``--a=1`` and ``--a 1`` give "1", a ``--flag`` followed
    by another flag or by nothing gives None."""
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        tok = args[i]
        if tok.startswith("--"):
            key, eq, val = tok.partition("=")
            if eq:
                out.append((key, val))
            elif i + 1 < len(args) and not args[i + 1].startswith("--"):
                out.append((key, args[i + 1]))
                i += 1
            else:
                out.append((key, None))
        i += 1
    return out
