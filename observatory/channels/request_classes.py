"""What a request is, attribute by attribute: the classes acceptance is broken down by (issue 48 item 3).

One function, `classes`, for every reader (the volume channel's breakdown,
the ``speculates`` channel's proof that each class speculates): from the
stored probe and its answer,

- ``prompt_tokens``: the prompt's length bucket (`BUCKETS`, from the answer's
  ``usage.prompt_tokens``; "unknown" where the engine gave none);
- ``prefix``: "warm" (a system prompt the engine's prefix cache already
  holds), "cold" (the same text behind a unique first line) or "none" (the
  volume channel's traffic says which; any other request is "none");
- ``category``: the probe's category;
- ``tools``: "yes" or "no";
- ``sampling``: "greedy" or "sampled" (temperature > 0);
- ``concurrency``: the requests in flight it was sent with ("1", "4", ...);
- ``turn``: its user turn in the conversation ("1", "2", ...).
"""

from __future__ import annotations

from typing import Any

from observatory.engines.metrics import SpecCounters
from observatory.model.probes import Probe
from observatory.store.stored import StoredResult

ATTRIBUTES = ("prompt_tokens", "prefix", "category", "tools", "sampling", "concurrency", "turn")
BUCKETS = (128, 256, 512)  # prompt-token bucket bounds: <128, 128-255, 256-511, 512+


def bucket(n: Any) -> str:
    """N prompt tokens as a bucket label."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return "unknown"
    lo = 0
    for hi in BUCKETS:
        if n < hi:
            return f"<{hi}" if lo == 0 else f"{lo}-{hi - 1}"
        lo = hi
    return f"{BUCKETS[-1]}+"


def classes(probe: Probe, usage: dict[str, Any] | None, concurrency: int) -> dict[str, str]:
    """The request's class on every attribute of ATTRIBUTES."""
    turns = sum(1 for m in probe.messages or [] if m.get("role") == "user") or 1
    return {
        "prompt_tokens": bucket((usage or {}).get("prompt_tokens")),
        "prefix": str(probe.meta.get("prefix") or "none"),
        "category": probe.category,
        "tools": "yes" if probe.tools else "no",
        "sampling": "greedy" if probe.greedy else "sampled",
        "concurrency": str(concurrency),
        "turn": str(probe.meta.get("turn") or turns),
    }


def own_counters(r: StoredResult) -> SpecCounters | None:
    """A result's own speculative counters: those its answer stated (``request_counters``), else the /metrics
    delta read around it where it was sent alone (``counters_delta`` of a request at concurrency 1); None when
    neither is known."""
    if r.request_counters:
        return SpecCounters.from_dict(r.request_counters)
    if r.concurrency == 1 and r.counters_delta and r.counters_delta.get("drafts") is not None:
        c = SpecCounters.from_dict(r.counters_delta)
        return None if c.problem else c
    return None
