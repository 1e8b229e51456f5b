"""Launch commands, GPU assignment and the confound check, without GPUs (issues 2, 5, 6, 9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from observatory.engines.arm_engines import parse_arms
from observatory.engines.gpus import NO_MULTICAST_ENV, gpu_count, plan_waves
from observatory.engines.server import EngineSettings, engine_argv, engine_env
from observatory.judge.figures import cudagraph_gap, launch_differences
from observatory.model.errors import ObservatoryError
from observatory.store.db import ArmRow


def _argv(name: str, **kw: object) -> list[str]:
    (arm,) = parse_arms(name)
    return engine_argv(arm, EngineSettings(model="/m", python="/py", **kw), 8000)  # type: ignore[arg-type]


def test_direct_launch_command() -> None:
    argv = _argv("mtp2", spec_extra={"attention_backend": "TRITON_ATTN"})
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    i = argv.index("--speculative-config")
    assert json.loads(argv[i + 1]) == {"method": "mtp", "num_speculative_tokens": 2, "attention_backend": "TRITON_ATTN"}
    assert argv[argv.index("--tool-call-parser") + 1] == "hermes"
    assert not any("prefix-caching" in a for a in argv)  # the engine's default, as deployed (issue 15 item 1)
    assert "--speculative-config" not in _argv("base")


def test_docker_launch_command(tmp_path: Path) -> None:
    """Issue 6: --image starts each arm with docker run --gpus ... IMAGE <engine args>."""
    (arm,) = parse_arms("mtp1")
    settings = EngineSettings(model=str(tmp_path), image="vllm/vllm-openai:nightly")
    env = {**engine_env(arm, settings), "CUDA_VISIBLE_DEVICES": "2,3", **NO_MULTICAST_ENV}
    argv = engine_argv(arm, settings, 8123, env, [2, 3], "observatory-1-mtp1-8123")
    image = argv.index("vllm/vllm-openai:nightly")
    head, tail = argv[:image], argv[image + 1:]
    assert head[:2] == ["docker", "run"] and "--rm" in head and "--network=host" in head
    assert head[head.index("--gpus") + 1] == "device=2,3"
    assert head[head.index("--name") + 1] == "observatory-1-mtp1-8123"
    assert f"{tmp_path}:{tmp_path}:ro" in head
    assert "NCCL_NVLS_ENABLE=0" in head and not any(x.startswith("CUDA_VISIBLE_DEVICES") for x in head)
    assert tail[:2] == ["--model", str(tmp_path)] and "--port" in tail and "8123" in tail


def test_fault_goes_into_the_environment() -> None:
    (arm,) = parse_arms("mtp1+fault=ghost")
    assert engine_env(arm, EngineSettings(model="/m", env={"A": "1"})) == {"A": "1", "OBSERVATORY_FAULT": "ghost"}


@pytest.mark.parametrize(
    ("n_arms", "n_gpus", "per_arm", "parallel", "expected"),
    [
        (3, 0, 1, False, [[(0, None)], [(1, None)], [(2, None)]]),
        (3, 8, 1, False, [[(0, [0])], [(1, [0])], [(2, [0])]]),
        (3, 8, 1, True, [[(0, [0]), (1, [1]), (2, [2])]]),
        (3, 2, 1, True, [[(0, [0]), (1, [1])], [(2, [0])]]),
        (4, 4, 2, True, [[(0, [0, 1]), (1, [2, 3])], [(2, [0, 1]), (3, [2, 3])]]),
        (2, 8, 2, True, [[(0, [0, 1]), (1, [2, 3])]]),
    ],
    ids=["cpu", "sequential-gpu", "parallel-3-on-8", "parallel-waves", "tp2-waves", "tp2-one-wave"],
)
def test_gpu_waves(n_arms: int, n_gpus: int, per_arm: int, parallel: bool, expected: list) -> None:  # type: ignore[type-arg]
    """Issue 9: disjoint GPU sets per arm, as many arms at once as the host holds."""
    waves = plan_waves(n_arms, n_gpus, per_arm, parallel)
    assert waves == expected
    for wave in waves:
        used = [g for _, gs in wave for g in (gs or [])]
        assert len(used) == len(set(used))


@pytest.mark.parametrize(
    ("args", "message"),
    [((3, 0, 1, True), "needs GPUs"), ((3, 2, 4, True), "has 2 GPU"), ((3, 2, 0, False), "at least 1")],
    ids=["no-gpus", "too-many-per-arm", "zero"],
)
def test_gpu_plan_errors(args: tuple[int, int, int, bool], message: str) -> None:
    with pytest.raises(ObservatoryError, match=message):
        plan_waves(*args)


def test_fake_gpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVATORY_GPU_COUNT", "8")
    assert gpu_count() == 8


def _row(name: str, argv: list[str], env: dict[str, str] | None = None) -> ArmRow:
    return ArmRow(name=name, launch={"argv": argv, "env": env or {}})


def test_confounds_are_listed() -> None:
    """Issue 5: arms may differ only in speculation (docs/design.md mistake 7)."""
    base = _row("base", _argv("base"))
    same = _row("mtp1", _argv("mtp1"))
    assert launch_differences(same, base) == []
    eager = _row("mtp1", _argv("mtp1") + ["--enforce-eager"])
    assert launch_differences(eager, base) == ["--enforce-eager: absent on base, set here"]
    seqs = _row("mtp1", _argv("mtp1", extra_args=["--max-num-seqs", "8"]))
    assert launch_differences(seqs, base) == ["--max-num-seqs: absent on base, '8' here"]
    tp = _row("mtp1", _argv("mtp1", extra_args=["--tensor-parallel-size", "2"]))
    assert "--tensor-parallel-size" in launch_differences(tp, base)[0]
    env = _row("mtp1", _argv("mtp1"), {"VLLM_X": "1", "OBSERVATORY_FAULT": "ghost"})
    assert launch_differences(env, base) == ["env VLLM_X: absent on base, '1' here"]
    # a declared fault's own knob is the fault (the slow step at 3: a FAIL to judge, not a confound); the same
    # knob on an arm that does not declare that fault, or another fault's knob, is still a difference
    knob = {"OBSERVATORY_SLOW_STEP_FRACTION": "3"}
    slow = ArmRow(name="slow2", launch={"argv": _argv("mtp2"), "env": knob, "fault": "slow_step"})
    assert launch_differences(slow, base) == []
    other = ArmRow(name="x", launch={"argv": _argv("mtp2"), "env": knob, "fault": "draft_noise"})
    assert launch_differences(other, base) == ["env OBSERVATORY_SLOW_STEP_FRACTION: absent on base, '3' here"]
    assert launch_differences(_row("mtp2", _argv("mtp2"), knob), base) != []


def test_cudagraph_sizes_without_batch_one() -> None:
    """docs/design.md mistake 7: capture sizes [2,4,8,16] leave single-stream base runs uncaptured."""
    gap = cudagraph_gap(_row("base", _argv("base", extra_args=["--compilation-config", '{"cudagraph_capture_sizes": [2, 4, 8, 16]}'])))
    assert gap and "leave out batch size 1" in gap
    assert cudagraph_gap(_row("base", _argv("base", extra_args=["--cuda-graph-sizes", "1,2,4"]))) is None


def _acc(drafts: int) -> dict[str, int]:
    return {"drafts": drafts}


def test_validity_codes() -> None:
    """Issue 5: spec inactive and base speculating are INVALID; an extra flag is CONFOUNDED; few drafts LOW_N."""
    from observatory.judge.figures import validity

    base = ArmRow(name="base", status="ok", launch={"speculative_config": None, "argv": _argv("base"), "env": {}})
    spec = {"method": "mtp", "num_speculative_tokens": 1}
    quiet = ArmRow(name="mtp1", status="ok", launch={"speculative_config": spec, "argv": _argv("mtp1"), "env": {}})
    assert [v["code"] for v in validity(quiet, base, _acc(0), {})] == ["INVALID"]
    assert "speculation inactive" in validity(quiet, base, _acc(0), {})[0]["detail"]
    assert [v["code"] for v in validity(base, base, _acc(12), {})] == ["INVALID"]
    assert [v["code"] for v in validity(quiet, base, _acc(50), {})] == ["LOW_N"]
    extra = ArmRow(name="mtp1", status="ok",
                   launch={"speculative_config": spec, "argv": [*_argv("mtp1"), "--enforce-eager"], "env": {}})
    codes = validity(extra, base, _acc(500), {})
    assert [v["code"] for v in codes] == ["CONFOUNDED"] and "--enforce-eager" in codes[0]["detail"]
    assert validity(quiet, base, _acc(500), {}) == []
    same = validity(quiet, base, _acc(500), {"distinct_outputs": (
        "INVALID", "distinct_outputs failed: identical outputs for different prompts: the prompt did not take effect")})
    assert [v["code"] for v in same] == ["INVALID"] and "prompt did not take effect" in same[0]["detail"]
