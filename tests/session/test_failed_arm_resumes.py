"""An arm during which the observatory itself failed is "interrupted", so --resume runs it again.

On the H200 three-engine night (examples/h200-engines) the seeds channel raised on an SGLang arm; the
session was stored as failed but the arm as "ok", with its channels half run, so `compare --resume`
skipped it. Control: the arms that finished before the failure stay "ok" and are not run again.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import observatory.channels as channel_registry
from observatory.channels import channels, seeds
from observatory.cli import cli
from observatory.model.errors import ObservatoryError
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


def _arms(db: Path) -> dict[str, tuple[str, str | None]]:
    con = sqlite3.connect(db)
    try:
        return {n: (s, r) for n, s, r in con.execute("SELECT name, status, reason FROM arms")}
    finally:
        con.close()


def test_an_arm_the_observatory_failed_in_is_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "r.db"
    real = seeds.CHANNEL.measure
    calls: list[str] = []

    def broken(run: Any, probes: Any) -> None:
        calls.append(run.arm.name)
        if run.arm.name == "mtp1":
            raise ObservatoryError("a reader bug")
        real(run, probes)

    channels()  # the registry filled, as the runner reads it (`observatory.channels.get`)
    registry = channel_registry._REGISTRY
    monkeypatch.setitem(registry, seeds.NAME, dataclasses.replace(seeds.CHANNEL, measure=broken))
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        arms = f"base={base.url},mtp1={spec.url}"
        args = ["compare", "--arms", arms, "--suite", tiny_suite(tmp_path), "--db", str(db), "--no-diffs", "--quiet",
                "--channels", "seeds"]
        first = CliRunner().invoke(cli, args)
        assert first.exit_code != 0
        got = _arms(db)
        assert got["base"][0] == "ok"  # the control: finished before the failure
        assert got["mtp1"][0] == "interrupted" and "a reader bug" in (got["mtp1"][1] or ""), got
        monkeypatch.setitem(registry, seeds.NAME, seeds.CHANNEL)
        calls.clear()
        resumed = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", str(db), "--quiet"])
    assert resumed.exit_code == verdict_exit(db), resumed.output
    assert _arms(db)["mtp1"][0] == "ok" and _arms(db)["base"][0] == "ok"
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM sessions WHERE id = 1").fetchone()[0] == "complete"
    con.close()


def test_a_resume_needs_only_the_engines_of_the_arms_it_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The H200 three-engine session was resumed on a machine where llama.cpp's arms had finished and their
    binary was not built again: the arms left to run are checked, the finished ones are not. Control: a
    plan whose llama.cpp arm is still to run is refused with the setup error."""
    from observatory.session.options import SessionPlan
    from observatory.session.plan import plan_compare

    monkeypatch.setenv("OBSERVATORY_LLAMA_CACHE", str(tmp_path / "no-llama"))  # no llama-server here
    plan = SessionPlan(arms="llama.cpp:base,base")
    opts = plan_compare(plan, finished=frozenset({"llama.cpp:base"}))
    assert [a.name for a in opts.arms] == ["llama.cpp:base", "base"]
    with pytest.raises(ObservatoryError, match="llama"):
        plan_compare(plan)
