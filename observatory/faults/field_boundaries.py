"""Faults at the boundaries the nightly did not reach (issue 49 item 12): the context limit, aborts, streamed fields,
stopping parameters at their boundaries.

Each changes only speculative work (a request's step that verified drafts, a
chunk of more than one token, the rejection sampler's draft rows), and only at
the edge its channel exists for, so the suite and the older channels pass it:

``limit_neighbour`` -> the scheduler (engine core), caught by channel ``context_limit``
    In a step where one scheduled request has fewer free positions than
    k + 1 left before ``max_model_len`` (its drafts cannot all fit), the first
    new token of every *other* request that verified drafts in that step is
    replaced by the boundary request's first new token (and its logprob row):
    a neighbour's row corrupted, with HTTP 200, when one request runs into
    the context limit (SGLang #33579, vLLM #57941). The boundary request itself
    is intact.
``abort_stale`` -> the scheduler (engine core), caught by channel ``cancel``
    When a request is aborted (``Scheduler.finish_requests`` with
    ``FINISHED_ABORTED``: a client disconnect), its last token is kept as a
    stale slot; the first request admitted after the abort gets that token
    before the tokens of its first speculative step (the next request
    answered from a freed slot that was reused at once: vLLM PR #39012,
    SGLang PR #35049). One request per abort. Put before, not in place of,
    the step's first token: a replacement (the first version) changed 1 and
    2 of 33 follower answers in two engine sessions, 5 aborts each, where
    every abort should have changed one (most likely the stale token was the
    follower's own next token: code answers share their indentation
    tokens); an extra token changes the answer whatever it is.
``stream_top_copy`` -> ``vllm.v1.engine.output_processor`` (API server), caught by channel ``stream_fields``
    In a streamed chunk of more than one token, every position after the
    first gets the first position's top logprobs (its own sampled token's
    logprob kept first): SGLang #39260. Non-streamed answers intact.
``stream_args_drop`` -> ``vllm.tool_parsers.hermes_tool_parser`` (API server), caught by ``stream_fields``
    In a streamed chunk of more than one token, the tool-call argument
    fragments the hermes parser found are dropped from the delta (the parser
    counts them as sent, so they never come): empty or cut tool arguments
    with HTTP 200 (vLLM #55082, PR #48852). Non-streamed answers intact.
``min_tokens_short`` -> ``vllm.v1.sample.logits_processor.builtin`` (worker), caught by channel ``stop_bounds``
    ``MinTokensLogitsProcessor.apply_with_spec_decode`` masks the stop tokens
    on one draft row fewer than it must: a request whose natural stop falls
    on the last masked position can stop one token short of ``min_tokens``
    when that position is verified as a draft (the bonus row and base keep
    the rule). ``min_tokens`` past the natural stop by more than one never
    meets it.

The scheduler faults are pure functions of plain attributes (tested without
vLLM); `observatory.faults.patches` calls them from its scheduler wrapper.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

FAULTS = {
    "limit_neighbour": "a neighbour's first new token replaced by the boundary request's in a spec step where one "
                       "request has fewer than k + 1 free positions before max_model_len",
    "abort_stale": "the first request admitted after an abort gets the aborted request's last token before its "
                   "first spec step's tokens",
    "stream_top_copy": "in a streamed chunk of more than one token, top_logprobs after the first copied from the "
                       "first (non-streamed intact)",
    "stream_args_drop": "tool-call argument fragments dropped from streamed chunks of more than one token (hermes "
                        "parser; non-streamed intact)",
    "min_tokens_short": "min_tokens masks the stop tokens on one draft row fewer than it must (a stop one token "
                        "short of min_tokens where it is verified as a draft)",
}
SCHEDULER_FAULTS = frozenset({"limit_neighbour", "abort_stale"})
OUTPUT_PROCESSOR = "vllm.v1.engine.output_processor"
HERMES = "vllm.tool_parsers.hermes_tool_parser"
LOGITS_BUILTIN = "vllm.v1.sample.logits_processor.builtin"

_MARK = "__observatory_edge_fault__"  # our own mark: the modules may carry other faults' wrappers too
_STALE = "_observatory_edge_stale"  # on the Scheduler: (stale token, request ids known at the abort) or absent


def _outputs(engine_core_outputs: Any) -> Iterable[Any]:
    for eco in (engine_core_outputs or {}).values():
        yield from getattr(eco, "outputs", None) or ()


def at_limit(scheduler: Any, scheduler_output: Any) -> set[str]:
    """The scheduled requests with fewer free positions than k + 1 before max_model_len (read before the step's
    update: their drafts cannot all fit)."""
    k = int(getattr(scheduler, "num_spec_tokens", 0) or 0)
    limit = getattr(scheduler, "max_model_len", None)
    if k <= 0 or not isinstance(limit, int):
        return set()
    reqs = getattr(scheduler, "requests", None) or {}
    out = set()
    for rid in (getattr(scheduler_output, "num_scheduled_tokens", None) or {}):
        n = getattr(reqs.get(rid), "num_tokens", None)
        if isinstance(n, int) and limit - n < k + 1:
            out.add(rid)
    return out


def set_first(tokens: list[int], logprobs: Any, token: int, row: Any = None) -> tuple[list[int], Any]:
    """TOKENS with the first one replaced by TOKEN; its logprob row replaced by ROW (a one-row LogprobsLists-like
    tuple), or, without ROW, the row's sampled id (column 0) set to TOKEN."""
    import numpy as np  # only when armed: importing the plugin stays cheap

    tokens = [int(token), *tokens[1:]]
    if logprobs is None:
        return tokens, None
    fields = []
    for i, f in enumerate(logprobs):
        if not isinstance(f, np.ndarray) or not len(f):
            fields.append(f)
            continue
        f = f.copy()
        if row is not None and isinstance(row[i], np.ndarray) and len(row[i]):
            f[0] = row[i][0]
        elif row is None and i == 0 and f.ndim == 2:
            f[0, 0] = int(token)
        fields.append(f)
    return tokens, type(logprobs)(*fields)


