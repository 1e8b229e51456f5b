"""Read a TOML data file (probe suites, arm files), failing with the project's own error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from observatory.model.errors import ObservatoryError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_toml(path: Path, error: type[ObservatoryError], what: str) -> dict[str, Any]:
    """The parsed file; a missing or malformed one raises ERROR naming the path."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: no such {what}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise error(f"{path}: not valid TOML: {e}") from None
