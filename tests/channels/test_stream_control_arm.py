"""The chunked-stream control arm (issue 49 item 3): ``base+stream_interval=N``, added by the channel that needs it."""

from __future__ import annotations

import pytest

from observatory.channels import resolve, with_controls
from observatory.channels.stream_fields import control_arms
from observatory.engines.arm_engines import parse_arms
from observatory.engines.settings import EngineSettings
from observatory.engines.vllm import engine_args
from observatory.judge.figures import _allowed_per_chunk, launch_differences
from observatory.model.arms import Arm
from observatory.model.errors import ArmError
from observatory.model.roles import assign_roles
from observatory.model.vocabulary import VARIANT
from observatory.store.db import ArmRow


def test_stream_interval_option_makes_a_launched_base_stream_in_chunks() -> None:
    """+stream_interval=N on a base arm: vLLM's --stream-interval N; refused on spec, URL or bad values."""
    arm = parse_arms("base+stream_interval=3")[0]
    assert arm.name == "base+stream_interval=3" and arm.stream_interval == 3 and not arm.is_spec
    args = engine_args(arm, EngineSettings(model="m"), 8000)
    assert args[args.index("--stream-interval") + 1] == "3"
    for bad in ("mtp1+stream_interval=3", "base+stream_interval=1", "base+stream_interval=x",
                "base+stream_interval=99"):
        with pytest.raises(ArmError, match="stream_interval"):
            parse_arms(bad)


def _controls(arms: list[Arm]) -> list[Arm]:
    """stream_fields' control arms for ARMS, their roles planned as the session plans them."""
    return control_arms(arms, assign_roles(arms))


def test_the_channel_adds_one_control_of_the_largest_k_plus_one() -> None:
    """stream_fields' control: base once more, chunks of the session's largest k + 1, role variant; none without
    speculation, none where the session names one, none for a URL base."""
    arms = parse_arms("base,mtp1,mtp2")
    added = _controls(arms)
    assert [a.name for a in added] == ["base+stream_interval=3"] and added[0].copy_of is None
    full = with_controls(resolve("nightly"), arms, assign_roles(arms))
    assert [a.name for a in full] == ["base", "mtp1", "mtp2", "base+stream_interval=3"]
    assert assign_roles(full)["base+stream_interval=3"] == VARIANT
    assert _controls(parse_arms("base,base")) == []
    assert _controls(parse_arms("base,mtp1,base+stream_interval=2")) == []
    assert _controls(parse_arms("base=http://127.0.0.1:9,mtp1")) == []
    assert [a.name for a in with_controls(resolve("quick"), arms, assign_roles(arms))] == ["base", "mtp1", "mtp2"]


def _row(name: str, argv: list[str], interval: int | None = None, spec: bool = False) -> ArmRow:
    return ArmRow(name=name, launch={"argv": argv, "env": {}, "stream_interval": interval,
                                     "speculative_config": {"num_speculative_tokens": 2} if spec else None})


def test_the_control_interval_is_its_treatment_not_a_confound() -> None:
    """The control differs from base by its --stream-interval only: not CONFOUNDED; the same flag on an arm that
    does not declare it is; its chunks may carry N tokens (the burst rule reads it)."""
    base = _row("base", ["python", "--model", "m"])
    control = _row("base+stream_interval=3", ["python", "--model", "m", "--stream-interval", "3"], interval=3)
    assert launch_differences(control, base) == []
    sneaky = _row("base2", ["python", "--model", "m", "--stream-interval", "3"])
    assert launch_differences(sneaky, base) == ["--stream-interval: absent on base, '3' here"]
    assert _allowed_per_chunk(control) == 3 and _allowed_per_chunk(base) == 1
    assert _allowed_per_chunk(_row("mtp2", [], spec=True)) == 3
