"""Knob-conditional faults: a fault that fires only under one engine setting.

Triage (``observatory triage``) must name the engine knob a failure depends
on; to show it does on the real engine, these faults break speculative
decoding only when one knob has one value, the way field bugs did (a
divergence only with k >= 2, only with prefix caching on, only when the batch
holds more than one request). Each is the ``ghost`` fault (see
`observatory.faults`) gated by a condition read from the scheduler, once per
engine step:

``ghost_k2``
    only when ``num_speculative_tokens >= 2`` (so ``k = 1`` flips it);
``ghost_prefix``
    only when prefix caching is on (``--enable-prefix-caching``);
``ghost_batch``
    only in a step that schedules more than one request (``--max-num-seqs 1``
    or requests sent one at a time flip it).

Pure functions of plain attributes: tested without vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# name -> (the fault it turns into when its condition holds, the condition in words)
CONDITIONAL: dict[str, tuple[str, str]] = {
    "ghost_k2": ("ghost", "num_speculative_tokens >= 2"),
    "ghost_prefix": ("ghost", "prefix caching on"),
    "ghost_batch": ("ghost", "a step schedules more than one request"),
}


def _k_at_least_2(scheduler: Any, _step: Any) -> bool:
    return int(getattr(scheduler, "num_spec_tokens", 0) or 0) >= 2


def _prefix_caching(scheduler: Any, _step: Any) -> bool:
    cache = getattr(scheduler, "cache_config", None)
    return bool(getattr(cache, "enable_prefix_caching", False))


def _batched(_scheduler: Any, step: Any) -> bool:
    return len(getattr(step, "num_scheduled_tokens", None) or {}) > 1


_CONDITIONS: dict[str, Callable[[Any, Any], bool]] = {
    "ghost_k2": _k_at_least_2,
    "ghost_prefix": _prefix_caching,
    "ghost_batch": _batched,
}


def step_faults(faults: frozenset[str], scheduler: Any, scheduler_output: Any) -> frozenset[str]:
    """The plain faults in force for one step: conditional ones become their base fault when their condition holds."""
    out = {f for f in faults if f not in CONDITIONAL}
    for name in faults & CONDITIONAL.keys():
        if _CONDITIONS[name](scheduler, scheduler_output):
            out.add(CONDITIONAL[name][0])
    return frozenset(out)


def tracks_ghost(faults: frozenset[str]) -> bool:
    """Whether the ghost bookkeeping (each request's last emitted token) must run every step."""
    return "ghost" in faults or any(CONDITIONAL[f][0] == "ghost" for f in faults & CONDITIONAL.keys())
