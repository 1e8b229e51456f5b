"""Faults of traffic at volume (issue 48 items 2-3; issue 49 item 10): the ``volume`` and ``speculates`` channels.

Each lives in the scheduler (engine core) and breaks only what a suite of a
few dozen requests, mostly sent one at a time, does not reach:

``mixed_typo`` -> ``Scheduler.update_from_output`` (the scheduler -> client boundary, like ``ghost``)
    SGLang #34959's class: a single-character typo in an identifier, in a
    fraction of a percent of requests, only under heterogeneous concurrent
    batching. In a step that holds two or more speculating rows that emit
    different numbers of tokens (their drafts accepted to different depths)
    beside a row that is not speculating (a prefill, or a decode without
    drafts), a request that is "unlucky" (`RATE_VAR`, default
    `DEFAULT_RATE` = 0.5% of such requests, decided once per request from
    its id) gets one emitted token that is a piece of an identifier (letters,
    digits, underscores) replaced by the vocabulary's token that differs
    from it in one character ("self" -> "selg"), once. The engine keeps the
    true token (its state, the next step's input): the client's text alone
    carries the typo, as in the field. A request alone, or in a batch whose
    spec rows all accept alike, is never touched.
``sampled_no_drafts`` -> ``Scheduler.update_draft_token_ids``
    requests sampled at temperature > 0 get no drafts: speculation silently
    off for them (aws/sagemaker-python-sdk #6143, kekzl/imp #1538: default
    sampling settings that disable the spec path). Output intact; greedy
    requests speculate as before.
``tools_bad_drafts`` -> ``Scheduler.update_draft_token_ids``
    requests whose prompt lists tools (the chat template's ``<tools>``) get
    random draft ids: the target rejects them, so their acceptance
    collapses while their output stays right.

Decisions are pure functions of plain values (tested without vLLM); the
tokenizer is the model's own ``tokenizer.json`` (the ``tokenizers`` package
vLLM installs), read once per process.
"""

from __future__ import annotations

import functools
import logging
import random
import re
import zlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from observatory.faults.names import fraction_var

FAULTS = {
    "mixed_typo": "an identifier token swapped for a one-character-off token in ~0.5% of requests, only in a step "
                  "whose spec rows accept unequally beside a prefill (client text only)",
    "sampled_no_drafts": "requests sampled at temperature > 0 get no drafts: speculation silently off for them",
    "tools_bad_drafts": "requests whose prompt lists tools get random drafts: acceptance collapses, output intact",
}
TYPO = frozenset({"mixed_typo"})
DRAFTS = frozenset({"sampled_no_drafts", "tools_bad_drafts"})
RATE_VAR = "OBSERVATORY_MIXED_TYPO_RATE"
DEFAULT_RATE = 0.005
TOOLS_MARK = "<tools>"
NOISE_SEED = 48
_MARK = "__observatory_fault__"
_DONE = "_observatory_typo_done"  # on the Scheduler: request ids already given their typo
_TOOLS = "_observatory_tools"  # on the Scheduler: request id -> whether its prompt lists tools
_PIECE = re.compile(r"[A-Za-z0-9_]+")
logger = logging.getLogger("vllm.plugins.observatory_faults")


def unlucky(req_id: str, rate: float) -> bool:
    """Whether request REQ_ID is one of the RATE share that gets a typo (a fixed function of its id)."""
    return zlib.crc32(req_id.encode()) / 2**32 < rate


def mixed(spec_lengths: Iterable[int], others: int) -> bool:
    """A heterogeneous step: speculating rows emitting different numbers of tokens, beside OTHERS rows that are not
    speculating (prefills, decodes without drafts)."""
    return len(set(spec_lengths)) >= 2 and others >= 1


def one_char_off(token: str, vocab: dict[str, int]) -> int | None:
    """The id of a vocabulary token that differs from TOKEN (a byte-level BPE string) in one letter or digit of its
    identifier part; None when TOKEN is no identifier piece or has no such neighbour."""
    lead = "Ġ" if token.startswith("Ġ") else ""
    body = token[len(lead):]
    if not body or not _PIECE.fullmatch(body):
        return None
    for i in range(len(body) - 1, -1, -1):
        c = body[i]
        pool = "abcdefghijklmnopqrstuvwxyz" if c.islower() else "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c.isupper() \
            else "0123456789" if c.isdigit() else ""
        for alt in pool[pool.index(c) + 1:] + pool[: pool.index(c)] if c in pool else "":
            cand = lead + body[:i] + alt + body[i + 1:]
            if cand in vocab:
                return vocab[cand]
    return None


@functools.cache
def _tokenizer(path: str) -> Any:
    from tokenizers import Tokenizer

    file = Path(path) / "tokenizer.json"
    return Tokenizer.from_file(str(file)) if file.is_file() else None


