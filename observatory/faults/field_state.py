"""Faults of state, length and batch (issue 15): the field channels soak, length_sweep and mixed_batch.

Each breaks only speculative steps (a request's step that verified at least
one draft), at the scheduler -> client boundary like ``ghost`` (the engine
keeps the true tokens; see `observatory.faults`), and only under a condition
the default suite never meets, so ``--profile quick`` misses it:

``soak_poison``
    state poisoned by repetition: from the 6th time the engine serves the
    same prompt (same prompt token ids) on, that request's speculative steps
    are ghosted (the previous step's last token emitted again). The quick
    profile with its defaults serves a prompt at most 5 times (warm-up,
    streamed, non-streamed, concurrent batch, one timed pass at c=1), so it
    misses it; more timed repeats or levels (``--repeat``, ``--concurrency``)
    would reach the 6th. In a nightly session the timed pass runs after the
    channels, so there the timed diffs (``token_diff:c1``) see it too. Field:
    request A, then B, then A again answers differently (BUGZOO "state
    carried across requests").
``length_poison``
    corruption at certain prompt lengths only: ghosted speculative steps for
    a request whose prompt length L satisfies ``L % block_size == (1 + k) %
    block_size`` (a prompt of exactly 1 + k tokens, and the same offset past
    every KV-cache block boundary). Field: vLLM #53051, #49918.
``batch_swap``
    a token swapped between batch rows: in a speculative step that holds two
    or more speculating requests and at least one request with stop strings
    (a heterogeneous batch), the first new token of the first two speculating
    rows (by request id) trade places. The suite's requests carry no stop
    strings. Field: vLLM #14645 (tokens of one request appear in another).

Pure functions of plain attributes (the scheduler, its output, the runner's
output, the client outputs): tested without vLLM.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from observatory.faults import field_conditions, field_edges, transforms

# described in FAULTS; preempt_poison is field_conditions' (memory_pressure), depth_only and embeds_drafts
# field_edges' (issue 49), ghosted here like the others
FIELD_FAULTS = frozenset({"soak_poison", "length_poison", "batch_swap", "preempt_poison",
                          *field_edges.SCHEDULER_FAULTS})
POISON_AFTER = 5  # occurrences of one prompt served clean; the next ones are poisoned

_SEEN = "_observatory_field_seen"  # on the Scheduler: prompt key -> times served
_OCC = "_observatory_field_occurrence"  # req_id -> which occurrence of its prompt it is (1-based)
_HIT = "_observatory_field_length_hit"  # req_id -> whether its prompt length is poisoned
_LAST = "_observatory_field_last"  # req_id -> (last emitted token, its logprob row)


def _outputs(engine_core_outputs: Any) -> Iterable[Any]:
    for eco in (engine_core_outputs or {}).values():
        yield from getattr(eco, "outputs", None) or ()


def occurrence(scheduler: Any, req_id: str) -> int | None:
    """Which time this request's prompt is served by this engine (1 = first); None when unknown."""
    occ: dict[str, int] = scheduler.__dict__.setdefault(_OCC, {})
    if req_id not in occ:
        req = (getattr(scheduler, "requests", None) or {}).get(req_id)
        ids = getattr(req, "prompt_token_ids", None)
        if ids is None:
            return None
        seen: dict[tuple[int, ...], int] = scheduler.__dict__.setdefault(_SEEN, {})
        key = tuple(int(t) for t in ids)
        seen[key] = seen.get(key, 0) + 1
        occ[req_id] = seen[key]
    return occ[req_id]


def length_hit(scheduler: Any, req_id: str) -> bool:
    """Whether the request's prompt length sits at 1 + k past a KV-cache block boundary (decided at first sight)."""
    hits: dict[str, bool] = scheduler.__dict__.setdefault(_HIT, {})
    if req_id not in hits:
        hits[req_id] = _length_hit(scheduler, req_id)
    return hits[req_id]


def _length_hit(scheduler: Any, req_id: str) -> bool:
    req = (getattr(scheduler, "requests", None) or {}).get(req_id)
    n = getattr(req, "num_prompt_tokens", None)
    block = int(getattr(getattr(scheduler, "cache_config", None), "block_size", 0) or 0)
    k = int(getattr(scheduler, "num_spec_tokens", 0) or 0)
    if not isinstance(n, int) or block <= 0 or k <= 0:
        return False
    return n % block == (1 + k) % block


def has_stop_strings(scheduler: Any, req_ids: Iterable[str]) -> bool:
    """Whether any of the requests carries stop strings."""
    reqs = getattr(scheduler, "requests", None) or {}
    for rid in req_ids:
        stop = getattr(getattr(reqs.get(rid), "sampling_params", None), "stop", None)
        if stop:
            return True
    return False


def rewrite(scheduler: Any, scheduler_output: Any, engine_core_outputs: Any, faults: frozenset[str]) -> None:
    """Apply the field faults to one step's client outputs, in place."""
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    last: dict[str, tuple[int, Any]] = scheduler.__dict__.setdefault(_LAST, {})
    outs = [o for o in _outputs(engine_core_outputs) if o.new_token_ids]
    for out in outs:  # register every request at its first output, spec or not
        occurrence(scheduler, out.request_id)
        length_hit(scheduler, out.request_id)
    if "batch_swap" in faults:
        rows = sorted((o for o in outs if spec.get(o.request_id) and getattr(o, "new_sampling_mask", None) is None),
                      key=lambda o: o.request_id)
        scheduled = (getattr(scheduler_output, "num_scheduled_tokens", None) or {}).keys()
        if len(rows) >= 2 and has_stop_strings(scheduler, scheduled):
            a, b = rows[0], rows[1]
            ta, tb = list(a.new_token_ids), list(b.new_token_ids)
            ta[0], tb[0] = tb[0], ta[0]
            a.new_token_ids, b.new_token_ids = ta, tb
    for out in outs:
        rid = out.request_id
        ghost = False
        if spec.get(rid) and getattr(out, "new_sampling_mask", None) is None and rid in last:
            ghost = ("soak_poison" in faults and (occurrence(scheduler, rid) or 0) > POISON_AFTER) or (
                "length_poison" in faults and length_hit(scheduler, rid)) or (
                "preempt_poison" in faults and field_conditions.preempted(scheduler, rid)) or (
                field_edges.ghosted(scheduler, rid, faults))
        tokens, logprobs = list(out.new_token_ids), out.new_logprobs
        if ghost:
            tok, row = last[rid]
            if logprobs is None or row is not None:
                tokens, logprobs = transforms.prepend_token(tokens, logprobs, tok, row)
                out.new_token_ids, out.new_logprobs = tokens, logprobs
        if out.finish_reason is not None:
            last.pop(rid, None)
            scheduler.__dict__.get(_OCC, {}).pop(rid, None)
            scheduler.__dict__.get(_HIT, {}).pop(rid, None)
        else:
            last[rid] = (tokens[-1], transforms.logprob_row(logprobs, len(tokens) - 1))
