"""The edge channels of issue 49 (items 1, 2, 3, 6) and their faults (item 12) on the real CPU engine.

One gate session on the field model with its suite: base, its A/A copy, the
clean mtp1 arm (the float-expand bug repaired: docs/channels.md, sampling),
one copy of it per fault, and the chunked-stream control the stream_fields
channel adds (``base+stream_interval=2``). Each fault is caught by its own
channel; the three controls stay clean in the four channels.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.engine import requires_engine

pytestmark = [pytest.mark.field_engine, requires_engine]

CHANNELS = ("context_limit", "cancel", "stream_fields", "stop_bounds")
CLEAN = "mtp1+repair=cpu_expand+repair=min_tokens_bonus"  # both CPU bugs repaired (docs/engines.md)
CAUGHT_BY = {"limit_neighbour": "context_limit", "abort_stale": "cancel", "stream_top_copy": "stream_fields",
             "stream_args_drop": "stream_fields", "min_tokens_short": "stop_bounds"}
CONTROL = "base+stream_interval=2"


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the session once; return `show --json`."""
    d = tmp_path_factory.mktemp("edges")
    db = str(d / "runs.db")
    arms = ",".join(["base", "base", CLEAN, *(f"{CLEAN}+fault={f}" for f in CAUGHT_BY)])
    r = CliRunner().invoke(cli, [
        "gate", "--profile", "nightly", "--channels", ",".join(CHANNELS), "--arms", arms, "--no-diffs",
        "--concurrency", "1", "--db", db, "--log-dir", str(d / "logs"), "--report", str(d / "report"), "--quiet"],
        catch_exceptions=False)
    assert r.exit_code == 1, r.output  # faults are in: the gate fails
    shown = CliRunner().invoke(cli, ["show", "--db", db, "--json"], catch_exceptions=False)
    out: dict[str, Any] = json.loads(shown.output)
    return out


def _channel_verdicts(data: dict[str, Any], name: str) -> dict[str, str]:
    arm = next(a for a in data["arms"] if a["name"] == name)
    return {g: v["verdict"] for g, v in arm["channel_verdicts"].items() if g.split(":")[0] in CHANNELS}


@pytest.mark.parametrize("fault", sorted(CAUGHT_BY))
def test_each_fault_is_caught_by_its_channel(data: dict[str, Any], fault: str) -> None:
    """Issue 49 item 12: the fault arm FAILs its item's channel."""
    got = _channel_verdicts(data, f"{CLEAN}+fault={fault}")
    assert got.get(CAUGHT_BY[fault]) == "FAIL", got


@pytest.mark.parametrize("control", ["base#2", CLEAN, CONTROL])
def test_the_controls_are_clean(data: dict[str, Any], control: str) -> None:
    """The A/A copy, the clean spec arm and the chunked-stream control FAIL none of the four channels."""
    got = _channel_verdicts(data, control)
    assert got and "FAIL" not in got.values() and "INVALID" not in got.values(), got
