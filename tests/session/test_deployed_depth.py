"""The depth a deployment runs (issue 49 item 5): --deployed-spec read as JSON or a launch command line, the arm
that runs exactly it (marked, or added like the session's spec arms), the depths a session states it covered,
and triage's k sweep up to the deployed k. No engine: cheap."""

from __future__ import annotations

import json

import pytest

from observatory.engines.knobs import candidate_values, knobs_for, not_applicable
from observatory.engines.settings import EngineSettings
from observatory.engines.vllm import VLLMAdapter
from observatory.model.arms import Arm, depth_coverage, parse_arms
from observatory.model.errors import ArmError
from observatory.model.read_model import Depths
from observatory.session.depths import deployed_config, deployed_depth, with_deployed_arm
from observatory.session.options import SessionPlan
from observatory.session.plan import plan_compare

K3 = {"method": "mtp", "num_speculative_tokens": 3}


def test_deployed_config_from_json_or_a_launch_line() -> None:
    assert deployed_config(json.dumps(K3), "vllm") == K3
    line = "vllm serve /models/m --port 8000 --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 3}'"
    assert deployed_config(line, "vllm") == K3
    dotted = "python -m vllm.entrypoints.openai.api_server --model m --speculative-config.method mtp " \
             "--speculative-config.num_speculative_tokens 3"
    assert deployed_config(dotted, "vllm") == K3
    with pytest.raises(ArmError, match="no speculative config found"):
        deployed_config("vllm serve m --port 8000", "vllm")
    with pytest.raises(ArmError, match="positive integer"):
        deployed_config('{"method": "mtp", "num_speculative_tokens": 0}', "vllm")


def test_an_arm_that_runs_it_is_marked() -> None:
    arms = parse_arms("base,mtp1,mtp3")
    out, note = with_deployed_arm(arms, K3)
    assert [a.name for a in out] == ["base", "mtp1", "mtp3"] and out[2].deployed and note and "mtp3" in note


def test_an_arm_is_added_like_the_sessions_spec_arm() -> None:
    """The nightly given k = 3 with arms at k = 1 and 2 runs an arm at exactly k = 3, faults and repairs alike."""
    arms = parse_arms("base,mtp1+repair=cpu_expand+fault=depth_only,mtp2+repair=cpu_expand")
    out, note = with_deployed_arm(arms, K3)
    added = out[3]
    assert added.name == "mtp3+repair=cpu_expand+fault=depth_only" and added.deployed
    assert added.speculative_config == K3 and added.fault == "depth_only"
    assert added.env == arms[1].env and note and "added" in note
    odd = {**K3, "disable_padded_drafter_batch": True}
    out, _ = with_deployed_arm(parse_arms("base,mtp1"), odd)
    assert out[-1].name == "deployed" and out[-1].speculative_config == odd
    assert with_deployed_arm(parse_arms("base,mtp1"), None) == (parse_arms("base,mtp1"), None)


def test_the_plan_runs_the_deployed_arm(tmp_path: pytest.TempPathFactory) -> None:
    plan = SessionPlan(arms="base,mtp1,mtp2", deployed_spec=json.dumps(K3), engine_python="/work/main/.venv/bin/python")
    try:
        opts = plan_compare(plan)
    except Exception as e:  # pragma: no cover - an environment without the engine
        pytest.skip(f"cannot plan here: {e}")
    assert [a.name for a in opts.arms] == ["base", "mtp1", "mtp2", "mtp3"] and opts.arms[-1].deployed
    assert opts.depth_note and "k = 3" in opts.depth_note


def test_two_deployed_arms_are_refused() -> None:
    a, b = Arm("x", K3, deployed=True), Arm("y", {**K3, "num_speculative_tokens": 2}, deployed=True)
    with pytest.raises(ArmError, match="one speculation config"):
        with_deployed_arm([a, b], None)


def test_coverage_states_the_depths_and_the_deployed_one() -> None:
    arms = [{"name": "mtp1", "status": "ok", "speculative_config": {"num_speculative_tokens": 1}},
            {"name": "mtp2", "status": "crashed", "speculative_config": {"num_speculative_tokens": 2}},
            {"name": "mtp3", "status": "ok", "deployed": True, "speculative_config": K3}]
    got = depth_coverage(arms)
    assert got["planned"] == [1, 2, 3] and got["covered"] == [1, 3] and got["deployed_k"] == 3
    line = Depths((1, 2, 3), (1, 3), 3, "mtp3", True).summary()
    assert "k = 1, 3" in line and "not measured to the end: k = 2" in line and "deployed k = 3 (arm mtp3" in line
    unknown = Depths((1, 2), (1, 2), None, None, None).summary()
    assert "not known" in unknown and "--deployed-spec" in unknown


def test_triage_sweeps_k_up_to_the_deployed_one() -> None:
    knob = next(k for k in knobs_for("vllm") if k.name == "num_speculative_tokens")
    s = EngineSettings(model="m")
    arm = Arm("mtp2", {"method": "mtp", "num_speculative_tokens": 2})
    assert candidate_values(knob, arm, s) == [1]
    assert candidate_values(knob, arm, s, deployed_k=4) == [1, 3, 4]
    one = Arm("mtp1", {"method": "mtp", "num_speculative_tokens": 1})
    assert not_applicable(knob, one, s, {"cpu"}) is not None
    assert not_applicable(knob, one, s, {"cpu"}, deployed_k=3) is None
    assert candidate_values(knob, one, s, deployed_k=3) == [2, 3]
    assert deployed_depth({"deployed_spec": json.dumps(K3)}, "vllm") == 3
    assert deployed_depth({}, "vllm") is None and deployed_depth({"deployed_spec": "junk"}, "vllm") is None


def test_vllm_reads_its_own_launch_lines() -> None:
    a = VLLMAdapter()
    assert a.spec_from_argv(["vllm", "serve", "m", "--speculative-config=" + json.dumps(K3)]) == K3
    assert a.spec_from_argv(["vllm", "serve", "m", "--speculative_config", json.dumps(K3)]) == K3
    assert a.spec_from_argv(["vllm", "serve", "m", "--speculative-config", "not json"]) is None
