"""Engine settings that make speculative decoding lossy by configuration (issue 28 item 6).

Speculative decoding is lossless only while the target verifies every draft
token exactly. Some engines ship settings that switch that off or loosen it
(synthetic acceptance for benchmarking, relaxed acceptance thresholds,
simulated accepted lengths). An arm launched with one of them measures the
speed and acceptance of another algorithm: `lossy_settings` names each such
setting with its value, and `observatory.judge.figures.validity` turns every
finding into the INVALID-level validity code LOSSY.

`LOSSY_KNOBS` is the table, as data: per engine, how the setting is passed
(``flag``: a command-line flag; ``env``: an environment variable;
``spec``: a key of the speculative config), the condition that makes it
lossy, and the source read. docs/design.md section 3.4 ("Lossy by
configuration") lists the same rows and the settings read and judged
lossless (llama.cpp's ``--draft-p-min``, vLLM's block verification, ...).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from observatory.engines.argv_flags import flag_pairs
from observatory.engines.images import split_docker_argv
from observatory.model.arms import DEFAULT_ENGINE

__all__ = ["LOSSY_KNOBS", "REPORTED_ARGS", "LossyKnob", "lossy_settings"]


def _float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _below_one(value: Any) -> bool:
    """SGLang's acceptance thresholds: 1.0 (the default) is exact verification; lower accepts more."""
    v = _float(value)
    return v is None or v < 1.0


def _positive(value: Any) -> bool:
    """SGLANG_SIMULATE_ACC_LEN: the default -1 (and any value <= 0) leaves verification alone."""
    v = _float(value)
    return v is None or v > 0


def _synthetic(value: Any) -> bool:
    return str(value).strip().strip("'\"").lower() == "synthetic"


def _set(value: Any) -> bool:
    return value is not None and value != "" and str(value).lower() not in ("none", "null")


@dataclass(frozen=True)
class LossyKnob:
    """One engine setting that loosens verification, and when it does."""
    engine: str  # as a stored arm's ``engine`` names it
    how: str  # "flag", "env" or "spec" (a key of the speculative config)
    name: str  # the flag (with its dashes), the variable, or the key
    lossy: Callable[[Any], bool]  # the value (a string from argv or env) -> lossy?
    condition: str  # the condition, in words
    source: str  # where the engine defines and uses it

    def describe(self, value: Any) -> str:
        where = {"flag": "flag", "env": "environment", "spec": "speculative config"}[self.how]
        return f"{self.name}={value!r} ({where}; lossy when {self.condition}; {self.source})"


_SGL = "sgl-project/sglang"
_VLLM = "vllm 0.32.0 vllm/config/speculative.py, vllm/v1/sample/rejection_sampler.py"

LOSSY_KNOBS: tuple[LossyKnob, ...] = (
    LossyKnob("vllm", "spec", "rejection_sample_method", _synthetic, "'synthetic' (accepts drafts with a "
              "preset probability, whatever the target says, greedy requests included)", _VLLM),
    LossyKnob("vllm", "spec", "synthetic_acceptance_rates", _set, "set (preset acceptance rates)", _VLLM),
    LossyKnob("vllm", "spec", "synthetic_acceptance_length", _set, "set (preset mean acceptance length)", _VLLM),
    LossyKnob("sglang", "flag", "--speculative-accept-threshold-single", _below_one,
              "< 1.0 (a draft token whose target probability reaches it is accepted; sampled requests)",
              f"{_SGL} python/sglang/srt/server_args.py @469c63e5"),
    LossyKnob("sglang", "flag", "--speculative-accept-threshold-acc", _below_one,
              "< 1.0 (acceptance probability raised from p to min(1, p / threshold); sampled requests)",
              f"{_SGL} python/sglang/srt/server_args.py @469c63e5"),
    LossyKnob("sglang", "env", "SGLANG_SIMULATE_ACC_LEN", _positive, "> 0 (the accepted length is drawn "
              "around it and the accepted ids overwritten, greedy requests included)",
              f"{_SGL} python/sglang/srt/environ.py @21ff4b08, speculative verify (_generate_simulated_accept_index)"),
)

# the flags' names as a server reports its arguments (SGLang's /get_server_info: --a-b is a_b)
REPORTED_ARGS: tuple[str, ...] = tuple(k.name.lstrip("-").replace("-", "_") for k in LOSSY_KNOBS if k.how == "flag")


def _argv_settings(argv: list[str]) -> tuple[dict[str, str], dict[str, str], dict[str, Any]]:
    """(flags, docker -e variables, speculative config from --speculative-config) of a command line."""
    docker, _image, args = split_docker_argv([str(a) for a in argv])
    env: dict[str, str] = {}
    for i, tok in enumerate(docker):
        val = None
        if tok in ("-e", "--env") and i + 1 < len(docker):
            val = docker[i + 1]
        elif tok.startswith("--env="):
            val = tok[len("--env="):]
        if val and "=" in val:
            k, _, v = val.partition("=")
            env[k] = v
    flags: dict[str, str] = {}
    spec: dict[str, Any] = {}
    for key, given in flag_pairs(args):  # the one argv reader (observatory.engines.argv_flags)
        val = "true" if given is None else given
        norm = key.replace("_", "-")
        if norm in ("--speculative-config", "-sc"):
            try:
                parsed = json.loads(val)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                spec.update(parsed)
        elif norm.startswith("--speculative-config."):  # vLLM's dotted form
            spec[key.split(".", 1)[1]] = val
        else:
            flags[norm] = val
    return flags, env, spec


def lossy_settings(engine: str | None, launch: Mapping[str, Any]) -> list[str]:
    """Each setting of LAUNCH that makes ENGINE's speculation lossy, described: its argv, env and
    speculative_config, and the arguments its server reported (``served.server_args``, URL arms). ENGINE None: the
    default engine (as `observatory.engines.adapter.adapter_for` reads it)."""
    engine = DEFAULT_ENGINE if engine is None else engine
    flags, env, spec = _argv_settings(list(launch.get("argv") or []))
    env.update({str(k): str(v) for k, v in (launch.get("env") or {}).items()})
    reported = (launch.get("served") or {}).get("server_args") or {}
    flags.update({"--" + str(k).replace("_", "-"): v for k, v in reported.items()})  # what the server says
    declared = launch.get("speculative_config")
    if isinstance(declared, Mapping):
        spec.update(declared)
    found = []
    for knob in LOSSY_KNOBS:
        if knob.engine != engine:
            continue
        table: Mapping[str, Any] = {"flag": flags, "env": env, "spec": spec}[knob.how]
        if knob.name in table and knob.lossy(table[knob.name]):
            found.append(knob.describe(table[knob.name]))
    return found
