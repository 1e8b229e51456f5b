"""`pip install .` (not only editable) carries gates, probes, templates and the default model (issue 2)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_carries_the_data(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp_path.glob("observatory-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("observatory/_bundled/gates/token_diff.py", "observatory/_bundled/probes/default.toml",
                   "observatory/_bundled/templates/report.html", "observatory/default_model/config.json",
                   "observatory/default_model/model.safetensors", "observatory/faults/__init__.py"):
        assert needed in names, needed
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "observatory = observatory.cli:cli" in text
    assert "observatory_faults = observatory.faults:register" in text
