"""The engine-condition channels on the real CPU engine (issue 28 item 5): memory_pressure and lifecycle each
catch their own fault, name themselves, and pass the clean spec arm and base. (long_prompts, in the nightly
since issue 49 item 7 and judged against the clean curve, has its own cheaper engine test:
tests/real_engine/test_engine_channel_long_prompts.py.)

One session (one engine per arm): base, a clean mtp2 and mtp2 with the two faults at once, from
tests/fixtures/arms_conditions.toml: arms whose own engine has vLLM's dev-mode endpoints and a 9-block KV
cache, so no second engine is launched per arm (the channels' relaunch path is what `--profile deep` takes
on arms as deployed: docs/channels.md). Each fault is in force only under its own channel's condition (a
preempted request, after /wake_up; lifecycle runs last), so one faulted arm
stands for two at one engine start fewer (6 minutes each on this loaded machine). One test per
channel reads the shared session.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support import paths
from tests.support.engine import requires_engine

pytestmark = [pytest.mark.field_engine, requires_engine]

FIXTURES = paths.FIXTURES
CHANNELS = ("memory_pressure", "lifecycle")  # lifecycle last: its cycles change the engine
FAULT_OF = {"memory_pressure": "preempt_poison", "lifecycle": "wake_broken_drafter"}
SPEC = "mtp2-small"
FAULTED = "mtp2-small-faults"  # OBSERVATORY_FAULT = every fault of FAULT_OF
ORDER = ["PASS", "SKIP", "NOT_DISCRIMINATING", "KNOWN", "WARN", "UNJUDGED", "INVALID", "FAIL"]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Arm name -> gate -> (worst verdict, its reason); and the session's wall time."""
    tmp = tmp_path_factory.mktemp("conditions")
    db = tmp / "conditions.db"
    arms = ",".join(["base-small", SPEC, FAULTED])
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, ["gate", "--arms", arms, "--arms-file", str(FIXTURES / "arms_conditions.toml"),
                                 "--channels", ",".join(CHANNELS), "--suite", str(FIXTURES / "conditions_tiny.toml"),
                                 "--no-diffs", "--engine-arg=--enforce-eager", "--db", str(db),
                                 "--log-dir", str(tmp / "logs"), "--report", str(tmp / "report"), "--quiet"],
                           catch_exceptions=False)
    assert db.exists(), r.output
    out: dict[str, Any] = {"exit": r.exit_code, "output": r.output, "wall_s": time.monotonic() - t0, "arms": {}}
    with Store(str(db)) as store:
        sid = store.session().id
        for arm in store.arms(sid):
            got = out["arms"].setdefault(arm.name, {})
            for v in store.verdicts(arm.id):
                now = got.get(v.gate)
                if now is None or ORDER.index(v.verdict) > ORDER.index(now[0]):
                    got[v.gate] = (v.verdict, v.reason)
    return out


def _check(session: dict[str, Any], channel: str, caught_by: str) -> None:
    arms = session["arms"]
    assert session["exit"] == 1, session["output"]  # the fault arms are caught
    for name in ("base-small", SPEC):  # the clean controls: exercised (no SKIP), never FAILed
        for gate, (verdict, reason) in arms[name].items():
            if gate.split(":")[0] == channel:
                assert verdict in ("PASS", "WARN", "KNOWN"), (name, gate, verdict, reason)  # KNOWN: docs/known.md
    got = arms[FAULTED]
    assert got[caught_by][0] in ("FAIL", "WARN"), (channel, got)
    clean = arms[SPEC][caught_by][0]
    assert clean == "PASS", clean


def test_memory_pressure_catches_preempt_poison(session: dict[str, Any]) -> None:
    _check(session, "memory_pressure", "memory_pressure")
    assert session["arms"][FAULTED]["memory_pressure"][0] == "FAIL"
    assert "preemptions" in session["arms"][SPEC]["memory_pressure"][1]


def test_lifecycle_catches_wake_broken_drafter(session: dict[str, Any]) -> None:
    _check(session, "lifecycle", "lifecycle:acceptance")