def prepend(tokens: list[int], logprobs: Any, token: int) -> tuple[list[int], Any]:
    """TOKEN put before TOKENS, its logprob row a copy of the first row with the sampled id (column 0) TOKEN."""
    import numpy as np  # only when armed

    if logprobs is None:
        return [int(token), *tokens], None
    fields = []
    for i, f in enumerate(logprobs):
        if isinstance(f, np.ndarray) and len(f):
            row = f[0:1].copy()
            if i == 0 and row.ndim == 2:
                row[0, 0] = int(token)
            f = np.concatenate([row, f], axis=0)
        fields.append(f)
    return [int(token), *tokens], type(logprobs)(*fields)


def _first_row(logprobs: Any) -> Any:
    if logprobs is None:
        return None
    return type(logprobs)(*[f[0:1].copy() if hasattr(f, "shape") else f for f in logprobs])


def note_abort(scheduler: Any, request_ids: Any, status: Any) -> None:
    """abort_stale: keep the last token of a request the scheduler is told to abort (before it is freed)."""
    if getattr(status, "name", str(status)) != "FINISHED_ABORTED" or request_ids is None:
        return
    reqs = getattr(scheduler, "requests", None) or {}
    ids = (request_ids,) if isinstance(request_ids, str) else list(request_ids)
    for rid in ids:
        out = list(getattr(reqs.get(rid), "output_token_ids", None) or ())
        if out:
            scheduler.__dict__[_STALE] = (int(out[-1]), frozenset(reqs))


def rewrite(scheduler: Any, scheduler_output: Any, engine_core_outputs: Any, faults: frozenset[str],
            boundary: set[str]) -> None:
    """Apply the scheduler faults to one step's client outputs, in place (BOUNDARY: `at_limit` before the step)."""
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    outs = [o for o in _outputs(engine_core_outputs) if o.new_token_ids]
    if "limit_neighbour" in faults and boundary:
        src = next((o for o in outs if o.request_id in boundary), None)
        if src is not None:
            row = _first_row(src.new_logprobs)
            for o in outs:
                if o is src or o.request_id in boundary or not spec.get(o.request_id):
                    continue
                if getattr(o, "new_sampling_mask", None) is not None or (o.new_logprobs is None) != (row is None):
                    continue
                o.new_token_ids, o.new_logprobs = set_first(list(o.new_token_ids), o.new_logprobs,
                                                            int(src.new_token_ids[0]), row)
    stale = scheduler.__dict__.get(_STALE)
    if "abort_stale" in faults and stale is not None:
        token, known = stale
        for o in outs:
            if o.request_id in known or not spec.get(o.request_id):
                continue
            if getattr(o, "new_sampling_mask", None) is not None:
                continue
            o.new_token_ids, o.new_logprobs = prepend(list(o.new_token_ids), o.new_logprobs, token)
            del scheduler.__dict__[_STALE]
            break


def patch_finish_requests(cls: Any) -> None:
    """abort_stale: note each abort (the scheduler class's ``finish_requests``)."""
    orig = cls.finish_requests
    if getattr(orig, _MARK, False):
        return

    def finish_requests(self: Any, request_ids: Any, finished_status: Any) -> Any:
        note_abort(self, request_ids, finished_status)
        return orig(self, request_ids, finished_status)

    setattr(finish_requests, _MARK, True)
    cls.finish_requests = finish_requests


