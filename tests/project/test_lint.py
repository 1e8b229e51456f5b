"""ruff and mypy over the package, as the project asks of CI (run through pytest so .ci/run stays one command)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    found = str(exe) if exe.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (it comes with the test extra)")
    return found


def test_ruff() -> None:
    r = subprocess.run([_tool("ruff"), "check", "observatory", "gates", "tests", "benchmarks", "training"],
                       cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy() -> None:
    r = subprocess.run([_tool("mypy"), "observatory"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy_strict() -> None:
    """Issue 14: the package type-checks under `mypy --strict` (the read model is checked, not hoped)."""
    r = subprocess.run([_tool("mypy"), "--strict", "observatory"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
