"""Input paths: the same prompt sent as text and as token ids, each answer diffed against base's text answer.

Field bugs (docs/channels.md, "input_paths"): a speculating engine whose
drafter or verifier reads the prompt through another path than the target
(token ids given by the client, ids rendered from chat messages, embeddings:
channel ``prompt_embeds``) answers right to one and wrong to the other; a
suite that sends every prompt one way never sees it.

Requests: ``REQUESTS`` suite probes without tools (one per category first),
at most ``MAX_TOKENS`` tokens, greedy, non-streamed, twice on every arm: as
the suite sends them (``text``: chat messages or prompt text) and as the
token ids the server renders them to (``ids``: its ``/tokenize`` with the
chat template applied, sent as a completion of those ids).

Verdict ``input_paths``: every answer diffed against base's ``text`` answer
(pairs.py: hard divergence FAIL, near-tie WARN). Where base's own ``ids``
answer differs from its ``text`` answer, the engine's two paths differ
without speculation: divergences there are WARN "not attributable".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.pairs import Keyed, judge_against_base, same_tokens
from observatory.channels.view import ChannelView
from observatory.client.send import EngineClient
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe
from observatory.model.vocabulary import SKIP
from observatory.store.stored import StoredArm, Verdict

NAME = "input_paths"
REQUESTS = 6
MAX_TOKENS = 32
TEXT, IDS, EMBEDS = "text", "ids", "embeds"  # the paths, and each result's repeat index below
PATH_INDEX = {TEXT: 0, IDS: 1, EMBEDS: 2}


def pick(suite: list[Probe], channel: str, n: int, max_tokens: int) -> list[Probe]:
    """N suite probes without tools, one per category first, as CHANNEL's own (greedy, at most MAX_TOKENS)."""
    plain = [p for p in suite if not p.tools and not p.channel]
    picked: list[Probe] = []
    for p in plain:
        if p.category not in {q.category for q in picked}:
            picked.append(p)
    picked += [p for p in plain if p not in picked]
    return [replace(p, name=f"{channel}:{p.name}", channel=channel, gates=[], expect={}, sampling={},
                    max_tokens=min(p.max_tokens, max_tokens), meta={"of": p.name}) for p in picked[:n]]


def plan(suite: list[Probe]) -> list[Probe]:
    """REQUESTS suite probes without tools."""
    return pick(suite, NAME, REQUESTS, MAX_TOKENS)


def rendered_ids(client: EngineClient, probe: Probe) -> list[int] | None:
    """PROBE's prompt as the token ids the server renders it to (chat template applied), through its engine's
    adapter (`EngineAdapter.tokenize`); None where the server cannot say."""
    def post(path: str, body: dict[str, Any]) -> Any:
        r = client.fetch(path, 30.0, body)
        if r.status_code != 200:
            raise ValueError(f"POST {path} answered {r.status_code}")
        return r.json()
    try:
        ids = client.adapter.tokenize(post, "", client.served_model(), probe).get("ids")
    except (httpx.HTTPError, ValueError, KeyError, TypeError, ObservatoryError):
        return None
    if not isinstance(ids, list) or not ids or not all(type(i) is int for i in ids):
        return None
    return ids


def as_ids(probe: Probe, ids: list[int]) -> Probe:
    """PROBE as a completion of the token ids IDS (its messages rendered by the server)."""
    return replace(probe, messages=None, prompt=ids)


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each probe as text, then as the ids the server renders it to, one at a time (a prompt the server renders
    no ids for is sent as text only, and noted)."""
    client = run.client
    assert client is not None
    unrendered = []
    for i, probe in enumerate(probes):
        run.reporter.step(run.arm, NAME, i, len(probes))
        resp = client.run(probe, stream=False)
        run.store_result(probe, resp, NAME, repeat=PATH_INDEX[TEXT])
        run.check_alive(resp)
        ids = rendered_ids(client, probe)
        if ids is None:
            unrendered.append(probe.name)
            run.note(NAME, unrendered=unrendered)
            continue
        resp = client.run(as_ids(probe, ids), stream=False)
        run.store_result(probe, resp, NAME, repeat=PATH_INDEX[IDS])
        run.check_alive(resp)


def keyed_paths(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    """The arm's answers by (probe, path)."""
    names = {v: k for k, v in PATH_INDEX.items()}
    out = {}
    for r in view.results(arm):
        probe = view.probe(r).meta.get("of", view.probe(r).name)
        path = names.get(r.repeat, str(r.repeat))
        out[(probe, path)] = Keyed((probe, path), {"probe": probe, "path": path,
                                                   "prompt_tokens": (r.usage or {}).get("prompt_tokens")}, r)
    return out


def path_noise(reference: str) -> Any:
    """Base's own noise: keys whose answer on base differs from base's REFERENCE-path answer of the same probe."""
    def noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
        out = {}
        for (probe, path), k in ref.items():
            first = ref.get((probe, reference))
            if path != reference and first is not None and not same_tokens(k.result, first.result):
                out[(probe, path)] = f"base's own {path} answer differs from its {reference} answer"
        return out
    return noise


def judge(view: ChannelView) -> list[Verdict]:
    """Every answer against base's text answer of the same probe; "not measurable" where base's server rendered
    no prompt as token ids (its engine's tokenize)."""
    base = view.base
    if base is not None and view.results(base) and not any(k[1] == IDS for k in keyed_paths(view, base)):
        return [view.verdict(a, SKIP, "not measurable: the server rendered none of the prompts as token ids "
                             "(its tokenize endpoint)") for a in view.arms]
    return judge_against_base(view, keyed_paths, lambda key: (key[0], TEXT), path_noise(TEXT),
                              what="answers (text and token-id prompts)")


CHANNEL = Channel(
    name=NAME,
    title="Input paths (text and token-id prompts)",
    catches="a spec arm that answers a prompt given as token ids otherwise than the same prompt as text",
    plan=plan,
    measure=measure,
    judge=judge,
    options={"requests": REQUESTS, "max_tokens": MAX_TOKENS, "paths": [TEXT, IDS]},
)
