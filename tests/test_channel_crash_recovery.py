"""An engine that dies under a channel's requests (issue 49 item 11): the arm is launched again and the next
channels run on it (`ArmRun.recover`), the death noted for the channel's `NAME:crash` verdict; at most
MAX_RECOVERIES times, never for an arm that cannot be relaunched. No engine: the relaunch is a stand-in."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from observatory import channels
from observatory.engines.server import EngineStartError
from observatory.model.arms import Arm
from observatory.session.measure import MAX_RECOVERIES, ArmCrashed, ArmRun
from observatory.session.options import SessionPlan
from observatory.store.db import ArmRow, SessionRow
from observatory.store.session_store import Store

LOG = "INFO up\nValueError: Tried to access token index 23\nEngineDeadError: EngineCore encountered an issue\n"


class _Proc:
    def __init__(self) -> None:
        self.stopped = False

    def log_tail(self, lines: int = 60, max_chars: int = 8000) -> str:
        return LOG

    def stop(self, grace_s: float = 20.0) -> None:
        self.stopped = True

    def exit_code(self) -> int | None:
        return None


class _Client:
    def close(self) -> None:
        pass


def _run(tmp_path: Path, relauncher: Any, names: list[str]) -> tuple[ArmRun, Store]:
    store = Store(str(tmp_path / "runs.db"))
    sid = int(store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t")).id)
    arm_id = int(store.add(ArmRow(session_id=sid, position=0, name="mtp1", status="ok", launch={})).id)
    reporter = SimpleNamespace(step=lambda *a: None)
    run = ArmRun(Arm("mtp1", {"method": "mtp", "num_speculative_tokens": 1}), arm_id, store, {}, [], reporter,
                 SessionPlan(arms="mtp1"), proc=_Proc(), client=_Client(), extra={"launch": {}}, channels=names,
                 relauncher=relauncher)  # type: ignore[arg-type]
    return run, store


def _channels(monkeypatch: pytest.MonkeyPatch, dies: set[str], seen: list[tuple[str, Any]]) -> None:
    def measure_of(name: str) -> Any:
        def measure(run: ArmRun, probes: list[Any]) -> None:
            seen.append((name, run.client))
            if name in dies:
                raise ArmCrashed("crashed", "engine exited with status 1 mid-run: HTTP 500")
        return SimpleNamespace(measure=measure)
    monkeypatch.setattr(channels, "get", measure_of)


def test_the_arm_is_launched_again_and_the_next_channel_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    _channels(monkeypatch, {"params"}, seen)
    fresh = SimpleNamespace(proc=_Proc(), client=_Client(), ready_s=3.0, log_path=Path("again.log"))
    launched: list[str] = []

    def relaunch(arm: Arm, why: str) -> Any:
        launched.append(why)
        return fresh
    run, store = _run(tmp_path, relaunch, ["params", "teacher"])
    old = run.proc
    run.run_channels()
    assert launched == ["after-params"] and run.live and run.client is fresh.client and old.stopped  # type: ignore[union-attr]
    assert [n for n, _ in seen] == ["params", "teacher"] and seen[1][1] is fresh.client
    crash = store.arms(store.session().id)[0].launch["channel_facts"]["params"]["crash"]
    assert crash["relaunched"] and crash["engine_errors"] == ["ValueError: Tried to access token index 23",
                                                              "EngineDeadError: EngineCore encountered an issue"]


def test_no_more_than_the_allowed_relaunches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    names = [f"c{i}" for i in range(MAX_RECOVERIES + 1)]
    _channels(monkeypatch, set(names), seen)

    def relaunch(arm: Arm, why: str) -> Any:
        return SimpleNamespace(proc=_Proc(), client=_Client(), ready_s=1.0, log_path=Path("x.log"))
    run, store = _run(tmp_path, relaunch, names)
    with pytest.raises(ArmCrashed):
        run.run_channels()
    last = store.arms(store.session().id)[0].launch["channel_facts"][names[-1]]["crash"]
    assert not last["relaunched"] and "relaunches used" in last["why"]


def test_an_arm_that_cannot_be_relaunched_ends_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    _channels(monkeypatch, {"params"}, seen)
    run, store = _run(tmp_path, None, ["params", "teacher"])
    with pytest.raises(ArmCrashed):
        run.run_channels()
    assert [n for n, _ in seen] == ["params"]

    def fail(arm: Arm, why: str) -> Any:
        raise EngineStartError("no room", "failed")
    (tmp_path / "b").mkdir()
    run, store = _run(tmp_path / "b", fail, ["params", "teacher"])
    with pytest.raises(ArmCrashed):
        run.run_channels()
    crash = store.arms(store.session().id)[0].launch["channel_facts"]["params"]["crash"]
    assert not crash["relaunched"] and "no room" in crash["why"]
