"""The session's arms with every registered engine's presets: `observatory.model.arms` parses, the adapters say
which engines have arms of their own (``ENGINE:NAME``, `EngineAdapter.arm_presets`) and what they are.

`parse_arms` and `load_arms_file` are the model's, given `arm_engines`; `env_vars` collects the OBSERVATORY_*
variables the engines' arms read, for `observatory --help`. Which engine a planned arm runs on (`arm_engine`), what
--engine may name (`check_session_engine`) and what the session's engines need from the host (`host_env`) are
answered here, so nothing above engines/ compares an engine with the default one.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from observatory.engines.adapter import EngineAdapter, adapter_for, adapters, plugins
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


def arm_engine(arm: Arm, session_engine: str) -> str:
    """The engine ARM runs on: its own (an ``ENGINE:NAME`` arm's), else the session's --engine SESSION_ENGINE (what
    an unprefixed URL arm's server is; the default engine launches the unprefixed arms, `check_session_engine`)."""
    return arm.engine if arm.engine != DEFAULT_ENGINE else session_engine


def check_session_engine(session_engine: str, arms: list[Arm]) -> None:
    """--engine names what the unprefixed URL arms serve: an unprefixed arm the observatory launches runs on the
    default engine, so any other --engine needs every arm to have a URL (ObservatoryError otherwise)."""
    if session_engine.lower() != DEFAULT_ENGINE and any(a.url is None for a in arms):
        raise ObservatoryError(
            f"--engine {session_engine}: the observatory launches only vLLM; give every arm a URL "
            "(NAME=http://...) of a server you started."
        )


def host_env(engines: list[str], n_gpus: int) -> dict[str, str]:
    """The environment the arms of ENGINES need on a host with N_GPUS GPUs (each adapter's ``host_env``)."""
    env: dict[str, str] = {}
    for name in dict.fromkeys(engines):
        env.update(adapter_for(name).host_env(n_gpus))
    return env


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