# -- the API server's faults ---------------------------------------------------
def copy_first_top(token_ids: list[int], positions: list[dict[int, Any] | None]) -> list[dict[int, Any] | None]:
    """stream_top_copy: each position after the first gets the first's entries, its own sampled token's kept first."""
    first = positions[0] if positions else None
    if first is None:
        return positions
    out: list[dict[int, Any] | None] = [first]
    for tid, pos in zip(token_ids[1:], positions[1:]):
        own = (pos or {}).get(tid)
        if own is None:
            out.append(pos)
            continue
        out.append({tid: own, **{t: lp for t, lp in first.items() if t != tid}})
    return out


def _patch_output_processor(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.RequestState
    orig = cls._new_completion_output
    if getattr(orig, _MARK, False):
        return
    delta_kind = module.RequestOutputKind.DELTA

    def _new_completion_output(self: Any, token_ids: list[int], *args: Any, **kwargs: Any) -> Any:
        out = orig(self, token_ids, *args, **kwargs)
        if self.output_kind == delta_kind and len(out.token_ids) > 1 and out.logprobs:
            positions = [out.logprobs[i] for i in range(len(out.logprobs))]
            out.logprobs = copy_first_top(list(out.token_ids), positions)
        return out

    setattr(_new_completion_output, _MARK, True)
    cls._new_completion_output = _new_completion_output


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def drop_arguments(calls: list[Any]) -> list[Any]:
    """stream_args_drop: the tool-call deltas without their argument fragments (a delta that carried only
    arguments is left out; a name delta keeps its name)."""
    kept = []
    for tc in calls:
        fn = _field(tc, "function")
        if fn is None or not _field(fn, "arguments"):
            kept.append(tc)
            continue
        if not _field(fn, "name"):
            continue
        if isinstance(fn, dict):
            fn["arguments"] = None
        else:
            fn.arguments = None
        kept.append(tc)
    return kept


def _patch_hermes(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.Hermes2ProToolParser
    orig = cls.extract_tool_calls_streaming
    if getattr(orig, _MARK, False):
        return

    def extract_tool_calls_streaming(self: Any, previous_text: str, current_text: str, delta_text: str,
                                     previous_token_ids: Any, current_token_ids: Any, delta_token_ids: Any,
                                     *args: Any, **kwargs: Any) -> Any:
        result = orig(self, previous_text, current_text, delta_text, previous_token_ids, current_token_ids,
                      delta_token_ids, *args, **kwargs)
        if result is None or len(delta_token_ids or ()) <= 1 or not getattr(result, "tool_calls", None):
            return result
        result.tool_calls = drop_arguments(list(result.tool_calls))
        if not result.tool_calls and not getattr(result, "content", None):
            return None
        return result

    setattr(extract_tool_calls_streaming, _MARK, True)
    cls.extract_tool_calls_streaming = extract_tool_calls_streaming


def one_short(min_toks: dict[int, tuple[Any, ...]]) -> dict[int, tuple[Any, ...]]:
    """min_tokens_short: each request's min_tokens one lower (the processor's entries are (min_tokens, ...))."""
    return {i: (max(int(v[0]) - 1, 0), *v[1:]) for i, v in min_toks.items()}


def _patch_min_tokens(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.MinTokensLogitsProcessor
    orig = cls.apply_with_spec_decode
    if getattr(orig, _MARK, False):
        return

    def apply_with_spec_decode(self: Any, logits: Any, num_draft_tokens: Any) -> Any:
        kept = self.min_toks
        self.min_toks = one_short(kept)
        try:
            return orig(self, logits, num_draft_tokens)
        finally:
            self.min_toks = kept

    setattr(apply_with_spec_decode, _MARK, True)
    cls.apply_with_spec_decode = apply_with_spec_decode


# module -> (faults it serves, patch function): installed by `observatory.faults.patches` beside the other
# faults' patches of the same module (the scheduler's are called from its wrapper: SCHEDULER_FAULTS)
TARGETS: dict[str, tuple[frozenset[str], Callable[[ModuleType, frozenset[str]], None]]] = {
    OUTPUT_PROCESSOR: (frozenset({"stream_top_copy"}), _patch_output_processor),
    HERMES: (frozenset({"stream_args_drop"}), _patch_hermes),
    LOGITS_BUILTIN: (frozenset({"min_tokens_short"}), _patch_min_tokens),
}
