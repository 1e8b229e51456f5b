"""An engine that dies under a channel's requests (issue 49 item 11): the arm's engine is restarted and the next
channels run on it (`ArmRun.restart`), the death kept with the engine log's own error lines; the judge's
engine_restart row names the known engine bug and its repair; selftest counts a shipped arm's restart apart as
that bug. No engine: the relaunch is a stand-in."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from observatory import channels
from observatory.commands.selftest import engine_bugs
from observatory.engines.server import EngineStartError
from observatory.judge.session import _Judge
from observatory.model.arms import Arm
from observatory.model.read_model import Reason
from observatory.model.vocabulary import FAIL, INVALID
from observatory.session.measure import MAX_RESTARTS, ArmCrashed, ArmRun, crash_lines
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
    monkeypatch.setattr(channels, "get", measure_of)


def test_the_engine_is_restarted_with_its_errors_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    _channels(monkeypatch, {"params"}, seen)
    fresh = SimpleNamespace(proc=_Proc(), client=_Client(), ready_s=3.0, log_path=Path("again.log"))
    run, store = _run(tmp_path, lambda arm, why: fresh, ["params", "teacher"])
    old = run.proc
    run.run_channels()
    assert run.live and run.client is fresh.client and old.stopped  # type: ignore[union-attr]
    assert [n for n, _ in seen] == ["params", "teacher"] and seen[1][1] is fresh.client
    restart = store.arms(store.session().id)[0].launch["restarts"][0]
    assert restart["restarted"] and restart["engine_errors"][-2:] == [TOPK, "EngineDeadError: EngineCore "
                                                                             "encountered an issue"]


def test_no_more_than_the_allowed_restarts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []
    names = [f"c{i}" for i in range(MAX_RESTARTS + 1)]
    _channels(monkeypatch, set(names), seen)
    run, _ = _run(tmp_path, lambda arm, why: SimpleNamespace(proc=_Proc(), client=_Client(), ready_s=1.0,
                                                             log_path=Path("x.log")), names)
    with pytest.raises(ArmCrashed):
        run.run_channels()

    def fail(arm: Arm, why: str) -> Any:
        raise EngineStartError("no room", "failed")
    (tmp_path / "b").mkdir()
    _channels(monkeypatch, {"params"}, seen)
    run, _ = _run(tmp_path / "b", fail, ["params", "teacher"])
    with pytest.raises(ArmCrashed):
        run.run_channels()


def test_the_restart_row_names_the_engines_error_and_its_known_bug() -> None:
    judge = SimpleNamespace(base=None, rows=[])
    arm = SimpleNamespace(id=2, launch={"restarts": [{"where": "channel params", "status": "crashed",
                                                      "reason": "HTTP 500", "restarted": True,
                                                      "engine_errors": crash_lines(LOG)}]})
    _Judge.restart_rows(judge, arm)  # type: ignore[arg-type]
    row = judge.rows[0]
    assert row.verdict == FAIL and row.gate == "engine_restart:1"
    assert "Expected reduction dim" in row.reason and "+repair=topk_empty" in row.reason
    judge.base = arm
    _Judge.restart_rows(judge, arm)  # type: ignore[arg-type]
    assert judge.rows[1].verdict == INVALID


def test_selftest_counts_a_restart_of_a_repaired_bug_apart() -> None:
    text = f"mtp1: engine_restart:1: the engine crashed during channel params (HTTP 500; the engine: {TOPK})"
    verdict = SimpleNamespace(reasons=(Reason("FAIL", text, arm="mtp1", gate="engine_restart:1"),))
    shipped = SimpleNamespace(name="mtp1", status="ok", figures=SimpleNamespace(performance=[]))
    repaired = SimpleNamespace(name="mtp1+repair=cpu_expand+repair=topk_empty", status="ok",
                               figures=SimpleNamespace(performance=[]))
    got = engine_bugs(shipped, repaired, verdict)  # type: ignore[arg-type]
    assert got["clean"] and [b["bug"] for b in got["engine_bugs"]] == ["topk_empty"]
    unrepaired = SimpleNamespace(name="mtp1+repair=cpu_expand", status="ok", figures=SimpleNamespace(performance=[]))
    assert engine_bugs(shipped, unrepaired, verdict)["unexplained"] == [text]  # type: ignore[arg-type]
