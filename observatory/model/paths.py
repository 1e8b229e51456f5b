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
# The field model's reasoning variant (training/field/README.md, "The reasoning variant"): its weights fine-tuned on
# turns that think first (``<think>...</think>`` when the request's chat_template_kwargs ask for it), two tokens
# added; served only by channel ``reasoning``'s second engine, so every table measured on the field model stands.
FIELD_REASONING_MODEL_DIR = PACKAGE_DIR / "field_reasoning_model"
# bundled model -> (its reasoning variant, the vLLM reasoning parser that reads the variant's template)
REASONING_VARIANTS: dict[Path, tuple[Path, str]] = {FIELD_MODEL_DIR: (FIELD_REASONING_MODEL_DIR, "deepseek_r1")}


def reasoning_variant(model: str | None) -> tuple[Path, str] | None:
    """(the reasoning variant, its parser) of the bundled model at MODEL's path; None for any other model or where
    the variant is not installed (no config.json)."""
    if not model:
        return None
    try:
        here = Path(model).resolve()
    except OSError:
        return None
    for bundled, (variant, parser) in REASONING_VARIANTS.items():
        if here == bundled.resolve() and (variant / "config.json").is_file():
            return variant, parser
    return None
