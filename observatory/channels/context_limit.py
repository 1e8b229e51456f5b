"""Channel ``context_limit``: requests that run into the context limit while others share the batch.

Field bugs (BUGZOO 2026-H2, "draft slots at the context or budget limit":
SGLang #33579, vLLM #57941, #42533): a request that generates up to
``max_model_len``, or whose prompt leaves fewer free positions than k + 1,
makes the scheduler clip its drafts; a batch built around the clipped row
can corrupt a *neighbour's* row with no error, and a token budget that
forgets the drafts errors or overshoots. The suite never comes near the
limit, and the long-prompt channel sends one request at a time.

Requests, per arm (the prompts of the boundary requests are token ids from
the server's own ``/tokenize``, length_sweep's padding, so their lengths are
exact; the limit is the arm's served ``max_model_len``, /v1/models):

- neighbours: `NEIGHBOURS` suite chat prompts without tools, streamed,
  greedy, EOS ignored, ``max_tokens`` `NEIGHBOUR_TOKENS` minus 0, 1 and 2
  (every neighbour's last step meets its own token budget at another phase
  of a speculative step: the drafts near the budget);
- boundary requests (completions, EOS ignored): ``room:F`` for F in
  `ROOMS` (a prompt of ``max_model_len`` − F tokens and ``max_tokens`` F:
  fewer free positions than k + 1 for any k >= F) and ``fill`` (a prompt
  `FILL` tokens short of the limit, generating up to it);
- each request alone first, then `ROUNDS` rounds: the neighbours at once,
  and once they are `START_AT` through (0.15, 0.35, 0.55 of their own median
  duration alone on this arm) every boundary request at once, so the
  boundary requests' prefill and last steps fall inside the neighbours'
  speculative steps.

Verdicts:
- ``context_limit``: every request, alone or in a round, diffed against
  base's same request (pairs.py: token ids with the near-tie rule; WARN not
  attributable where base's own round output differs from its alone output,
  or an A/A copy differs);
- ``context_limit:boundary``: each boundary request's finish_reason,
  usage (prompt and completion tokens) and ids against base's same request,
  and on every arm the rules of the limit: prompt + completion tokens never
  past ``max_model_len``, finish_reason "length" (EOS is ignored), as many
  ids as usage counts. A difference where base is steady is a FAIL.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from observatory.channels import Channel
from observatory.channels.length_sweep import padded_ids
from observatory.channels.pairs import Keyed, diff, differs_alone, judge_against_base
from observatory.client.answer import Response
from observatory.engines.server_facts import served_facts
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, BASE, FAIL, INVALID, PASS, SKIP, UNJUDGED, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.client.send import EngineClient
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "context_limit"
NEIGHBOURS = 3
NEIGHBOUR_TOKENS = 256  # the neighbours' max_tokens: 256, 255, 254 (EOS ignored): in flight while the boundary runs
ROOMS = (1, 2, 3)  # free positions the room:F prompts leave (fewer than k + 1 for every k >= F)
FILL = 16  # the fill request's prompt is this many tokens short of the limit; it generates up to it
# each round's boundary requests start this far into it (a share of the neighbours' own median duration alone):
# how far the neighbours have got when a boundary request's prefill lands depends on the engine's scheduling
# and the host's load; in the first fault session only the second of two rounds at 0.25 changed a neighbour
START_AT = (0.15, 0.35, 0.55)
ROUNDS = len(START_AT)
QUESTION = "\nQuestion: name the three primary colours, one per line.\nAnswer:"
FILLER = " The quick brown fox jumps over the lazy dog."
ALONE = "alone"


def _is_boundary(p: Probe) -> bool:
    return bool(p.meta.get("room") or p.meta.get("fill"))


def plan(suite: list[Probe]) -> list[Probe]:
    """The neighbours (suite chat prompts without tools) and the boundary requests (completions)."""
    pool = [p for p in suite if not p.tools and not p.channel and p.kind == "chat"][:NEIGHBOURS]
    out = [Probe(name=f"{NAME}/n{i}/{p.name}", category=p.category, messages=p.messages,
                 max_tokens=NEIGHBOUR_TOKENS - i, channel=NAME, sampling={"ignore_eos": True},
                 meta={"of": p.name, "index": i}) for i, p in enumerate(pool)]
    out += [Probe(name=f"{NAME}/room{f}", category=NAME, prompt=QUESTION, max_tokens=f, channel=NAME,
                  sampling={"ignore_eos": True}, meta={"room": f, "index": NEIGHBOURS + i})
            for i, f in enumerate(ROOMS)]
    out.append(Probe(name=f"{NAME}/fill", category=NAME, prompt=QUESTION, max_tokens=FILL, channel=NAME,
                     sampling={"ignore_eos": True}, meta={"fill": FILL, "index": NEIGHBOURS + len(ROOMS)}))
    return out


def boundary_prompt(probe: Probe, limit: int, question: list[int], filler: list[int]) -> Probe:
    """A boundary probe with its token-id prompt: LIMIT minus its room (or FILL) tokens long."""
    short = int(probe.meta.get("room") or probe.meta.get("fill") or 0)
    return dataclasses.replace(probe, prompt=padded_ids(question, filler, limit - short))


def _send(client: EngineClient, p: Probe) -> Response:
    return client.run(p, stream=p.kind == "chat")


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each request alone, then ROUNDS rounds: the neighbours, and the boundary requests START_AT into them."""
    client = run.client
    assert client is not None
    limit = served_facts(client).get("max_model_len")
    question, filler = client.tokenize(QUESTION), client.tokenize(FILLER)
    run.note(NAME, max_model_len=limit)
    neighbours = [p for p in probes if not _is_boundary(p)]
    bounds = [p for p in probes if _is_boundary(p)]
    if not isinstance(limit, int) or not question or not filler:
        why = "no max_model_len served (/v1/models)" if not isinstance(limit, int) else "no /tokenize"
        for p in probes:
            run.store_result(p, Response(error=f"not sent: {why}", error_kind="http"), NAME)
        return
    sent = {p.name: boundary_prompt(p, limit, question, filler) for p in bounds}
    took: list[float] = []
    for i, p in enumerate(probes):
        run.reporter.step(run.arm, f"{NAME} alone", i, len(probes))
        resp = _send(client, sent.get(p.name, p))
        run.store_result(p, resp, NAME)
        run.check_alive(resp)
        if not run.live:
            return
        if p in neighbours and resp.duration_ms:
            took.append(resp.duration_ms / 1000.0)
    alone = statistics.median(took) if took else 0.0
    for round_, share in enumerate(START_AT):
        run.reporter.step(run.arm, f"{NAME} rounds", round_, ROUNDS)
        resps = _round(client, neighbours, [sent[p.name] for p in bounds], share * alone)
        for p, resp in zip([*neighbours, *bounds], resps):
            run.store_result(p, resp, NAME, repeat=round_ + 1, concurrency=len(probes))
        for resp in resps:
            run.check_alive(resp)
        if not run.live:
            return