def _model_path(scheduler: Any) -> str:
    mc = getattr(getattr(scheduler, "vllm_config", None), "model_config", None)
    return str(getattr(mc, "tokenizer", None) or getattr(mc, "model", ""))


@functools.cache
def _typo_table(path: str) -> dict[int, int]:
    """token id -> its one-character-off neighbour's id, for every identifier piece of the vocabulary."""
    tok = _tokenizer(path)
    if tok is None:
        return {}
    vocab: dict[str, int] = tok.get_vocab()
    out = {}
    for text, tid in vocab.items():
        alt = one_char_off(text, vocab)
        if alt is not None:
            out[int(tid)] = int(alt)
    return out


def typo(tokens: list[int], table: dict[int, int]) -> list[int] | None:
    """TOKENS with their first identifier piece replaced by its one-character-off neighbour; None when none is one."""
    for i, t in enumerate(tokens):
        if t in table:
            return [*tokens[:i], table[t], *tokens[i + 1:]]
    return None


def rewrite(scheduler: Any, scheduler_output: Any, engine_core_outputs: Any, rate: float) -> None:
    """``mixed_typo`` on one step's client outputs, in place."""
    spec = getattr(scheduler_output, "scheduled_spec_decode_tokens", None) or {}
    scheduled = getattr(scheduler_output, "num_scheduled_tokens", None) or {}
    outs = [o for eco in (engine_core_outputs or {}).values() for o in getattr(eco, "outputs", None) or ()
            if o.new_token_ids]
    spec_outs = [o for o in outs if spec.get(o.request_id)]
    if not mixed((len(o.new_token_ids) for o in spec_outs), sum(1 for r in scheduled if not spec.get(r))):
        return
    done: set[str] = scheduler.__dict__.setdefault(_DONE, set())
    table = _typo_table(_model_path(scheduler))
    for o in spec_outs:
        if o.request_id in done or not unlucky(o.request_id, rate) or getattr(o, "new_sampling_mask", None):
            continue
        new = typo(list(o.new_token_ids), table)
        if new is not None:
            logger.info("observatory fault mixed_typo: request %s, tokens %s -> %s", o.request_id,
                        list(o.new_token_ids), new)  # each firing in the log: the selftest counts them
            o.new_token_ids = new
            done.add(o.request_id)
    if len(done) > 4096:
        live = getattr(scheduler, "requests", {})
        done.intersection_update(live)


def lists_tools(scheduler: Any, request: Any) -> bool:
    """Whether the request's prompt lists tools (the chat template's TOOLS_MARK), decided at first sight."""
    seen: dict[str, bool] = scheduler.__dict__.setdefault(_TOOLS, {})
    rid = request.request_id
    if rid not in seen:
        tok = _tokenizer(_model_path(scheduler))
        ids = list(getattr(request, "prompt_token_ids", None) or [])
        seen[rid] = bool(tok is not None and ids and TOOLS_MARK in tok.decode(ids, skip_special_tokens=False))
        if len(seen) > 4096:
            for old in [r for r in seen if r not in getattr(scheduler, "requests", {})]:
                del seen[old]
    return seen[rid]


def sampled(request: Any) -> bool:
    """Whether the request samples at temperature > 0."""
    t = getattr(getattr(request, "sampling_params", None), "temperature", None)
    return isinstance(t, (int, float)) and t > 0


def patch_drafts(module: ModuleType, faults: frozenset[str]) -> None:
    """``sampled_no_drafts`` and ``tools_bad_drafts`` on ``Scheduler.update_draft_token_ids``."""
    cls = module.Scheduler
    orig = cls.update_draft_token_ids
    if getattr(orig, _MARK, False):
        return
    rng = random.Random(NOISE_SEED)

    @functools.wraps(orig)
    def update_draft_token_ids(self: Any, draft_token_ids: Any) -> Any:
        out = orig(self, draft_token_ids)
        vocab = int(self.vllm_config.model_config.get_vocab_size())
        for rid in list(getattr(draft_token_ids, "req_ids", None) or []):
            req = self.requests.get(rid)
            if req is None or not req.spec_token_ids:
                continue
            if "sampled_no_drafts" in faults and sampled(req):
                req.spec_token_ids = []
            elif "tools_bad_drafts" in faults and lists_tools(self, req):
                req.spec_token_ids = [rng.randrange(vocab) for _ in req.spec_token_ids]
        return out

    setattr(update_draft_token_ids, _MARK, True)
    cls.update_draft_token_ids = update_draft_token_ids


def rate() -> float:
    """``mixed_typo``'s share of unlucky requests (RATE_VAR; a bad value stops the engine)."""
    return fraction_var(RATE_VAR, DEFAULT_RATE, 1.0, "the share of mixed-batch requests mixed_typo corrupts")
