"""Channel long_prompts on the real CPU engine (issue 49 item 7): drafts that turn to noise past a prompt length
FAIL, the clean arm beside them does not WARN.

One gate session on the field model (the nightly's), the channel alone, a short context (``--max-model-len 512``:
prompts of 29 to 487 tokens) and the four-probe suite of the engine-condition test, so it stays cheap: base, the
clean mtp1 and mtp1 with the ``long_noise`` fault past 200 prompt tokens (tests/fixtures/arms_long_prompts.toml).
The clean mtp1 has no control here (no history in a fresh store, no documented curve for these prompts): it is
not judged (SKIP, never a WARN); the fault arm is judged against it, its clean twin tonight. Measured: 2 passed
in 3 min 36 s on the 2-core host at load 10 (docs/channels.md, long_prompts).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support import paths
from tests.support.engine import requires_engine

pytestmark = [requires_engine]

FIXTURES = paths.FIXTURES
FAULTED = "mtp1-long-noise"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the session once; `show --json` and the wall time."""
    d = tmp_path_factory.mktemp("long_prompts")
    db = str(d / "runs.db")
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, [
        "gate", "--profile", "nightly", "--channels", "long_prompts", "--arms", f"base,mtp1,{FAULTED}",
        "--arms-file", str(FIXTURES / "arms_long_prompts.toml"), "--suite", str(FIXTURES / "conditions_tiny.toml"),
        "--no-aa-copy", "--no-diffs", "--max-model-len", "512", "--engine-arg=--enforce-eager", "--concurrency", "1",
        "--db", db, "--log-dir", str(d / "logs"), "--report", str(d / "report"), "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output  # the fault arm is caught
    shown = CliRunner().invoke(cli, ["show", "--db", db, "--json"], catch_exceptions=False)
    out: dict[str, Any] = json.loads(shown.output)
    out["wall_s"] = time.monotonic() - t0
    return out


def _verdicts(data: dict[str, Any], name: str) -> dict[str, dict[str, Any]]:
    arm = next(a for a in data["arms"] if a["name"] == name)
    return {g: v for g, v in arm["channel_verdicts"].items() if g.split(":")[0] == "long_prompts"}


def test_noise_drafts_past_a_length_fail(data: dict[str, Any]) -> None:
    got = _verdicts(data, FAULTED)
    assert got["long_prompts"]["verdict"] == "FAIL", got["long_prompts"]
    assert "the clean twin mtp1 tonight" in got["long_prompts"]["reason"]
    assert got["long_prompts:outputs"]["verdict"] == "PASS"  # the output stays the target's


def test_the_clean_arm_beside_it_does_not_warn(data: dict[str, Any]) -> None:
    got = _verdicts(data, "mtp1")
    assert got["long_prompts"]["verdict"] == "SKIP" and "no control" in got["long_prompts"]["reason"], got
    assert all(v["verdict"] in ("PASS", "SKIP") for v in got.values()), got
    assert all(v["verdict"] in ("PASS", "SKIP") for v in _verdicts(data, "base").values())
