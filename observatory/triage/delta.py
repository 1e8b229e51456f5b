"""Delta debugging (Zeller's ddmin) over a set of knob changes.

Given changes C whose combination makes a failure disappear (and the empty
set, the arm as the session ran it, which fails), find a 1-minimal subset
that still makes it disappear: removing any one change from the result
brings the failure back. ``passes(subset)`` is the experiment; it returns
True (failure gone), False (still fails) or None (not measurable: the engine
did not start), which counts as "not gone". A pure function of its
arguments: the tests drive it with a table of which knob sets fail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


class OutOfRuns(Exception):
    """The experiment budget ran out before the search finished."""


def _split(items: list[T], n: int) -> list[list[T]]:
    size, rest = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < rest else 0)
        out.append(items[start:stop])
        start = stop
    return [c for c in out if c]


def ddmin(changes: Sequence[T], passes: Callable[[list[T]], bool | None]) -> list[T]:
    """A 1-minimal subset of CHANGES under which PASSES holds (CHANGES itself must pass).

    Raises OutOfRuns if PASSES does (the caller's budget); order is kept.
    """
    current = list(changes)
    n = 2
    while len(current) >= 2:
        chunks = _split(current, n)
        for chunk in chunks:
            if passes(chunk) is True:
                current, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [c for c in current if c not in chunk]
                if rest and passes(rest) is True:
                    current, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(current):
                    break
                n = min(2 * n, len(current))
    return current
