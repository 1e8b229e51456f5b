"""Where the product's data directories live.

In a source checkout (editable install, tests) the top-level `gates/`,
`probes/` and `templates/` folders are used. A wheel carries copies of them
under `observatory/_bundled/` (see pyproject's force-include).
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # observatory/, above model/
REPO_ROOT = PACKAGE_DIR.parent


def _data_dir(name: str) -> Path:
    in_repo = REPO_ROOT / name
    if in_repo.is_dir() and (REPO_ROOT / "pyproject.toml").is_file():
        return in_repo
    return PACKAGE_DIR / "_bundled" / name


GATES_DIR = _data_dir("gates")
PROBES_DIR = _data_dir("probes")
TEMPLATES_DIR = _data_dir("templates")
# OBSERVATORY_DEFAULT_MODEL points the embedded default at another folder
# (used while a new default model is being trained and checked).
DEFAULT_MODEL_DIR = Path(os.environ.get("OBSERVATORY_DEFAULT_MODEL") or PACKAGE_DIR / "default_model")
# The second bundled model, trained on real package text (observatory/field_model/README.md): acceptance about
# 0.6 at position 1 where the tiny default's is 0.99. The nightly profile's default (session.plan.PROFILE_DEFAULTS).
FIELD_MODEL_DIR = PACKAGE_DIR / "field_model"
