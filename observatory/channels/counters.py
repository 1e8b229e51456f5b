"""Channel ``counters``: the engine's speculative-decoding counters, checked against themselves and the stream.

Acceptance figures are only as good as the counters they come from; the
field saw counters that counted the wrong thing, double-counted, and
per-position counts that did not add up. On each arm this channel sends
`REQUESTS` suite probes (no tools) streamed, one at a time, reading the
counters before and after each (fresh reads), and then judges every counter
delta the arm stored (its own, the suite's streamed probes, the timed
batches) against invariants that hold by definition, so a breach is a FAIL
without any noise allowance:

- no counter decreases between two reads;
- accepted <= draft tokens <= k x drafts;
- the per-position accepted counts sum to accepted and do not increase with
  position (a draft at position j+1 is accepted only after the one at j);
- per request of this channel (read once the counters settled, so the
  delta brackets exactly that request): a step that
  verified drafts emits 1 + its accepted tokens, so accepted <= completion
  tokens - 1 - drafts + k (the last step may be cut by a stop or max_tokens,
  at most k tokens) and drafts <= completion tokens - 1.

The stream's own acceptance estimate (tokens per chunk: the engine sends one
chunk per step) against the counters' tau is the performance check
``stream_tau`` (`observatory.judge.perf_gates.stream_tau_check`), applied here to
this channel's fresh requests as part ``counters:stream_tau`` (WARN beyond
its noise, as there). An arm with no speculation, or counters the engine
does not report, is "not measurable". Cost: 3 requests per arm.
"""

from __future__ import annotations

import time
from dataclasses import replace
from itertools import pairwise
from typing import Any

from observatory.channels import Channel
from observatory.channels.live_arm import LiveArm
from observatory.channels.view import ChannelView
from observatory.engines.metrics import SpecCounters, impossible
from observatory.judge.figures import acceptance
from observatory.judge.perf_gates import stream_tau_check
from observatory.judge.speed import stream_tau
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, PASS, SKIP
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "counters"
REQUESTS = 3
SETTLE_S = 0.05
SETTLE_READS = 20


def plan(suite: list[Probe]) -> list[Probe]:
    """REQUESTS suite probes without tools, one per category, as this channel's own."""
    picked: list[Probe] = []
    for p in suite:
        if not p.tools and not p.channel and p.category not in {q.category for q in picked}:
            picked.append(p)
    return [replace(p, name=f"{NAME}:{p.name}", channel=NAME, gates=[], expect={}, meta={"of": p.name})
            for p in picked[:REQUESTS]]


