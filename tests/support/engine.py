"""Whether a real vLLM engine can be launched here: the skip every test of it carries."""

from __future__ import annotations

import importlib.util
import os

import pytest


def engine_available() -> bool:
    """Whether vLLM can be launched here."""
    return importlib.util.find_spec("vllm") is not None


requires_engine = pytest.mark.skipif(
    not engine_available() and not os.environ.get("CI"),
    reason="vLLM is not installed (CI installs it; see README)",
)
