"""Triage against the real vLLM CPU engine with a knob-conditional fault.

One session (base + an MTP k=2 arm carrying ``ghost_k2``, a ghost token that
fires only while ``num_speculative_tokens >= 2``) on one probe; `triage`
relaunches the arm as it ran and with k=1 and must name
``num_speculative_tokens`` as the knob that flips the failure. The bundle's
``launch.sh`` then starts a fresh faulted server, against which its
``check.py`` must report the failure (exit 1), and a clean spec server,
against which it must pass (exit 0). Six engine starts (eager, for a faster
start): 7 minutes on two shared cores at load ~3 (15+ at load 8). Run alone:
``pytest -m engine tests/real_engine/test_triage_engine.py``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.client.send import EngineClient
from observatory.engines.server import EngineProcess, EngineStartError, free_port
from observatory.model.paths import DEFAULT_MODEL_DIR
from observatory.session.launch import launch
from observatory.store.session_store import Store
from observatory.triage.source import rebuild_arm, rebuild_settings
from tests.support.engine import requires_engine
from tests.support.sessions import verdict_exit

pytestmark = requires_engine

SUITE = """
suite = "triage-one"
description = "One probe for the triage engine test."

[[probe]]
name = "count"
category = "counting"
messages = [{ role = "user", content = "Count from 1 to 20." }]
max_tokens = 24
"""

ARMS = """
[arms.mtp2g]
speculative_config = { method = "mtp", num_speculative_tokens = 2 }
env = { OBSERVATORY_FAULT = "ghost_k2" }
"""


def test_triage_names_k_for_a_k2_only_fault_and_its_bundle_reproduces(tmp_path: Path) -> None:
    """Issue triage (how it will be checked): a fault only at k >= 2 is flipped by num_speculative_tokens."""
    (tmp_path / "one.toml").write_text(SUITE)
    (tmp_path / "arms.toml").write_text(ARMS)
    db, logs = str(tmp_path / "runs.db"), str(tmp_path / "logs")
    r = CliRunner().invoke(cli, ["compare", "--arms", "base,mtp2g", "--arms-file", str(tmp_path / "arms.toml"),
                                 "--suite", str(tmp_path / "one.toml"), "--no-diffs", "--db", db, "--log-dir", logs,
                                 "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    # the ghost token FAILs the arm (compare exits 1 on it, issue 46 item 4); triage starts from that failure
    assert r.exit_code == verdict_exit(db) == 1, r.output
    shown = json.loads(CliRunner().invoke(cli, ["show", "--db", db, "--json"], catch_exceptions=False).output)
    fails = {(x["arm"], x["gate"]) for x in shown["verdict"]["reasons"] if x["level"] == "FAIL"}
    assert ("mtp2g", "token_diff") in fails, fails
    r = CliRunner().invoke(cli, ["triage", "--db", db, "--log-dir", logs, "--knob", "num_speculative_tokens",
                                 "--bundle", str(tmp_path / "bundle"), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["arm"] == "mtp2g" and out["probes"] == ["count"]
    assert [(x["change"], x["verdict"]) for x in out["runs"]] == [({}, "FAIL"),
                                                                  ({"num_speculative_tokens": 1}, "PASS")]
    assert out["runs"][0]["first_divergence"] is not None and out["runs"][1]["first_divergence"] is None
    assert out["flips"] == ["num_speculative_tokens"] and out["minimal"] == {"num_speculative_tokens": 1}

    bundle = tmp_path / "bundle"
    env = {"MODEL": str(DEFAULT_MODEL_DIR), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    port = free_port()
    faulted = EngineProcess(["sh", str(bundle / "launch.sh")], {**env, "PORT": str(port)}, tmp_path / "faulted.log")
    try:
        faulted.start()
        client = EngineClient(f"http://127.0.0.1:{port}")
        faulted.wait_ready(client.health, 900)
        client.close()
        check = _check(bundle, port)
        assert check.returncode == 1, check.stdout + check.stderr
        assert "REPRODUCED" in check.stdout
    finally:
        faulted.stop()
    store = Store(db)
    faulted_row = next(a for a in store.arms(store.session().id) if a.name == "mtp2g")
    # the same arm (its env, e.g. VLLM_CPU_KVCACHE_SPACE, and its engine flags) without the fault
    clean = dataclasses.replace(rebuild_arm(faulted_row), fault=None)
    settings = rebuild_settings(store.session())  # as the session ran its arms
    try:
        with launch(clean, settings, None, tmp_path / "clean.log") as eng:
            check = _check(bundle, eng.port)
    except EngineStartError as e:
        pytest.fail(f"the clean server did not start: {e}\n{e.log_tail}")
    assert check.returncode == 0, check.stdout + check.stderr
    assert "equal to base" in check.stdout


def _check(bundle: Path, port: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(bundle / "check.py"), "--url", f"http://127.0.0.1:{port}"],
                          capture_output=True, text=True, timeout=600, check=False)
