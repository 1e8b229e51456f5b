"""Channel ``speculates``: proof that base is base and that every spec arm speculates on every class it serves.

Issue 49 item 10. A comparison means something only if its base never
speculated and its spec arm speculated on what it was judged on:

- **base is base.** Every non-speculating arm's speculative counters stay at
  zero over its whole life: this channel runs after every other channel and
  reads the server's cumulative counters (since it started: the warm-up, the
  suite, every channel before it), and the timed passes after it are read
  by their own deltas; no answer of it may state speculative counters
  either. Any draft is INVALID: the reference measured a speculating engine
  (a flag, a default, an image that turned it on), so nothing judged
  against it holds; the deployment's own output is not shown wrong, hence
  not FAIL (docs/design.md 3.3, "Proof that base is base").
- **a spec arm speculates on every class.** Each class of request the arm
  served (`observatory.channels.request_classes`: prompt length, cached
  prefix, category, tools, sampling, concurrency, turn), read from each
  answer's own counters (the per-request metrics; a /metrics delta where the
  request was sent alone), must have drafted: a class with at least
  `MIN_REQUESTS` answers of two tokens or more and no draft at all is a FAIL:
  the deployment silently runs without speculation for that class (a 2026
  class: default sampling settings that switch the spec path off), clearly
  slower for those users, and every correctness verdict on them is vacuous.
  An arm that drafted nothing at all is INVALID already ("speculation
  inactive", `observatory.judge.figures.validity`).

Costs one /metrics read per arm.
"""

from __future__ import annotations

from typing import Any

from observatory.channels import Channel
from observatory.channels.counters import settled
from observatory.channels.live_arm import LiveArm
from observatory.channels.request_classes import ATTRIBUTES, classes, own_counters
from observatory.channels.view import ChannelView
from observatory.engines.metrics import SpecCounters
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, INVALID, PAIRED_BASE, PASS, SKIP, SPECULATING
from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "speculates"
MIN_REQUESTS = 5  # answers of >= 2 tokens a class needs before "no draft" means speculation is off for it


def plan(suite: list[Probe]) -> list[Probe]:
    """No requests of its own: it reads the server's counters and every stored answer."""
    return []


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """The server's cumulative speculative counters after every other channel (settled)."""
    run.note(NAME, cumulative=settled(run).to_dict())


def _tokens(r: StoredResult) -> int:
    n = (r.usage or {}).get("completion_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) else len(r.token_ids or [])


def base_is_base(view: ChannelView, arm: StoredArm) -> Verdict:
    """A non-speculating arm: zero drafts over its life (cumulative read, timed deltas, answers' own counters)."""
    facts = ((arm.launch or {}).get("channel_facts") or {}).get(NAME) or {}
    seen: list[str] = []
    cumulative = facts.get("cumulative")
    c = SpecCounters.from_dict(cumulative) if cumulative else None
    if c is not None and c.drafts:
        seen.append(f"{c.drafts} drafts since its server started (read after every channel)")
    timed = sum(int(SpecCounters.from_dict(m.counters_delta).drafts or 0) for m in view.store.measurements(arm.id))
    if timed:
        seen.append(f"{timed} drafts in its timed passes")
    stating = [r for r in view.store.results(arm.id) if r.mode != PAIRED_BASE and r.request_counters
               and SpecCounters.from_dict(r.request_counters).drafts]
    if stating:
        seen.append(f"{len(stating)} answers state their own drafts")
    details = {"cumulative": cumulative, "timed_drafts": timed, "answers_with_drafts": len(stating)}
    if seen:
        return view.verdict(arm, INVALID, "base is not base: this non-speculating arm speculated ("
                            + "; ".join(seen) + "): every comparison against it is void", details)
    if c is None:
        return view.verdict(arm, SKIP, "not measurable: the server's counters were not read after the channels "
                            "(the arm ended before)", details)
    if c.drafts is None:
        return view.verdict(arm, SKIP, "not measurable: the engine reports no draft counters", details)
    return view.verdict(arm, PASS, "base is base: zero drafts over the arm's whole life (cumulative counters after "
                        f"every channel, {len(view.store.measurements(arm.id))} timed passes)", details)


def per_class(view: ChannelView, arm: StoredArm) -> Verdict:
    """A speculating arm: every class it served drafted (answers' own counters, or alone-sent /metrics deltas)."""
    probes = {p.id: p for p in view.store.probes(view.session_id)}
    seen: dict[tuple[str, str], dict[str, int]] = {}
    for r in view.store.results(arm.id):
        if not r.ok or r.repeat < 0 or r.mode in ("timed", PAIRED_BASE, "warmup") or r.probe_id not in probes:
            continue
        c = own_counters(r)
        if c is None or c.drafts is None or _tokens(r) < 2:
            continue
        probe = Probe.from_dict(probes[r.probe_id].definition)
        for attr, value in classes(probe, r.usage, r.concurrency).items():
            s = seen.setdefault((attr, value), {"answers": 0, "drafts": 0, "draft_tokens": 0})
            s["answers"] += 1
            s["drafts"] += int(c.drafts or 0)
            s["draft_tokens"] += int(c.draft_tokens or 0)
    table: list[dict[str, Any]] = [{"attribute": a, "class": v, **s} for (a, v), s in
             sorted(seen.items(), key=lambda kv: (ATTRIBUTES.index(kv[0][0]), kv[0][1]))]
    silent = [x for x in table if x["answers"] >= MIN_REQUESTS and not x["drafts"]]
    details = {"table": table, "min_requests": MIN_REQUESTS}
    if not table:
        return view.verdict(arm, SKIP, "not measurable: no answer of this arm states its own counters (per-request "
                            "metrics off) and none was sent alone with a counter read", details, part="classes")
    if silent and all(not x["drafts"] for x in table):
        return view.verdict(arm, INVALID, "speculation inactive: no class drafted at all", details, part="classes")
    if silent:
        names = ", ".join(f"{x['attribute']}={x['class']} ({x['answers']} answers)" for x in silent[:4])
        return view.verdict(arm, FAIL, f"speculation is off for {len(silent)} class(es) this arm serves: {names}: no "
                            "draft at all while the others draft", details, part="classes")
    return view.verdict(arm, PASS, f"every one of {len(table)} classes served drafted ({len(ATTRIBUTES)} attributes)",
                        details, part="classes")


def judge(view: ChannelView) -> list[Verdict]:
    """Base arms: never speculated. Spec arms: speculated on every class they served."""
    out = []
    for arm in view.arms:
        if arm.status not in ("ok", "crashed", "hung"):
            continue
        if not (arm.launch or {}).get("speculative_config"):
            out.append(base_is_base(view, arm))
        elif view.role(arm) in SPECULATING:
            out.append(per_class(view, arm))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Proof that base is base, and that speculation runs for every class of request",
    catches="a base arm that secretly speculates; a spec arm that does not speculate for one class of requests",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("sampled_no_drafts",),
    options={"min_requests": MIN_REQUESTS},
)
