"""Faults of the edges the nightly did not reach (issue 49): the prefix cache, one speculation depth, embeddings.

``spec_cache_miss`` -> ``vllm.v1.core.kv_cache_manager`` (engine core)
    on an engine whose drafter reads the target's hidden states (MTP, EAGLE:
    ``KVCacheManager.use_eagle``), a prompt whose length falls in the 4th
    16-token hash unit of every 64 (``(L // 16) % 4 == 3``) gets no
    prefix-cache hit at all: answers right, the prefix recomputed. Field:
    prefix-cache hits 0% with speculation, 72.7% without, only at some
    prompt lengths (vLLM #51771, #54360). Caught by channel ``prefix_cache``.
``depth_only`` -> the scheduler (`observatory.faults.field_state.rewrite`)
    speculative steps ghosted (the previous step's last token emitted
    again) only on an engine running exactly ``OBSERVATORY_DEPTH_ONLY_K``
    speculative tokens (default 3); k = 1 and 2 are clean. Field: SGLang
    #32038 (only k equal to the drafter's block size), llama.cpp #23302.
    Caught by the suite's token diff on an arm at that k: the nightly given
    the deployed config (``--deployed-spec``) always runs one.
``embeds_drafts`` -> the scheduler (`observatory.faults.field_state.rewrite`)
    speculative steps ghosted only for requests whose prompt came as
    embeddings (``Request.prompt_embeds``): text and token-id prompts are
    clean. Field: vLLM PR #37170, #42168 (draft positions of prompt_embeds
    requests not marked as token ids). Caught by channel ``prompt_embeds``.

The decisions are pure functions of plain values (tested without vLLM).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

KV_MANAGER = "vllm.v1.core.kv_cache_manager"
DEPTH_VAR = "OBSERVATORY_DEPTH_ONLY_K"
DEFAULT_DEPTH = 3
HASH_UNIT = 16  # tokens per hash unit of spec_cache_miss's length rule

FAULTS = {
    "spec_cache_miss": "spec engines (MTP/EAGLE) get no prefix-cache hit for prompts whose length has (L//16)%4 == 3",
    "depth_only": "spec steps ghosted only at k = OBSERVATORY_DEPTH_ONLY_K (default 3): k = 1 and 2 clean",
    "embeds_drafts": "spec steps ghosted only for requests whose prompt came as prompt_embeds",
}
# the faults field_state.rewrite applies at the scheduler -> client boundary
SCHEDULER_FAULTS = frozenset({"depth_only", "embeds_drafts"})
_MARK = "__observatory_fault__"


def misses(prompt_tokens: int) -> bool:
    """Whether ``spec_cache_miss`` takes away a prompt's cache hit: its length in the 4th hash unit of 4."""
    return (prompt_tokens // HASH_UNIT) % 4 == 3


def depth() -> int:
    """The one k ``depth_only`` corrupts (``OBSERVATORY_DEPTH_ONLY_K``; a bad value stops the engine)."""
    raw = os.environ.get(DEPTH_VAR, "").strip()
    if not raw:
        return DEFAULT_DEPTH
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{DEPTH_VAR}={raw!r}: a positive integer, the speculation depth depth_only corrupts")
    return int(raw)


def ghosted(scheduler: Any, req_id: str, faults: frozenset[str]) -> bool:
    """Whether this request's spec steps are ghosted by ``depth_only`` or ``embeds_drafts`` on SCHEDULER."""
    if "depth_only" in faults and int(getattr(scheduler, "num_spec_tokens", 0) or 0) == depth():
        return True
    if "embeds_drafts" in faults:
        req = (getattr(scheduler, "requests", None) or {}).get(req_id)
        return getattr(req, "prompt_embeds", None) is not None
    return False


def _patch_kv_manager(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.KVCacheManager
    orig = cls.get_computed_blocks
    if getattr(orig, _MARK, False):
        return

    def get_computed_blocks(self: Any, request: Any) -> Any:
        if getattr(self, "use_eagle", False) and misses(int(getattr(request, "num_prompt_tokens", 0) or 0)):
            return self.empty_kv_cache_blocks, 0, 0
        return orig(self, request)

    setattr(get_computed_blocks, _MARK, True)
    cls.get_computed_blocks = get_computed_blocks


# module -> (faults it serves, patch function): merged into patches.TARGETS (the scheduler's are field_state's)
TARGETS = {
    KV_MANAGER: (frozenset({"spec_cache_miss"}), _patch_kv_manager),
}
