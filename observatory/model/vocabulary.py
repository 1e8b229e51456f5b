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
- ``WARN``: a figure or output that needs a look: an excess over its control
  that is not large, or a finding with no control to weigh it against.
- ``KNOWN``: a finding a known-findings ledger covers (a triaged engine bug,
  an accepted property of a platform): shown every night with its entry,
  never counted in the session verdict or the exit code (issue 46 item 1).
- ``NOTE``: an event within its control's rate (a near-tie flip no more
  frequent than the A/A copy's or the platform's clean history allows):
  listed with its evidence, never counted (issue 46 item 2).
- ``NOT_DISCRIMINATING``: a probe base itself fails, so it cannot tell arms apart.
- ``PASS``, then ``SKIP`` (not measurable; never counts as a pass).

A session's verdict is one of ``SESSION_VERDICTS`` (FAIL, INVALID, WARN,
PASS): KNOWN and NOTE reasons are shown apart and leave it PASS. Each reason
behind it has one of ``REASON_LEVELS``.
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
KNOWN = "KNOWN"
NOTE = "NOTE"

# The one order, worst first.
SEVERITY: tuple[str, ...] = (FAIL, INVALID, UNJUDGED, WARN, KNOWN, NOTE, NOT_DISCRIMINATING, PASS, SKIP)
# What a session's verdict can be, worst first; and the levels of the reasons behind it.
SESSION_VERDICTS: tuple[str, ...] = (FAIL, INVALID, WARN, PASS)
REASON_LEVELS: tuple[str, ...] = (FAIL, INVALID, WARN, KNOWN, NOTE)
# Levels that count toward the session verdict; KNOWN and NOTE are shown, never counted.
COUNTED_LEVELS: tuple[str, ...] = (FAIL, INVALID, WARN)
_RANK = {v: i for i, v in enumerate(SEVERITY)}

# Levels of a channel table's rows and a report's cells, beside the verdict levels: a request that errored,
# a pair that cannot be compared (base did not answer), a row that only informs.
ERROR = "ERROR"
NOT_MEASURABLE = "NOT_MEASURABLE"
INFO = "INFO"
# The order the report shows rows and cells in, worst first; a level not in it sorts with INFO.
ROW_ORDER: tuple[str, ...] = (FAIL, ERROR, INVALID, UNJUDGED, WARN, KNOWN, NOT_MEASURABLE, INFO, SKIP, PASS)

# Arm roles (what each arm of a session is for: observatory.model.roles assigns them).
BASE = "base"  # the reference every other arm is diffed against
AA_COPY = "aa_copy"
SPEC = "spec"
FAULT = "fault"
VARIANT = "variant"
ROLES = (BASE, AA_COPY, SPEC, FAULT, VARIANT)
# roles whose outputs are judged against base (everything but base itself)
JUDGED_AGAINST_BASE = (AA_COPY, SPEC, FAULT, VARIANT)
SPECULATING = (SPEC, FAULT)

# Validity codes that make an arm's measurement INVALID (the rest are notes).
INVALID_CODES = ("INVALID", "CONFOUNDED", "LOSSY", "CRASHED", "HUNG", "CROSS_SESSION")

# Exit codes of the CLI. The session's verdict maps onto the first four.
EXIT = {PASS: 0, WARN: 0, FAIL: 1, INVALID: 2}
SETUP_ERROR = 3  # a usage or setup error, found before anything is stored
INTERNAL_ERROR = 4  # an unexpected error inside the observatory: never read as INVALID (2)
STORAGE_ERROR = 5  # the database locked past its retries, or the disk full: the session marked interrupted

# The mode of base's answers timed beside a spec arm (`--timing paired`), stored on that spec arm.
PAIRED_BASE = "paired_base"
# The mode of base's blocks timed around a spec arm's (`--timing bracketed`), stored on that spec arm; the
# result's repeat is the block's index (spec repeat r sits between blocks r and r + 1).
BRACKET_BASE = "bracket_base"

# Gate names a reader looks up by name (the gate modules declare the same names).
TOKEN_DIFF = "token_diff"
# The performance gates (observatory.judge.perf_gates), by the names their verdict rows and thresholds carry.
SPEEDUP = "speedup"
TTFT_RATIO = "ttft_ratio"
ACCEPTANCE_FLOOR = "acceptance_floor"
TOKEN_COUNT = "token_count"


def rank(verdict: str | None) -> int:
    """Position in SEVERITY (0 = worst); an unknown or missing verdict ranks after SKIP."""
    return _RANK.get(verdict or "", len(SEVERITY))


def row_rank(level: object) -> int:
    """Position of a row's or cell's level in ROW_ORDER (0 = worst); unknown levels (and None) rank with INFO."""
    return ROW_ORDER.index(level) if isinstance(level, str) and level in ROW_ORDER else ROW_ORDER.index(INFO)


def worst(verdicts: Iterable[str | None]) -> str | None:
    """The worst of VERDICTS in the one order; None when there are none."""
    present = [v for v in verdicts if v]
    return min(present, key=rank) if present else None
