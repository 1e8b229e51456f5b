"""Tests of the fault plugin (observatory/faults/): its faults and repairs as pure functions and on stand-ins
shaped like vLLM's hook points. The plugin inside a real vLLM is real_engine/test_fault_plugin_on_engine.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _restore_meta_path() -> Iterator[None]:
    """The plugin's install() may add a post-import finder: never let it outlive a test."""
    saved = list(sys.meta_path)
    yield
    sys.meta_path[:] = saved