def _round(client: EngineClient, neighbours: list[Probe], bounds: list[Probe], delay: float) -> list[Response]:
    """The neighbours at once; DELAY seconds later the boundary requests at once; every answer, in order."""
    with ThreadPoolExecutor(max_workers=len(neighbours) + len(bounds)) as ex:
        first = [ex.submit(_send, client, p) for p in neighbours]
        time.sleep(delay)
        second = [ex.submit(_send, client, p) for p in bounds]
        return [f.result() for f in [*first, *second]]


# -- judging ---------------------------------------------------------------------------------------------------
def _how(r: StoredResult) -> str:
    return ALONE if r.concurrency == 1 else f"round {r.repeat}"


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        p = view.probe(r)
        how = _how(r)
        label = {"index": p.meta["index"], "request": p.name.split("/", 1)[1], "how": how,
                 "max_tokens": p.max_tokens}
        out[(p.name, how)] = Keyed((p.name, how), label, r)
    return out


def _base_noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
    """Requests whose round output on base differs from base's alone output."""
    out: dict[tuple[Any, ...], str] = {}
    for how in sorted({h for _, h in ref if h != ALONE}):
        out.update(differs_alone(ref, ALONE, how, "base differs alone and in the round"))
    return out


def limit_rules(r: StoredResult, limit: int | None) -> list[str]:
    """What a boundary answer breaks of the context limit's rules (EOS ignored: it ends by length)."""
    usage = r.usage or {}
    prompt, done = usage.get("prompt_tokens"), usage.get("completion_tokens")
    out = []
    if isinstance(limit, int) and isinstance(prompt, int) and isinstance(done, int) and prompt + done > limit:
        out.append(f"{prompt} + {done} tokens past max_model_len {limit}")
    if r.finish_reason != "length":
        out.append(f"finish_reason {r.finish_reason!r} where EOS is ignored and the limit ends it ('length')")
    if isinstance(done, int) and done != len(r.token_ids or []):
        out.append(f"usage says {done} completion tokens, {len(r.token_ids or [])} ids came back")
    return out


def _facts(r: StoredResult) -> tuple[Any, ...]:
    usage = r.usage or {}
    return (r.finish_reason, usage.get("prompt_tokens"), usage.get("completion_tokens"), list(r.token_ids or []))


NEAR_TIE_ROW = "ids part at base's near-tie"  # a boundary row whose ids flipped at a near-tie (`_near_tie`)


def _near_tie(view: ChannelView, r: StoredResult, b: StoredResult) -> str | None:
    """Where R and base's B agree in finish and usage and their ids part at one of base's near-ties (token_diff's
    rule, pairs.diff): what the row says; the row ``context_limit`` and the near-tie rate against the controls
    (observatory.judge.rates) judge that flip, so it is no boundary fault. None for any other difference."""
    if _facts(r)[:3] != _facts(b)[:3]:
        return None
    verdict, d = diff(view, r, b)
    if verdict == FAIL or d.get("position") is None:
        return None
    margin = d.get("margin")
    return (f"{NEAR_TIE_ROW} (token {d['position']}"
            + (f", margin {float(margin):.3f} nats" if margin is not None else "") + "): judged as a near-tie flip")


