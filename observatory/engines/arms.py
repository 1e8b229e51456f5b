"""The session's arms with every registered engine's presets: `observatory.model.arms` parses, the adapters say
which engines have arms of their own (``ENGINE:NAME``, `EngineAdapter.arm_presets`) and what they are.

`parse_arms` and `load_arms_file` are the model's, given `arm_engines`; `env_vars` collects the OBSERVATORY_*
variables the engines' arms read, for `observatory --help`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from observatory.engines.adapter import EngineAdapter, adapters, plugins
from observatory.model import arms as model_arms
from observatory.model.arms import DEFAULT_ENGINE, Arm
from observatory.model.errors import ObservatoryError


def engine_adapters() -> dict[str, EngineAdapter]:
    """Engine name -> its adapter, one per engine (an alias, e.g. ``llamacpp``, is the engine it names)."""
    out: dict[str, EngineAdapter] = {}
    for cls in adapters().values():
        adapter = cls()
        out.setdefault(adapter.name, adapter)
    return out


@cache
def arm_engines() -> dict[str, EngineAdapter]:
    """The engines whose arms are their own presets (``ENGINE:NAME``), by name."""
    return {name: a for name, a in sorted(engine_adapters().items())
            if name != DEFAULT_ENGINE and getattr(a, "arm_presets", None) is not None}


def engine_names() -> tuple[str, ...]:
    """The engines an arm may run on: the default one, then those with presets of their own."""
    return model_arms.engine_names(arm_engines())


def parse_arms(spec: str, arms_file: Path | str | None = None, speculative_config: str | None = None) -> list[Arm]:
    """The session's arms, in run order, from the --arms list (`observatory.model.arms.parse_arms`)."""
    return model_arms.parse_arms(spec, arms_file, speculative_config, arm_engines())


def load_arms_file(path: Path | str) -> dict[str, Arm]:
    """Named arms from a TOML file, loaded strictly (`observatory.model.arms.load_arms_file`)."""
    return model_arms.load_arms_file(path, arm_engines())


def _loadable() -> dict[str, EngineAdapter]:
    """Engine name -> adapter, in registration order, for help texts: an adapter that fails to load is left out
    (using it names the failure)."""
    found: dict[str, EngineAdapter] = {}
    for plugin in plugins():
        try:
            adapter = plugin.load()()
        except ObservatoryError:
            continue
        found.setdefault(adapter.name, adapter)
    return found


def env_vars() -> dict[str, str]:
    """The OBSERVATORY_* variables the engines' arms read (`EngineAdapter.env_vars`), name -> what it does, by
    engine name (for --help)."""
    return {k: v for _, a in sorted(_loadable().items()) for k, v in getattr(a, "env_vars", ())}


def listed_engines() -> str:
    """"vllm, sglang or llama.cpp": the registered engines, the built-ins first, as a help text names them."""
    names = list(_loadable())
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
