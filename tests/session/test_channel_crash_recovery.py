"""An engine that dies under a channel's requests (issue 49 item 11): the arm's engine is restarted and the next
channels run on it (`ArmRun.restart`), at most MAX_RESTARTS times; the known engine bug an error names
(`known_bug`). No engine: the relaunch is a stand-in."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from observatory.engines.server import EngineStartError
from observatory.faults.repairs import known_bug
from observatory.model.arms import Arm
from observatory.session import measure as measure_module
from observatory.session.measure import MAX_RESTARTS, ArmCrashed, ArmRun
from observatory.session.options import SessionPlan
from observatory.store.db import ArmRow, SessionRow
from observatory.store.session_store import Store

TOPK = "RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0. Specify the dim."
LOG = f"INFO up\nAssertionError: warm-up noise\nINFO ok\n{TOPK}\nEngineDeadError: EngineCore encountered an issue\n"


class _Proc:
    def __init__(self) -> None:
        self.stopped = False

    def log_tail(self, lines: int = 60, max_chars: int = 8000) -> str:
        return LOG

    def fatal_error(self) -> str | None:
        return TOPK

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
                 SessionPlan(arms="mtp1"), proc=_Proc(), client=_Client(), extra={"launch": {}},  # type: ignore[arg-type]
                 channels=names, relauncher=relauncher)
    return run, store


def _channels(monkeypatch: pytest.MonkeyPatch, dies: set[str], seen: list[tuple[str, Any]]) -> None:
    def measure_of(name: str) -> Any:
        def measure(run: ArmRun, probes: list[Any]) -> None:
            seen.append((name, run.client))
            if name in dies:
                raise ArmCrashed("crashed", "engine exited with status 1 mid-run: HTTP 500")
        return SimpleNamespace(measure=measure)
    monkeypatch.setattr(measure_module, "get_channel", measure_of)


def test_the_engine_is_restarted_with_its_errors_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    _channels(monkeypatch, {"params"}, seen)
    fresh = SimpleNamespace(proc=_Proc(), client=_Client(), ready_s=3.0, log_path=Path("again.log"))
    run, store = _run(tmp_path, lambda arm, why, model=None: fresh, ["params", "teacher"])
    old = run.proc
    run.run_channels()
    assert run.live and run.client is fresh.client and old.stopped  # type: ignore[union-attr]
    assert [n for n, _ in seen] == ["params", "teacher"] and seen[1][1] is fresh.client
    restart = store.arms(store.session().id)[0].launch["restarts"][0]
    assert restart["restarted"] and restart["where"] == "channel params"


def test_no_more_than_the_allowed_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    names = [f"c{i}" for i in range(MAX_RESTARTS + 1)]
    _channels(monkeypatch, set(names), seen)
    run, _ = _run(tmp_path, lambda arm, why, model=None: SimpleNamespace(proc=_Proc(), client=_Client(), ready_s=1.0,
                                                             log_path=Path("x.log")), names)
    with pytest.raises(ArmCrashed):
        run.run_channels()

    def fail(arm: Arm, why: str, model: str | None = None) -> Any:
        raise EngineStartError("no room", "failed")
    (tmp_path / "b").mkdir()
    _channels(monkeypatch, {"params"}, seen)
    run, _ = _run(tmp_path / "b", fail, ["params", "teacher"])
    with pytest.raises(ArmCrashed):
        run.run_channels()


def test_known_bugs_are_named_by_their_error() -> None:
    assert known_bug([TOPK]) is not None and known_bug([TOPK]).repair == "topk_empty"  # type: ignore[union-attr]
    assert known_bug(["ValueError: Tried to access token index 23, but that token was provided via prompt_embeds, "
                      "and its ID is unknown."]).repair == "embeds_backup"  # type: ignore[union-attr]
    assert known_bug(["RuntimeError: index 4096 is out of bounds"]) is None
