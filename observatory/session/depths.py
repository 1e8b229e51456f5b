"""The speculation depth a deployment runs: its config, the arm that runs exactly it, and the depths covered.

Corruption can live at one depth only (SGLang #32038: only k equal to the
drafter's block size; llama.cpp #23302: k >= 3), so a nightly of k = 1 and 2
says nothing about a deployment at k = 3. ``--deployed-spec`` takes the
production speculation config, as JSON (``'{"method": "mtp",
"num_speculative_tokens": 3}'``) or as the deployment's launch command line
(its engine's adapter reads the config out of it: `spec_from_argv`); an arms
file may mark its production arm ``deployed = true`` instead. The session
then always runs an arm with exactly that config (`with_deployed_arm`): the
arm of ``--arms`` whose config it is, else one added, launched like the
session's first spec arm of the same method (its faults, repairs, flags and
image), named after the preset it is (``mtp3``) or ``deployed``, run after the
last spec arm. Every
session states the depths it covered (`observatory.model.arms.depth_coverage`, read by the report).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from typing import Any

from observatory.engines.adapter import adapter_for
from observatory.model.arms import Arm, check_speculative_config, parse_speculative_config, preset_config
from observatory.model.errors import ArmError

SOURCE_FLAG = "--deployed-spec"
DEPLOYED_NAME = "deployed"


def deployed_config(text: str, engine: str) -> dict[str, Any]:
    """The deployed speculative config in TEXT: a JSON object, or a launch command line ENGINE's adapter reads."""
    text = text.strip()
    if text.startswith("{"):
        return parse_speculative_config(text, SOURCE_FLAG)
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise ArmError(f"{SOURCE_FLAG}: neither a JSON object nor a command line ({e})") from None
    reader = getattr(adapter_for(engine), "spec_from_argv", None)
    found = reader(argv) if reader is not None else None
    if found is None:
        raise ArmError(f"{SOURCE_FLAG}: no speculative config found in the command line {text[:200]!r} "
                       f"(for {engine}: give it as JSON, e.g. '{{\"method\": \"mtp\", \"num_speculative_tokens\": 3}}')")
    return check_speculative_config(found, f"{SOURCE_FLAG} (from the command line)")


def _base_name(name: str) -> str:
    return name.split("#")[0].split("+")[0].split("@")[0]


def _suffix(name: str) -> str:
    """The options part of an arm name (``+repair=...+fault=...@IMAGE``), '' for none."""
    head = name.split("#")[0]
    cut = min((i for i in (head.find("+"), head.find("@")) if i >= 0), default=len(head))
    return head[cut:]


def with_deployed_arm(arms: list[Arm], deployed: dict[str, Any] | None) -> tuple[list[Arm], str | None]:
    """ARMS with the arm that runs exactly the deployed config marked (``Arm.deployed``), added when none does;
    and a line saying which (None when no deployed config is known). An arms-file arm marked deployed is the
    deployed config when DEPLOYED is None."""
    marked = [a for a in arms if a.deployed and a.copy_of is None]
    if len(marked) > 1:
        raise ArmError(f"arms {', '.join(a.name for a in marked)} are all marked deployed: one deployment runs one "
                       "speculation config")
    if deployed is None:
        if not marked:
            return arms, None
        return arms, f"deployed: arm {marked[0].name} (marked in the arms file), k = {marked[0].num_speculative_tokens}"
    for a in marked:
        if a.speculative_config != deployed:
            raise ArmError(f"{SOURCE_FLAG} {json.dumps(deployed)} differs from arm {a.name}, which the arms file "
                           "marks deployed; give one of them")
    same = [a for a in arms if a.copy_of is None and a.speculative_config == deployed]
    if same:
        same[0].deployed = True
        return arms, f"deployed: arm {same[0].name} runs the deployed config (k = {same[0].num_speculative_tokens})"
    specs = [a for a in arms if a.is_spec and a.copy_of is None]
    template = next((a for a in specs if (a.speculative_config or {}).get("method") == deployed.get("method")),
                    specs[0] if specs else None)
    preset = next((f"{m}{deployed.get('num_speculative_tokens')}" for m in ("mtp", "ngram")
                   if preset_config(f"{m}{deployed.get('num_speculative_tokens')}")[1] == deployed), None)
    if template is not None and template.url is not None:
        raise ArmError(f"{SOURCE_FLAG}: no arm runs {json.dumps(deployed)}, and the spec arms are servers the "
                       "observatory does not launch: add an arm that runs the deployed config")
    suffix = _suffix(template.name) if template is not None else ""
    name = f"{preset or DEPLOYED_NAME}{suffix}"
    if any(a.name == name for a in arms):
        name = f"{DEPLOYED_NAME}{suffix}"
    if template is not None:
        added = dataclasses.replace(copy.deepcopy(template), name=name, speculative_config=dict(deployed),
                                    copy_of=None, deployed=True, url=None)
    else:
        added = Arm(name=name, speculative_config=dict(deployed), deployed=True)
    at = arms.index(specs[-1]) + 1 if specs else len(arms)  # after the last spec arm: the depths in order
    out = [*arms[:at], added, *arms[at:]]
    like = f", launched like {template.name}" if template is not None else ""
    return out, f"deployed: arm {name} added to run the deployed config (k = {added.num_speculative_tokens}{like})"


def deployed_depth(stored_plan: dict[str, Any] | None, engine: str) -> int | None:
    """The deployed k a stored session plan names (``deployed_spec``), None when it names none or it is unreadable."""
    text = (stored_plan or {}).get("deployed_spec")
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        k = deployed_config(text, engine).get("num_speculative_tokens")
    except ArmError:
        return None
    return k if isinstance(k, int) and not isinstance(k, bool) else None
