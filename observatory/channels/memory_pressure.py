"""Memory pressure: long concurrent requests on a KV cache too small for them, so the engine preempts.

Field bugs (docs/channels.md, "memory_pressure"): a request evicted from the
KV cache and recomputed comes back with garbage, its drafter state or its
accepted tokens not restored. The suite's requests fit in any cache, so no
default run preempts.

On each arm: every request alone on the arm's own engine (the reference,
``concurrency`` 1), then all of them at once on a second engine of the same
arm launched with a KV cache of ``ceil(CONTEXT / block) + 1`` blocks and
``--max-model-len CONTEXT`` (`LiveArm.sibling`): room for one request at its
longest, while the four together need about twice that, so the scheduler
must preempt. An arm whose own engine reports that few blocks already (the
``num_gpu_blocks`` of its adapter's ``kv_cache_info``) is pressured on
itself. The engine's own preemption counter (its adapter's ``preemptions``)
is read before and after the batch; an arm whose engine did not preempt is "not
exercised", never PASS. Every output is diffed against base's answer to the
same request sent alone (token_diff's near-tie rule); where base's own
pressured output differs from its alone output, or an A/A copy differs, a
divergence is WARN "not attributable".
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from observatory.channels import Channel
from observatory.channels.engine_conditions import facts, metrics_text, not_exercised, sibling_problem
from observatory.channels.length_sweep import padded_ids
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, differs_alone, judge_against_base
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.client.send import EngineClient
from observatory.engines.adapter import adapter_for
from observatory.model.probes import Probe
from observatory.model.vocabulary import PASS
from observatory.store.stored import StoredArm, Verdict

NAME = "memory_pressure"
CONTEXT = 1024  # the second engine's --max-model-len (the bundled model's own)
REQUESTS = 4
PROMPT_TOKENS = CONTEXT * 3 // 8  # 384: three 128-token blocks each
MAX_TOKENS = CONTEXT * 9 // 64  # 144: each request ends at 528 tokens, 4 blocks of 128 and a bit
DEFAULT_BLOCK = 16  # vLLM's block size where the server does not report its own
ALONE, PRESSURE = "alone", "pressure"
# distinct texts, so the prefix cache shares no block between the requests (sharing would relieve the pressure)
FILLERS = (" The quick brown fox jumps over the lazy dog.", " A journey of a thousand miles begins with one step.",
           " Rain fell on the old stone bridge all night long.", " Seven ships sailed north past the silent islands.")
QUESTION = "\nQuestion: write a long story about what happened next.\nAnswer:"


def plan(suite: list[Probe]) -> list[Probe]:
    """REQUESTS long completions (the suite is not used), each with its own filler; EOS ignored, so each
    runs to MAX_TOKENS on every arm."""
    return [Probe(name=f"{NAME}/{i:02d}", category=NAME, prompt=QUESTION, max_tokens=MAX_TOKENS, channel=NAME,
                  sampling={"ignore_eos": True}, meta={"index": i, "filler": FILLERS[i % len(FILLERS)],
                                                       "length": PROMPT_TOKENS})
            for i in range(REQUESTS)]


def budget_blocks(block_size: int) -> int:
    """KV-cache blocks of the pressured engine: one request at CONTEXT tokens fits, four of ours do not."""
    return math.ceil(CONTEXT / block_size) + 1


def _cache_fact(run: LiveArm, name: str) -> int | None:
    """One integer label of the KV cache's settings the server publishes (block_size, num_gpu_blocks: its adapter's
    ``kv_cache_info``), or None."""
    assert run.client is not None  # a channel measures a live arm
    text = metrics_text(run.client)
    labels = run.client.adapter.kv_cache_info(text) if text else None
    try:
        return int((labels or {}).get(name))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _sent(client: EngineClient, probe: Probe) -> Probe | None:
    """PROBE with its prompt as exactly PROMPT_TOKENS ids of the server's own tokenizer; None if it cannot say."""
    question, filler = client.tokenize(QUESTION), client.tokenize(str(probe.meta["filler"]))
    if not question or not filler:
        return None
    return dataclasses.replace(probe, prompt=padded_ids(question, filler, int(probe.meta["length"])))