def _limit(view: ChannelView, arm: StoredArm) -> int | None:
    got = ((arm.launch or {}).get("channel_facts") or {}).get(NAME, {}).get("max_model_len")
    return got if isinstance(got, int) else None


def judge_boundary(view: ChannelView) -> list[Verdict]:
    """``context_limit:boundary``: each boundary answer's finish, usage and ids against base's, and the rules."""
    base = view.base
    part = "boundary"
    if base is None:
        return [view.verdict(a, UNJUDGED, "no base arm to compare with", part=part) for a in view.arms]

    def answers(arm: StoredArm) -> dict[tuple[str, str], StoredResult]:
        return {(view.probe(r).name, _how(r)): r for r in view.results(arm) if _is_boundary(view.probe(r))}

    ref = answers(base)
    steady = {k: _facts(r) == _facts(ref[(k[0], ALONE)]) for k, r in ref.items() if (k[0], ALONE) in ref}
    copies = [answers(a) for a in view.arms if view.role(a) == AA_COPY]
    out = []
    for arm in view.arms:
        if arm.status != "ok":
            continue
        mine, limit = answers(arm), _limit(view, arm)
        table: list[dict[str, Any]] = []
        fails: list[str] = []
        warns: list[str] = []
        for key, r in sorted(mine.items()):
            usage = r.usage or {}
            row: dict[str, Any] = {"request": key[0].split("/", 1)[1], "how": key[1], "finish": r.finish_reason,
                                   "prompt_tokens": usage.get("prompt_tokens"),
                                   "completion_tokens": usage.get("completion_tokens")}
            b = ref.get(key)
            broken = limit_rules(r, limit) if r.ok else []
            if not r.ok:
                failed_on_base = b is None or not b.ok
                row["result"] = "failed here and on base" if failed_on_base else f"FAIL: failed here: {r.error}"
                if not failed_on_base:
                    fails.append(f"{key[0]} ({key[1]}): failed where base answered")
            elif broken:
                row["result"] = "FAIL: " + broken[0]
                fails.append(f"{key[0]} ({key[1]}): {broken[0]}")
            elif arm.id == base.id or b is None or not b.ok:
                row["result"] = "rules hold" if arm.id == base.id else "base did not answer"
            elif _facts(r) == _facts(b):
                row["result"] = "equal"
            elif (tie := _near_tie(view, r, b)) is not None:
                row["result"] = tie
            else:
                noisy = not steady.get(key, True) or any(key in c and _facts(c[key]) != _facts(b) for c in copies)
                why = next(n for n, x, y in zip(("finish_reason", "prompt_tokens", "completion_tokens", "ids"),
                                                  _facts(r), _facts(b)) if x != y)
                row["result"] = ("WARN (base varies here): " if noisy else "FAIL: ") + f"{why} differs from base's"
                (warns if noisy else fails).append(f"{key[0]} ({key[1]}): {why} differs from base's")
            table.append(row)
        details = {"table": table, "max_model_len": limit}
        role = view.role(arm)
        if fails and role in (BASE, AA_COPY):
            level = INVALID if role == BASE else WARN
            out.append(view.verdict(arm, level, f"the reference breaks the limit's rules: {fails[0]}", details,
                                    part=part))
        elif fails:
            out.append(view.verdict(arm, FAIL, f"{len(fails)} boundary answer(s) wrong: {fails[0]}", details,
                                    part=part))
        elif warns:
            out.append(view.verdict(arm, WARN, f"{len(warns)} boundary answer(s) differ where base varies: "
                                    f"{warns[0]}", details, part=part))
        elif not table:
            out.append(view.verdict(arm, SKIP, "not measurable: no boundary request answered", details, part=part))
        else:
            ties = sum(str(t["result"]).startswith(NEAR_TIE_ROW) for t in table)
            out.append(view.verdict(arm, PASS, f"{len(table)} boundary answers: finish_reason, usage and ids "
                                    "as base's" + (f" ({ties} parted from base's at a near-tie)" if ties else "")
                                    + ", within max_model_len", details, part=part))
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Every request against base's same request; the boundary answers' finish and usage apart."""
    return [*judge_against_base(view, _keyed, lambda key: key, _base_noise, what="requests"),
            *judge_boundary(view)]


CHANNEL = Channel(
    name=NAME,
    title="At the context limit, under concurrency",
    catches="a neighbour's row corrupted, or the boundary request's finish and usage wrong, when one request "
            "runs into max_model_len or its token budget with drafts in flight",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("limit_neighbour",),
    options={"neighbours": NEIGHBOURS, "neighbour_tokens": NEIGHBOUR_TOKENS, "rooms": list(ROOMS), "fill": FILL,
             "rounds": ROUNDS, "start_at": list(START_AT)},
)
