"""The example plugin package (examples/plugin) installed where a subprocess finds it, as a user installs one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

EXAMPLE = REPO / "examples" / "plugin"


def install_example_plugin(target: Path) -> dict[str, str]:
    """pip-install (a copy of) examples/plugin into TARGET (no network, no build isolation); the env that sees it."""
    source = target.parent / f"{target.name}-src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--no-build-isolation", "--target", str(target), str(source)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
