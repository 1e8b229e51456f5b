"""Mixed concurrent batches: heterogeneous requests in flight together, each diffed against itself alone on base.

Field bugs (docs/channels.md, "mixed_batch"): rows of one batch with
different accepted lengths, mixed prefill and decode, different sampling
parameters; tokens of one request appear in another (vLLM #14645), special
tokens injected into some rows. The suite's own concurrent pass sends
alike requests (greedy, no stops, all streamed); this one mixes them.

``BATCH`` = 8 requests (more than any spec depth we run, k <= 4), made from
the suite's probes in turn: short and long prompts; ``max_tokens`` cycling
through 8, 16, 24 and 32 (rows finish at different steps); stop strings on
five of them, of two kinds: ``","`` on two (``STOP_EARLY``: on prose it
ends the request within a few tokens, inside a speculative run) and
``"Observation:"`` on three (``STOP_HELD``: an agent's stop string the
model does not write, so those requests stay in flight with stop strings
for their whole budget: a batch stays heterogeneous for as long as it
runs, which a field model's prose would not give with ``","`` alone;
docs/channels.md, "The nightly selftest on the field model"); every other
one streamed. Each arm sends every request alone (one at a time,
``concurrency`` 1) and then all of them at once (``concurrency`` 8),
``ROUNDS`` = 4 times (stored as repeats 0-3): 40 short requests. Several
rounds because how long a batch stays mixed depends on how the engine
schedules 8 requests that arrive together: on the 2-core CPU a round of the
field model changed 4 of 8 outputs under ``batch_swap`` in one run and none
in another (the fault fires only in a step that holds two speculating rows
beside a stop-string request); in the nightly selftest of 2026-12-04 the
first round changed none and the second five. A round costs about 0.3 s
there. Every output, alone or batched,
is diffed against the same request alone on base (token_diff's near-tie
rule); where base's own batched output differs from its alone output, or an
A/A copy differs from base, a divergence is WARN "not attributable".
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, differs_alone, judge_against_base
from observatory.channels.view import ChannelView
from observatory.model.probes import Probe
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "mixed_batch"
BATCH = 8
MAX_TOKENS = (8, 16, 24, 32)
STOP_EARLY = [","]
STOP_HELD = ["Observation:"]
ROUNDS = 4  # times the whole batch is sent at once
ALONE, BATCHED = "alone", "batch"


def plan(suite: list[Probe]) -> list[Probe]:
    """BATCH heterogeneous requests made from the suite's probes in turn."""
    if not suite:
        return []
    out = []
    for i in range(BATCH):
        p = suite[i % len(suite)]
        stop = STOP_EARLY if i % 3 == 2 else STOP_HELD if i % 3 == 1 else None
        sampling = {"stop": list(stop)} if stop else {}
        out.append(Probe(name=f"{NAME}/{i:02d}/{p.name}", category=p.category, messages=p.messages, prompt=p.prompt,
                         max_tokens=MAX_TOKENS[i % len(MAX_TOKENS)], tools=p.tools, tool_choice=p.tool_choice,
                         channel=NAME, sampling=sampling, meta={"index": i, "of": p.name, "stream": i % 2 == 0}))
    return out


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Every request alone, then all at once, to one live arm."""
    assert run.client is not None  # a channel measures a live arm
    client = run.client
    for i, probe in enumerate(probes):
        run.reporter.step(run.arm, f"{NAME} alone", i, len(probes))
        resp = client.run(probe, stream=bool(probe.meta["stream"]))
        run.store_result(probe, resp, NAME, concurrency=1)
        run.check_alive(resp)
        if not run.live:
            return
    for round_ in range(ROUNDS):
        run.reporter.step(run.arm, f"{NAME} batch", round_, ROUNDS)
        with ThreadPoolExecutor(max_workers=len(probes)) as ex:
            resps = list(ex.map(lambda p: client.run(p, stream=bool(p.meta["stream"])), probes))
        for probe, resp in zip(probes, resps):
            run.store_result(probe, resp, NAME, repeat=round_, concurrency=len(probes))
        for resp in resps:
            run.check_alive(resp)
        if not run.live:
            return


def _how(r: StoredResult) -> str:
    """How a result was sent: alone, or in the batch (its round after the first: "batch 2")."""
    if r.concurrency == 1:
        return ALONE
    return BATCHED if not r.repeat else f"{BATCHED} {r.repeat + 1}"


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        p = view.probe(r)
        how = _how(r)
        label = {"index": p.meta["index"], "probe": p.meta["of"], "how": how, "max_tokens": p.max_tokens,
                 "stop": "yes" if p.sampling.get("stop") else "no", "stream": "yes" if p.meta["stream"] else "no"}
        out[(p.name, how)] = Keyed((p.name, how), label, r)
    return out


def _base_noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
    """Requests whose batched output on base (in any round) differs from base's alone output."""
    out: dict[tuple[Any, ...], str] = {}
    for how in sorted({h for _, h in ref if h != ALONE}):
        out.update(differs_alone(ref, ALONE, how, "base differs alone and in the batch"))
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Each output, alone or batched, against the same request alone on base."""
    return judge_against_base(view, _keyed, lambda key: (key[0], ALONE), _base_noise, what="requests")


CHANNEL = Channel(
    name=NAME,
    title="Mixed concurrent batches",
    catches="batch composition leaking between rows: one request's tokens in another, rows with other parameters",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("batch_swap",),
    options={"batch": BATCH, "max_tokens": list(MAX_TOKENS), "stop": {"early": STOP_EARLY, "held": STOP_HELD},
             "streamed": "every other", "rounds": ROUNDS},
)