def _preemptions(run: LiveArm) -> int | None:
    assert run.client is not None  # a channel measures a live arm
    text = metrics_text(run.client)
    return run.client.adapter.preemptions(text) if text else None


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each request alone on the arm's engine, then all at once on a second engine with a small KV cache."""
    assert run.client is not None  # a channel measures a live arm
    sent = [_sent(run.client, p) for p in probes]
    for i, (probe, s) in enumerate(zip(probes, sent)):
        run.reporter.step(run.arm, f"{NAME} alone", i, len(probes))
        if s is None:
            run.store_result(probe, Response(error="the server did not tokenize the prompt (/tokenize)",
                                             error_kind="http"), NAME)
            continue
        resp = run.client.run(s, stream=False)
        run.store_result(probe, resp, NAME, concurrency=1)
        run.check_alive(resp)
        if not run.live:
            return
    block = _cache_fact(run, "block_size") or DEFAULT_BLOCK
    blocks = budget_blocks(block)
    run.note(NAME, block_size=block, blocks=blocks)
    own = _cache_fact(run, "num_gpu_blocks")
    if own is not None and own <= blocks:  # the arm's own cache is already this small: no second engine
        run.note(NAME, where="the arm's own engine")
        pressure(run, probes, sent)
        return
    args = ["--max-model-len", str(CONTEXT), "--num-gpu-blocks-override", str(blocks)]
    with run.sibling(NAME, engine_args=args) as twin:
        if twin is not None:
            twin.note(NAME, where="a second engine with a small KV cache")
            pressure(twin, probes, sent)


def pressure(run: LiveArm, probes: list[Probe], sent: list[Probe | None]) -> None:
    """All requests at once on RUN's engine, its preemption counter read around them (noted)."""
    client = run.client
    assert client is not None  # a channel measures a live arm
    run.reporter.step(run.arm, f"{NAME} under pressure", 0, 1)
    served = _cache_fact(run, "num_gpu_blocks")
    before = _preemptions(run)
    ready = [(p, s) for p, s in zip(probes, sent) if s is not None]
    with ThreadPoolExecutor(max_workers=len(ready) or 1) as ex:
        resps = list(ex.map(lambda ps: client.run(ps[1], stream=False), ready))
    after = _preemptions(run)
    for (probe, _), resp in zip(ready, resps):
        run.store_result(probe, resp, NAME, concurrency=len(ready))
    run.note(NAME, preemptions=None if before is None or after is None else after - before, served_blocks=served)
    for resp in resps:
        run.check_alive(resp)


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        p = view.probe(r)
        how = ALONE if r.concurrency == 1 else PRESSURE
        out[(p.name, how)] = Keyed((p.name, how), {"index": p.meta["index"], "how": how,
                                                   "prompt_tokens": (r.usage or {}).get("prompt_tokens")}, r)
    return out


def _base_noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
    """Requests whose pressured output on base differs from base's alone output."""
    return differs_alone(ref, ALONE, PRESSURE, "base differs alone and under memory pressure")


def exercised(arm: StoredArm) -> str | None:
    """Why ARM's engine was not put under pressure (no preemption seen), or None when it preempted."""
    problem = sibling_problem(arm, NAME)
    if problem:
        return problem
    f = facts(arm, NAME)
    if "preemptions" not in f:
        return "the pressured batch did not run"
    n = f.get("preemptions")
    if n is None:
        metric = adapter_for(arm.engine).preemptions_metric
        return f"the engine reports no preemption counter{f' ({metric})' if metric else ''}"
    if n <= 0:
        return f"the engine did not preempt ({n} preemptions, {f.get('served_blocks')} KV-cache blocks)"
    return None


def judge(view: ChannelView) -> list[Verdict]:
    """Each output, alone or pressured, against the same request alone on base; PASS only where the arm's
    engine preempted."""
    rows = judge_against_base(view, _keyed, lambda key: (key[0], ALONE), _base_noise, what="requests")
    by_id = {a.id: a for a in view.arms}
    out = []
    for v in rows:
        arm = by_id[v.arm_id]
        why = exercised(arm)
        f = facts(arm, NAME)
        v.details.update(preemptions=f.get("preemptions"), blocks=f.get("blocks"),
                         served_blocks=f.get("served_blocks"))
        if why is not None and v.verdict == PASS:
            out.append(not_exercised(view, arm, why, v.details))
            continue
        if why is None:
            v.reason = f"{v.reason} ({f.get('preemptions')} preemptions under a {f.get('blocks')}-block KV cache)"
        else:
            v.reason = f"{v.reason} (pressure not exercised: {why})"
        out.append(v)
    return out


CHANNEL = Channel(
    name=NAME,
    title="Memory pressure (preemption)",
    catches="a request preempted from the KV cache and recomputed comes back wrong",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("preempt_poison",),
    profile="deep",
    options={"requests": REQUESTS, "prompt_tokens": PROMPT_TOKENS, "max_tokens": MAX_TOKENS, "context": CONTEXT,
             "kv_blocks": "ceil(context / block_size) + 1"},
)
