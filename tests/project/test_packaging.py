"""`pip install .` (not only editable) carries gates, probes, templates and the default model (issue 2)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.support.paths import REPO


def test_wheel_carries_the_data(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = tmp_path.glob("specdecode_observatory-*.whl")  # the distribution name (issue 30.8)
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("observatory/_bundled/gates/token_diff.py", "observatory/_bundled/probes/default.toml",
                   "observatory/_bundled/templates/report.html", "observatory/default_model/config.json",
                   "observatory/default_model/model.safetensors", "observatory/faults/__init__.py",
                   "observatory/model/known_builtin.toml"):  # the built-in known-findings ledger (docs/known.md)
        assert needed in names, needed
    licenses = [n for n in names if ".dist-info/" in n and n.rsplit("/", 1)[-1] == "LICENSE"]
    assert licenses and b"Apache License" in zipfile.ZipFile(wheel).read(licenses[0])  # issue 30.8
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Name: specdecode-observatory" in meta and "Provides-Extra: postgres" in meta
    assert "Classifier: License :: OSI Approved :: Apache Software License" in meta
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "observatory = observatory.cli:cli" in text
    assert "observatory_faults = observatory.faults:register" in text
