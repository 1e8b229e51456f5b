"""The faults as pure functions, testable without an engine.

- `accept_all_rows`: the rejection sampler's output tensor rewritten as if every
  draft had been accepted (torch; used on vLLM's V1 model runner).
- `bonus_index`, `drop_index`, `prepend_token`: one request's tokens of one
  step, as the scheduler hands them to the client, with the matching logprob
  rows (a ``LogprobsLists``-like NamedTuple of numpy arrays, or None).

torch is imported inside `accept_all_rows` only; the rest needs numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

PLACEHOLDER_TOKEN_ID = -1  # vLLM's V1 rejection sampler pads rejected slots with -1


def accept_all_rows(
    output_token_ids: Any,
    draft_token_ids: Any,
    num_draft_tokens: list[int],
    bonus_token_ids: Any,
    placeholder: int = PLACEHOLDER_TOKEN_ID,
) -> Any:
    """Rewrite V1 rejection-sampler output as "every draft accepted".

    Args:
        output_token_ids: ``[batch, max_spec_len + 1]`` the sampler's real
            output (accepted drafts, then the recovered or bonus token, then
            `placeholder` padding).
        draft_token_ids: ``[num_tokens]`` all requests' drafts, flattened.
        num_draft_tokens: drafts per request (``len == batch``).
        bonus_token_ids: ``[batch, 1]`` (or ``[batch]``) the token sampled from
            the target at the position after each request's last draft.

    Returns a new tensor (same dtype/device as `output_token_ids`) whose row
    ``i`` is ``drafts_i + [bonus_i]`` padded with `placeholder`, for each
    request with at least one draft. Rows without drafts, and rows with a
    padded (negative) draft, which vLLM always rejects, are returned unchanged.
    """
    import torch

    out = output_token_ids
    batch, width = out.shape
    device = out.device
    n = torch.as_tensor(num_draft_tokens, dtype=torch.long, device=device)
    assert n.numel() == batch, (n.numel(), batch)
    if batch == 0:
        return out.clone()
    cols = torch.arange(width, device=device)
    starts = torch.cumsum(n, 0) - n
    is_draft = cols.unsqueeze(0) < n.unsqueeze(1)  # [B, W]
    total = draft_token_ids.numel()
    if total > 0:
        idx = (starts.unsqueeze(1) + cols.unsqueeze(0)).clamp_(0, total - 1)
        drafts = draft_token_ids.to(device=device, dtype=out.dtype)[idx]
    else:
        drafts = torch.full_like(out, placeholder)
    new = torch.where(is_draft, drafts, torch.full_like(out, placeholder))
    bonus = bonus_token_ids.reshape(batch).to(device=device, dtype=out.dtype)
    is_bonus = cols.unsqueeze(0) == n.unsqueeze(1)
    new = torch.where(is_bonus, bonus.unsqueeze(1), new)
    bad_draft = (is_draft & (drafts < 0)).any(dim=1)
    use_new = (n > 0) & ~bad_draft & (n < width)
    return torch.where(use_new.unsqueeze(1), new, out)


def bonus_index(
    num_draft_tokens: int,
    num_generated: int,
    num_sampled_per_step: int = 1,
) -> int | None:
    """Index of the bonus token in a step's generated tokens, or None.

    A step is fully accepted when it generated every draft plus the
    `num_sampled_per_step` token(s) the target samples after them (vLLM's
    scheduler counts ``accepted = len(generated) - num_sampled_per_step``).
    Only speculative steps (``num_draft_tokens > 0``) have a bonus token.
    """
    if num_draft_tokens <= 0 or num_sampled_per_step <= 0:
        return None
    if num_generated != num_draft_tokens + num_sampled_per_step:
        return None
    return num_generated - 1


def _map_rows(logprobs: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply `fn` to each per-position array field of a LogprobsLists-like tuple."""
    if logprobs is None:
        return None
    fields = [fn(f) if isinstance(f, np.ndarray) else f for f in logprobs]
    return type(logprobs)(*fields)


def logprob_row(logprobs: Any, index: int) -> Any:
    """The logprob row of one position, as a one-row LogprobsLists-like tuple."""
    if logprobs is None:
        return None
    return _map_rows(logprobs, lambda a: a[index : index + 1].copy())


def drop_index(token_ids: list[int], logprobs: Any, index: int) -> tuple[list[int], Any]:
    """Remove position `index` from the tokens and the logprob rows."""
    tokens = list(token_ids)
    del tokens[index]
    return tokens, _map_rows(logprobs, lambda a: np.delete(a, index, axis=0))


def prepend_token(
    token_ids: list[int], logprobs: Any, token: int, row: Any
) -> tuple[list[int], Any]:
    """Put `token` (with its logprob `row`, a one-row tuple) before the tokens."""
    tokens = [int(token), *token_ids]
    if logprobs is None:
        return tokens, None
    if row is None:
        raise ValueError("logprobs requested but no logprob row for the ghost token")
    fields = []
    for f, r in zip(logprobs, row, strict=True):
        fields.append(np.concatenate([r, f], axis=0) if isinstance(f, np.ndarray) else f)
    return tokens, type(logprobs)(*fields)
