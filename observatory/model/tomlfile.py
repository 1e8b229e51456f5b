"""Read a TOML data file (probe suites, arm files), failing with the project's own error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.safe_read import MAX_DEPTH, read_text, too_deep

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_toml(path: Path, error: type[ObservatoryError], what: str) -> dict[str, Any]:
    """The parsed file; a missing, unreadable, oversized, too deeply nested or malformed one raises ERROR
    naming the path (`observatory.model.safe_read`)."""
    text = read_text(path, error, what)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply for the {what} (at most {MAX_DEPTH} levels)") from None
    if too_deep(data):
        raise error(f"{path}: nested too deeply for the {what} (at most {MAX_DEPTH} levels)")
    return data
