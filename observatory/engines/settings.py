"""What every arm of a session shares when it is launched, and an arm's speculative config under it."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from observatory.model.arms import NO_PARSER, Arm


@dataclass
class EngineSettings:
    """What every arm of a session shares: the arms may differ only in speculation."""

    model: str
    python: str = field(default_factory=lambda: os.environ.get("OBSERVATORY_ENGINE_PYTHON", sys.executable))
    dtype: str | None = None
    max_model_len: int | None = None
    seed: int = 0
    max_logprobs: int = 20
    tool_parser: str | None = "hermes"  # --tool-call-parser of every arm (None: no tool parser)
    reasoning_parser: str | None = None  # --reasoning-parser of every arm (None: none)
    # None: the engine's own default, as deployed (vLLM V1: on); True/False pass the flag
    prefix_caching: bool | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # merged into every speculative config (e.g. {"attention_backend": "TRITON_ATTN"})
    spec_extra: dict[str, Any] = field(default_factory=dict)
    health_timeout_s: float = 900.0
    image: str | None = None
    # what every arm must report for the session's channels (`observatory.channels.Channel.engine_features`):
    # each adapter turns the features it knows into its own launch flags (`feature_args`)
    features: tuple[str, ...] = ()



def speculative_config_for(arm: Arm, settings: EngineSettings) -> dict[str, Any] | None:
    """The arm's speculative config with the session-wide extras merged in."""
    if arm.speculative_config is None:
        return None
    return {**arm.speculative_config, **settings.spec_extra}


def arm_parsers(arm: Arm, settings: EngineSettings) -> tuple[str | None, str | None]:
    """(tool-call parser, reasoning parser) ARM launches with: its own (arms file) over the session's;
    "none" turns one off."""
    tool = arm.tool_parser or settings.tool_parser
    reasoning = arm.reasoning_parser or settings.reasoning_parser
    return (None if tool == NO_PARSER else tool), (None if reasoning == NO_PARSER else reasoning)
