"""`compare --resume` runs from a versioned, typed plan (issue 14 item 7), against STUB servers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.model.errors import ObservatoryError
from observatory.session.options import PLAN_VERSION, SessionPlan
from observatory.store.db import SessionRow
from observatory.store.session_store import Store
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import compare_ok, interrupt_arm, tiny_suite


def test_the_plan_is_stored_typed_and_versioned(tmp_path: Path) -> None:
    """Issue 14 item 7: the stored plan is {"version": 1, ...} with typed fields, not the raw kwargs."""
    with StubServer("ok") as base:
        db, _ = compare_ok(tmp_path, base.url, "--concurrency", "1,2", "--engine-arg=--enforce-eager")
    with Store(db) as store:
        plan = store.session(1).options["plan"]
    assert plan["version"] == PLAN_VERSION
    assert plan["diffs"] is False and "no_diffs" not in plan and "api_key" not in plan
    assert plan["concurrency"] == "1,2" and plan["engine_args"] == ["--enforce-eager"]
    assert SessionPlan.from_stored(plan, 1).engine_args == ("--enforce-eager",)


def test_resume_from_a_v1_plan(tmp_path: Path) -> None:
    """Issue 14 item 7: --resume reruns the missing arm from the stored plan; a flag equal to it is accepted."""
    with StubServer("ok") as base:
        db, _ = compare_ok(tmp_path, base.url)
        interrupt_arm(db)
        before = base.completions
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet", "--concurrency", "1"])
        assert r.exit_code == 0, r.output
        assert base.completions > before
    with Store(db) as store:
        assert [a.status for a in store.arms(1)] == ["ok"] and store.session(1).status == "complete"


@pytest.mark.parametrize(
    ("flag", "message"),
    [(["--concurrency", "4"], "--concurrency conflicts with session 1's stored plan: concurrency '4' given, "
                              "'1' stored. Drop --concurrency to resume it, or start a new session."),
     (["--engine-arg=--enforce-eager"], "--engine-arg conflicts with session 1's stored plan: engine_args "
                                        "['--enforce-eager'] given, [] stored."),
     (["--no-diffs"], None)],
    ids=["valued-option", "repeatable-option", "same-as-stored"],
)
def test_resume_refuses_a_conflicting_flag(tmp_path: Path, flag: list[str], message: str | None) -> None:
    """Issue 14 item 7: a flag given with --resume that differs from the stored plan is refused in one line
    naming the flag and both values (it was silently ignored); one that agrees is accepted."""
    with StubServer("ok") as base:
        db, _ = compare_ok(tmp_path, base.url)
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet", *flag])
    if message is None:
        assert r.exit_code == 0, r.output
        return
    assert r.exit_code == 3, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1


def _legacy_plan(tmp_path: Path, url: str) -> dict[str, Any]:
    """The raw plan_compare keyword arguments, as sessions stored them before plans had versions."""
    return {"arms": f"base={url}", "arms_file": None, "speculative_config": None, "model": None,
            "suite": tiny_suite(tmp_path), "engine_python": None, "dtype": None, "max_model_len": None, "seed": 0,
            "engine_args": [], "spec_extra": None, "concurrency": "1", "repeat": 1, "health_timeout": 900.0,
            "request_timeout": 300.0, "log_dir": "logs", "image": None, "gpus_per_arm": 1,
            "parallel_arms": False, "timing": "sequential", "engine": "vllm", "fail_on": None, "diffs": False,
            "gates_dirs": []}


def _store_plan(db: str, plan: dict[str, Any]) -> None:
    with Store(db) as store:
        options = dict(store.session(1).options)
        store.update(SessionRow, 1, options={**options, "plan": plan})


def test_an_old_raw_kwargs_plan_still_resumes(tmp_path: Path) -> None:
    """Issue 14 item 7: a session stored before plans had versions resumes from its raw keyword arguments."""
    with StubServer("ok") as base:
        db, _ = compare_ok(tmp_path, base.url)
        _store_plan(db, _legacy_plan(tmp_path, base.url))
        interrupt_arm(db)
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet"])
        assert r.exit_code == 0, r.output
    with Store(db) as store:
        assert [a.status for a in store.arms(1)] == ["ok"]
        assert store.session(1).options["plan"]["version"] == PLAN_VERSION  # stored anew, typed


@pytest.mark.parametrize(
    ("change", "message"),
    [({"renamed_option": 3}, "options this version does not know (renamed_option)"),
     ({"repeat": "3"}, "repeat = '3', not a <class 'int'>"),
     ({"version": 2}, "planned by a newer observatory (plan version 2")],
    ids=["unknown-key", "wrong-type", "newer-version"],
)
def test_a_plan_that_cannot_be_read_is_refused_clearly(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    """Issue 14 item 7: a stored plan with an option this version does not know, a value of the wrong type,
    or a newer version is refused with one line saying so (never replayed blindly)."""
    plan = {**_legacy_plan(tmp_path, "http://127.0.0.1:9"), **change}
    with pytest.raises(ObservatoryError, match="cannot be resumed|upgrade observatory") as e:
        SessionPlan.from_stored(plan, 7)
    assert message in str(e.value) and "Session 7" in str(e.value)


def test_verdicts_are_stored_after_every_wave(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14 item 5: the command judges (the runner no longer imports evaluate), still after every wave:
    when the second arm starts, the first one's verdicts are in the database."""
    from observatory.session.runner import Runner

    seen: list[int] = []
    run_wave = Runner._run_wave

    def watched(self: Runner, session_id: int, wave: int, todo: Any) -> None:
        seen.append(sum(len(self.store.verdicts(a.id)) for a in self.store.arms(session_id)))
        run_wave(self, session_id, wave, todo)

    monkeypatch.setattr(Runner, "_run_wave", watched)
    with StubServer("ok") as base, StubServer("ok") as spec:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={base.url},mtp1={spec.url}", "--suite",
                                     tiny_suite(tmp_path), "--db", str(tmp_path / "w.db"), "--no-diffs", "--quiet"])
    assert r.exit_code == 2, r.output  # compare exits as gate does: a stub spec arm speculates nothing, INVALID
    assert seen[0] == 0 and seen[1] > 0


def test_a_masked_engine_arg_key_must_be_given_again_to_resume(tmp_path: Path) -> None:
    """Issue 32 item 1: an --engine-arg key is stored masked, so --resume needs it again: refused with one
    line without it (never launched as '***'), resumed with it."""
    key = "sk-resume-engarg-41d0"
    with StubServer("ok") as base:
        db, _ = compare_ok(tmp_path, base.url, f"--engine-arg=--api-key={key}")
        with Store(db) as store:
            assert store.session(1).options["plan"]["engine_args"] == ["--api-key=***"]
        interrupt_arm(db)
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet"])
        assert r.exit_code == 3 and "give the same --engine-arg flags again" in r.output, r.output
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet",
                                     f"--engine-arg=--api-key={key}"])
        assert r.exit_code == 0, r.output
    with Store(db) as store:
        assert [a.status for a in store.arms(1)] == ["ok"]
    assert key.encode() not in Path(db).read_bytes()
