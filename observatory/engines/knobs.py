"""Engine knobs triage may turn, declared as data per engine.

A knob is one engine setting a failure may depend on (DESIGN.md field
reports: a divergence only with CUDA graphs on and a query length >= 3; tool
calls broken only with prefix caching plus MTP). Each engine's adapter
declares its knobs as `Knob` rows in ``triage_knobs`` (vLLM's:
`observatory.engines.vllm.KNOBS`): a name, how a value is passed to the engine
(``how``), the values worth trying, and the platforms it exists on. Adding a
knob is adding a row there, not code. A knob the hardware lacks is reported as
not applicable, with the reason, never silently skipped.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from observatory.engines.adapter import adapter_for
from observatory.engines.arm_engines import engine_adapters
from observatory.engines.settings import EngineSettings
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError


@dataclass(frozen=True)
class Knob:
    """One engine setting triage may change, and how to pass it to the engine."""

    name: str
    description: str
    # "spec:KEY" (speculative config key), "bool:FLAG" (--FLAG / --no-FLAG),
    # "flag:FLAG" (present when true), "arg:FLAG" (FLAG VALUE)
    how: str
    # values to try; "lower" = every k below the arm's, down to 1, and up to the deployed k where that is higher
    # (issue 49 item 5: corruption at one depth only must be found between 1 and the k a deployment runs)
    values: tuple[Any, ...] | str = ()
    # platforms where the engine has it ("cpu", "cuda"); why not elsewhere
    platforms: tuple[str, ...] = ("cpu", "cuda")
    why_not: str = ""
    # the EngineSettings field that holds the session's value, if any
    setting: str | None = None
    # the engine's own value when nothing sets the knob (None: not known here)
    default: Any = None


def knobs_for(engine: str) -> list[Knob]:
    """The knobs ENGINE declares (its adapter's `triage_knobs`, in the order triage tries them)."""
    try:
        knobs = list(getattr(adapter_for(engine), "triage_knobs", ()))
    except ObservatoryError:  # not an engine at all: no knobs either
        knobs = []
    if not knobs:
        known = sorted(name for name, a in engine_adapters().items() if getattr(a, "triage_knobs", ()))
        raise ObservatoryError(f"No knobs are declared for engine {engine!r}; triage knows: {', '.join(known)}.")
    return knobs


def platform_of(gpu_count: int) -> set[str]:
    """The platform tags a machine with GPU_COUNT GPUs offers."""
    if gpu_count == 0:
        return {"cpu"}
    return {"cuda", "cuda-multi"} if gpu_count > 1 else {"cuda"}


def current_value(knob: Knob, arm: Arm, settings: EngineSettings) -> Any:
    """The value the session ran KNOB with: a flag passed (the last wins, as the engine reads its
    command line), else the session's setting, else the engine's own default (None when not known)."""
    kind, _, key = knob.how.partition(":")
    if kind == "spec":
        return (arm.speculative_config or {}).get(key)
    args = list(settings.extra_args) + list(arm.engine_args)  # after the settings' flags on the command line
    for i in range(len(args) - 1, -1, -1):
        a = args[i]
        if kind == "flag" and a == key:
            return True
        if kind == "bool" and a in (f"--{key}", f"--no-{key}"):
            return a == f"--{key}"
        if kind == "arg" and (a == key or a.startswith(key + "=")):
            raw = a.partition("=")[2] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
            return int(raw) if raw.isdigit() else raw
    if knob.setting is not None:
        value = getattr(settings, knob.setting)
        if value is None and knob.setting == "dtype":
            return model_dtype(settings.model)
        if value is not None:
            return value
    return knob.default


def model_dtype(model: str) -> str | None:
    """The dtype a local model folder declares (config.json torch_dtype), None when not readable."""
    try:
        value = json.loads((Path(model) / "config.json").read_text()).get("torch_dtype")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def candidate_values(knob: Knob, arm: Arm, settings: EngineSettings, deployed_k: int | None = None) -> list[Any]:
    """The values worth trying for KNOB on ARM: its declared values minus the one the session ran; for a "lower"
    knob (k), every k from the arm's down to 1, then up to DEPLOYED_K (the deployment's) where that is higher."""
    now = current_value(knob, arm, settings)
    if knob.values == "lower":
        if not isinstance(now, int):
            return []
        return list(range(now - 1, 0, -1)) + list(range(now + 1, (deployed_k or 0) + 1))
    return [v for v in knob.values if v != now]


def not_applicable(knob: Knob, arm: Arm, settings: EngineSettings, platforms: set[str],
                   deployed_k: int | None = None) -> str | None:
    """Why KNOB cannot be tried here (None when it can)."""
    if not platforms & set(knob.platforms):
        return knob.why_not or f"not on this hardware ({', '.join(sorted(platforms))})"
    if knob.how.startswith("spec:") and arm.speculative_config is None:
        return "the arm does not speculate"
    if not candidate_values(knob, arm, settings, deployed_k):
        return "no other value to try (k is already 1)" if knob.values == "lower" else "no other value to try"
    return None


def apply_change(arm: Arm, settings: EngineSettings, change: dict[str, Any], engine: str = "vllm") -> tuple[Arm, EngineSettings]:
    """ARM and SETTINGS with CHANGE ({knob: value}) applied; the originals are untouched."""
    by_name = {k.name: k for k in knobs_for(engine)}
    arm = dataclasses.replace(arm, speculative_config=dict(arm.speculative_config) if arm.speculative_config else None,
                              engine_args=list(arm.engine_args))
    settings = dataclasses.replace(settings, extra_args=list(settings.extra_args))
    for name, value in change.items():
        knob = by_name.get(name)
        if knob is None:
            raise ObservatoryError(f"Unknown knob {name!r}; known knobs: {', '.join(by_name)}.")
        kind, _, key = knob.how.partition(":")
        if knob.setting is not None:
            settings = dataclasses.replace(settings, **{knob.setting: value})
        if kind == "spec":
            if arm.speculative_config is None:
                raise ObservatoryError(f"Knob {name} needs a speculating arm; {arm.name} does not speculate.")
            arm.speculative_config[key] = value
        elif kind == "bool":
            arm.engine_args.append(f"--{key}" if value else f"--no-{key}")
        elif kind == "flag":
            if value:
                arm.engine_args.append(key)
        elif kind == "arg":
            if knob.setting is None:  # a setting-backed arg (dtype) is passed by the adapter's server_argv itself
                arm.engine_args += [key, str(value)]
        else:  # pragma: no cover - a malformed triage_knobs row
            raise ObservatoryError(f"Knob {name}: unknown kind {kind!r} in {knob.how!r}.")
    return arm, settings
