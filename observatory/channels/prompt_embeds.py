"""Prompt embeddings: the same prompt sent as token ids and as the model's own input embeddings.

Field bugs (docs/channels.md, "prompt_embeds"): with ``prompt_embeds``, MTP or
DFlash drafters read draft positions that were never token ids, or stale
embeddings in verification (vLLM PR #37170, #42168, #57356): logits diverge
from the text-prompt run from the second generated token, acceptance near 0,
or the engine dies at the first such request. The suite never sends one.

Requests, on a second engine of each arm launched with the engine's switch
for embeddings (its adapter's ``feature_args("prompt_embeds")``: vLLM
``--enable-prompt-embeds``, which routes every request through the
embeddings input, so the arm's own engine, as deployed, is left alone; not
on A/A copies, base's own answers are the control): ``REQUESTS`` suite
probes without tools, greedy, non-streamed, at most ``MAX_TOKENS`` tokens,
each as the token ids the server renders it to (``ids``) and then as those
ids' rows of the checkpoint's embedding table (``embeds``:
`observatory.client.embeds`, encoded by the adapter's `prompt_embeds_body`).

Verdicts:
- ``prompt_embeds``: every answer diffed against base's ``ids`` answer
  (pairs.py); where base's own embeds answer differs from its ids answer,
  divergences are WARN "not attributable" (the table is not the input the
  model expects, or the engine's embeddings path differs without
  speculation).
- ``prompt_embeds:engine``: the second engine of a speculating arm that died
  under the embeddings requests while base's served them is a FAIL (every
  later request fails: the engine's finding, named with its known repair
  where `observatory.faults.repairs.ENGINE_BUGS` has one); not launched or
  not served (the engine takes no embeddings, the model is not on this host,
  no torch to encode them): "not measurable" (SKIP).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from observatory.channels import Channel
from observatory.channels.engine_conditions import facts
from observatory.channels.input_paths import (
    EMBEDS,
    IDS,
    PATH_INDEX,
    as_ids,
    keyed_paths,
    path_noise,
    pick,
    rendered_ids,
)
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.client.embeds import embedding_rows
from observatory.faults.repairs import known_bug
from observatory.model.errors import NOT_REPORTED, ObservatoryError
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, BASE, FAIL, PASS, SKIP, WARN
from observatory.store.stored import StoredArm, Verdict

NAME = "prompt_embeds"
REQUESTS = 3
MAX_TOKENS = 24
FEATURE = "prompt_embeds"


def plan(suite: list[Probe]) -> list[Probe]:
    """REQUESTS suite probes without tools."""
    return pick(suite, NAME, REQUESTS, MAX_TOKENS)


def _unsent(run: LiveArm, probes: list[Probe], why: str) -> None:
    for probe in probes:
        run.store_result(probe, Response(error=f"{NOT_REPORTED}: {why}", error_kind="not_reported"), NAME,
                         repeat=PATH_INDEX[EMBEDS])


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """On a second engine with embeddings on: each probe as ids, then as embeddings."""
    client = run.client
    assert client is not None
    if run.arm.copy_of is not None and not run.arm.is_spec:
        run.note(NAME, skipped="an A/A copy: base's own answers are the control")
        return
    adapter = client.adapter
    flags = list(getattr(adapter, "feature_args", lambda f: [])(FEATURE))
    ids = {p.name: rendered_ids(client, p) for p in probes}
    bodies: dict[str, dict[str, Any]] = {}
    try:
        for p in probes:
            got = ids[p.name]
            if got is None:
                continue
            rows = embedding_rows(client.model(), got)
            body = getattr(adapter, "prompt_embeds_body", lambda v, d: None)(rows.values, rows.dtype)
            if body is None:
                raise ObservatoryError(f"{getattr(adapter, 'display', adapter.name)} takes no prompt embeddings")
            bodies[p.name] = body
    except ObservatoryError as e:
        _unsent(run, probes, str(e))
        return
    with run.sibling(NAME, engine_args=flags) as twin:
        if twin is None or twin.client is None:
            _unsent(run, probes, "the engine with prompt embeddings on was not launched")
            return
        for i, probe in enumerate(probes):
            twin.reporter.step(twin.arm, NAME, i, len(probes))
            got = ids[probe.name]
            if got is None or probe.name not in bodies:
                twin.store_result(probe, Response(error="not sent: /tokenize did not give the prompt's ids",
                                                  error_kind="http"), NAME, repeat=PATH_INDEX[IDS])
                continue
            sent = as_ids(probe, got)
            resp = twin.client.run(sent, stream=False)
            twin.store_result(probe, resp, NAME, repeat=PATH_INDEX[IDS])
            twin.check_alive(resp)
            resp = twin.client.run(sent, stream=False, prompt=bodies[probe.name])
            twin.store_result(probe, resp, NAME, repeat=PATH_INDEX[EMBEDS])
            twin.check_alive(resp)


def _sibling(arm: StoredArm) -> dict[str, Any]:
    got = facts(arm, NAME).get("sibling")
    return dict(got) if isinstance(got, dict) else {}


def _engine_verdict(view: ChannelView, arm: StoredArm, base_ended: bool) -> Verdict:
    sib = _sibling(arm)
    if not sib:
        return view.verdict(arm, SKIP, "not measurable: no engine with prompt embeddings on ran "
                            f"({facts(arm, NAME).get('skipped') or 'not served here'})", part="engine")
    if not sib.get("launched"):
        return view.verdict(arm, SKIP, f"not measurable: the engine with prompt embeddings on did not start "
                            f"({sib.get('reason')})", sib, part="engine")
    if not sib.get("ended"):
        return view.verdict(arm, PASS, "the engine with prompt embeddings on served every request", sib,
                            part="engine")
    cause = str(sib.get("cause") or sib.get("ended"))  # the engine log's first ERROR exception, where it logged one
    bug = known_bug([cause])
    known = (f"; known engine bug of {bug.engine} (repair: +repair={bug.repair}; {bug.reproduction})"
             if bug is not None else "")
    what = f"the engine died under the prompt_embeds requests: {cause}{known}"
    if view.role(arm) == BASE:
        return view.verdict(arm, WARN, f"{what} (base: the embeddings path is broken without speculation)", sib,
                            part="engine")
    if base_ended:
        return view.verdict(arm, WARN, f"not attributable: base's engine died too; {what}", sib, part="engine")
    return view.verdict(arm, FAIL, f"{what}; base's engine served them", sib, part="engine")


def _answered(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    """The arm's answers by (probe, path), less the request its second engine died under (the engine verdict
    judges the death: one finding, one verdict)."""
    keyed = keyed_paths(view, arm)
    if _sibling(arm).get("ended"):
        keyed = {k: v for k, v in keyed.items() if v.result.ok}
    return keyed


def judge(view: ChannelView) -> list[Verdict]:
    """Answers against base's ids answers; each arm's engine with embeddings on: did it survive them."""
    copies = [a for a in view.arms if view.role(a) == AA_COPY and not view.results(a)]
    judged = dataclasses.replace(view, arms=[a for a in view.arms if a not in copies])
    out = judge_against_base(judged, _answered, lambda key: (key[0], IDS), path_noise(IDS),
                             what="answers (token ids and embeddings)")
    out += [view.verdict(a, SKIP, "not sent on an A/A copy: base's own ids and embeddings answers are the control")
            for a in copies]
    base = view.base
    base_ended = bool(base is not None and _sibling(base).get("ended"))
    out += [_engine_verdict(view, a, base_ended) for a in view.arms if a not in copies]
    return out


CHANNEL = Channel(
    name=NAME,
    title="Prompt embeddings (against the same prompt as token ids)",
    catches="a spec arm that answers a prompt given as embeddings otherwise than the same ids, or dies on it",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("embeds_drafts",),
    options={"requests": REQUESTS, "max_tokens": MAX_TOKENS, "paths": [IDS, EMBEDS],
             "engine": "a second engine of each arm with the engine's prompt-embeddings switch on"},
)
