"""The shared vocabulary: verdict levels, their one order, exit codes, the gate names readers look up.

Every module that names a verdict, ranks verdicts or exits with a code takes
it from here (issue 26 item 4): one order of severity, read by the report's
cells, the triage runs and the session verdict alike.

Severity, worst first (docs/design.md section 5):

- ``FAIL``: a discriminating check fails: the spec arm's output or figure is wrong.
- ``INVALID``: nothing failed, but the measurement cannot back a verdict
  (crashed, hung, spec inactive, confounded). Below FAIL: a failure that was
  seen is information even where other requests of the same run broke.
- ``UNJUDGED``: a stored result no gate has judged yet.
- ``WARN``: a figure or output that needs a look.
- ``NOT_DISCRIMINATING``: a probe base itself fails, so it cannot tell arms apart.
- ``PASS``, then ``SKIP`` (not measurable; never counts as a pass).
"""

from __future__ import annotations

from collections.abc import Iterable

PASS = "PASS"
WARN = "WARN"
FAIL = "FAIL"
SKIP = "SKIP"
INVALID = "INVALID"
UNJUDGED = "UNJUDGED"
NOT_DISCRIMINATING = "NOT_DISCRIMINATING"

# The one order, worst first.
SEVERITY: tuple[str, ...] = (FAIL, INVALID, UNJUDGED, WARN, NOT_DISCRIMINATING, PASS, SKIP)
_RANK = {v: i for i, v in enumerate(SEVERITY)}

# Validity codes that make an arm's measurement INVALID (the rest are notes).
INVALID_CODES = ("INVALID", "CONFOUNDED", "LOSSY", "CRASHED", "HUNG", "CROSS_SESSION")

# Exit codes of the CLI. The session's verdict maps onto the first four.
EXIT = {PASS: 0, WARN: 0, FAIL: 1, INVALID: 2}
SETUP_ERROR = 3  # a usage or setup error, found before anything is stored
INTERNAL_ERROR = 4  # an unexpected error inside the observatory: never read as INVALID (2)
STORAGE_ERROR = 5  # the database locked past its retries, or the disk full: the session marked interrupted

# The mode of base's answers timed beside a spec arm (`--timing paired`), stored on that spec arm.
PAIRED_BASE = "paired_base"

# Gate names a reader looks up by name (the gate modules declare the same names).
TOKEN_DIFF = "token_diff"


def rank(verdict: str | None) -> int:
    """Position in SEVERITY (0 = worst); an unknown or missing verdict ranks after SKIP."""
    return _RANK.get(verdict or "", len(SEVERITY))


def worst(verdicts: Iterable[str | None]) -> str | None:
    """The worst of VERDICTS in the one order; None when there are none."""
    present = [v for v in verdicts if v]
    return min(present, key=rank) if present else None
