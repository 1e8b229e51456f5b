"""The example plugin (examples/plugin: a gate, a channel and an engine adapter) in a real session on the CPU engine
(issue 26 item 6). How the plugins register and load without an engine is model/test_plugins.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.engine import requires_engine
from tests.support.plugins import install_example_plugin


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return install_example_plugin(tmp_path_factory.mktemp("plugin-site"))


SUITE = """
suite = "plugin"
[[probe]]
name = "recite"
category = "recitation"
messages = [{ role = "user", content = "Repeat the word apple 5 times." }]
max_tokens = 16
"""


@requires_engine
def test_the_plugin_runs_in_a_real_session_and_reaches_show_json(plugin_env: dict[str, str], tmp_path: Path) -> None:
    """A URL arm of real vLLM read through the plugin's adapter, its channel run, its gate judged."""
    from observatory.engines.arm_engines import parse_arms
    from observatory.engines.settings import EngineSettings
    from observatory.model.paths import DEFAULT_MODEL_DIR
    from observatory.session.launch import launch

    (tmp_path / "one.toml").write_text(SUITE)
    db = str(tmp_path / "runs.db")
    env = {**plugin_env, "OBSERVATORY_DB": db}
    arm = parse_arms("base")[0]
    settings = EngineSettings(model=str(DEFAULT_MODEL_DIR), env={"VLLM_CPU_KVCACHE_SPACE": "1"})  # as plan sets it on a CPU
    with launch(arm, settings, None, tmp_path / "engine.log") as eng:
        r = subprocess.run([sys.executable, "-m", "observatory", "compare", "--arms",
                            f"base=http://127.0.0.1:{eng.port}", "--engine", "example-vllm", "--channels",
                            "example_repeat", "--suite", str(tmp_path / "one.toml"), "--no-diffs", "--quiet"],
                           env=env, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    shown = subprocess.run([sys.executable, "-m", "observatory", "show", "--json"], env=env, capture_output=True,
                           text=True, timeout=120, check=True)
    data = json.loads(shown.stdout)
    base = data["arms"][0]
    assert data["session"]["options"]["channels"] == ["example_repeat"]
    gates = {g for res in base["results"] for g in res["verdicts"]}
    assert "example_no_wall" in gates
    assert base["channel_verdicts"]["example_repeat"]["verdict"] == "PASS", base["channel_verdicts"]
    assert base["launch"]["engine"] == "example-vllm", base["launch"]
    assert base["engine_version"], base  # read through the plugin's adapter (vLLM's /version)