def settled(run: LiveArm) -> SpecCounters:
    """The counters once two reads SETTLE_S apart agree (the engine records a step's stats after it streams it)."""
    prev: SpecCounters = run.counters()
    for _ in range(SETTLE_READS):
        time.sleep(SETTLE_S)
        cur: SpecCounters = run.counters()
        if cur == prev:
            return cur
        prev = cur
    return prev


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each probe streamed alone, the counters read (settled) just before and after it."""
    assert run.client is not None  # a channel measures a live arm
    for i, p in enumerate(probes):
        before = settled(run)
        resp = run.client.run(p, stream=True)
        delta = settled(run) - before
        run.store_result(p, resp, NAME, delta if resp.ok else None, repeat=i)
        run.check_alive(resp)


def _k(arm: StoredArm) -> int | None:
    spec = (arm.launch or {}).get("speculative_config")
    k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    return k if isinstance(k, int) and k > 0 else None


def breaches(c: SpecCounters, k: int | None, tokens: int | None = None) -> list[str]:
    """Every invariant one counter delta breaks (TOKENS: the request's completion tokens, when it is one request)."""
    out: list[str] = []
    if c.problem:
        out.append(c.problem)
        return out
    d, a, per = c.drafts, c.accepted, c.accepted_per_pos
    out += impossible(c, k)  # the invariants the arm's figures are refused on too (observatory.judge.figures)
    if per and a is not None and sum(per) != a:
        out.append(f"per-position accepted {per} sum to {sum(per)}, not accepted {a}")
    if per and any(later > earlier for earlier, later in pairwise(per)):
        out.append(f"per-position accepted {per} increase with position")
    if tokens is not None and k is not None and d is not None and a is not None and d > 0:
        if a > tokens - 1 - d + k:
            out.append(f"accepted {a} > what the {tokens} streamed tokens allow ({tokens} - 1 - {d} drafts + k={k})")
        if d > tokens - 1:
            out.append(f"drafts {d} > streamed tokens - 1 = {tokens - 1}")
    return out


def _tokens(r: StoredResult) -> int | None:
    n = (r.usage or {}).get("completion_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def judge(view: ChannelView) -> list[Verdict]:
    """Per spec arm: counter invariants over every stored delta, and the stream's tau against the counters'."""
    rows: list[Verdict] = []
    for arm in view.arms:
        k = _k(arm)
        if k is None or arm.status != "ok":
            continue
        table: list[dict[str, Any]] = []
        bad: list[str] = []
        per_request = [(f"{NAME} {view.probe(r).meta.get('of', '')}", r) for r in view.results(arm) if r.ok]
        per_request += [(f"stream {r.probe_id}", r) for r in view.stored(arm, "stream") if r.ok]
        reported = 0
        total = SpecCounters()
        for label, r in per_request:
            c = SpecCounters.from_dict(r.counters_delta)
            if c.drafts is None or c.accepted is None:
                continue
            reported += 1
            if r.mode == NAME:
                total = total + c
            # the per-request bound needs reads that bracket exactly one request: this channel's settled reads
            found = breaches(c, k, _tokens(r) if r.mode == NAME else None)
            bad += [f"{label}: {b}" for b in found]
            table.append({"read": label, "drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted": c.accepted,
                          "per_position": str(c.accepted_per_pos)[:80], "tokens": _tokens(r),
                          "result": "; ".join(found)[:80] or "ok"})
        for m in view.measurements(arm):
            c = SpecCounters.from_dict(m.counters_delta)
            if c.drafts is None or c.accepted is None:
                continue
            reported += 1
            found = breaches(c, k)
            bad += [f"timed c={m.concurrency}: {b}" for b in found]
            table.append({"read": f"timed c={m.concurrency} #{m.repeat}", "drafts": c.drafts,
                          "draft_tokens": c.draft_tokens, "accepted": c.accepted,
                          "per_position": str(c.accepted_per_pos)[:80], "tokens": None,
                          "result": "; ".join(found)[:80] or "ok"})
        details = {"table": table, "k": k}
        if not reported:
            rows.append(view.verdict(arm, SKIP, "not measurable: the engine reported no spec counters", details,
                                     part="invariants"))
        elif bad:
            rows.append(view.verdict(arm, FAIL, f"{len(bad)} counter invariant(s) broken: {bad[0]}", details,
                                     part="invariants"))
        else:
            rows.append(view.verdict(arm, PASS, f"{reported} counter reads keep every invariant", details,
                                     part="invariants"))
        rows.append(_stream_tau_row(view, arm, total))
    return rows


def _stream_tau_row(view: ChannelView, arm: StoredArm, total: SpecCounters) -> Verdict:
    """This channel's fresh requests: tokens per streamed chunk against the counters' tau (perf_gates' check)."""
    mine = [r for r in view.results(arm) if r.ok]
    k = _k(arm)
    tau = acceptance(total, k)["tau"] if mine else None
    bursty = any(n is not None and k is not None and n > k + 1 for r in mine for _, n in (r.chunks or []))
    check = stream_tau_check(stream_tau(mine), tau, bursty)
    verdict = check["verdict"]
    reason = check["reason"] if verdict != SKIP else f"not measurable: {check['reason']}"
    return view.verdict(arm, verdict, reason, {"table": [check]}, part="stream_tau")


CHANNEL = Channel(
    name=NAME,
    title="Counters that can be checked: invariants and the stream's tau",
    catches="acceptance counters that lie: inflated, double-counted, per-position counts that do not add up",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("inflate_accepted",),
    options={"requests": REQUESTS},
)
