"""The old import path of a user gate file, ``from observatory.gates import gate``, kept for one release.

Gate files written before the package was split by phase (issue 26) import the gate contract from here; it lives
in `observatory.model.gates` now (docs/plugins.md). Every name is read from there, with a DeprecationWarning that
names the new path; this module goes in the release after 0.1 (issue 47 item 7). Nothing in the package imports it.
"""

from __future__ import annotations

import warnings
from typing import Any

from observatory.model import gates as _gates

MOVED_TO = "observatory.model.gates"


def __getattr__(name: str) -> Any:
    """NAME from `observatory.model.gates`, with a DeprecationWarning pointing at the importing line."""
    if name.startswith("__"):
        raise AttributeError(name)
    value = getattr(_gates, name)
    # one message for every name, so an import line of several names is warned about once
    warnings.warn(f"observatory.gates is deprecated: import from {MOVED_TO} (the old path goes in the release "
                  "after 0.1)", DeprecationWarning, stacklevel=2)
    return value
