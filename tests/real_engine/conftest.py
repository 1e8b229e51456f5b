"""Tests that launch a real engine: vLLM's CPU build (in a Docker image too) and llama.cpp's llama-server.

Each test here is marked `engine` (`-m engine` selects them, `-m 'not engine'` leaves them out); those of the field
channels' fault sessions are `field_engine` too (left out by default: pyproject.toml's addopts). A test that needs
vLLM carries tests.support.engine.requires_engine; the Docker and llama.cpp ones skip on their own conditions.
How each floor behaves without an engine is in that floor's folder (channels/, judge/, ...).
"""

from __future__ import annotations

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test collected under this folder launches a real engine: mark it so."""
    item.add_marker(pytest.mark.engine)
