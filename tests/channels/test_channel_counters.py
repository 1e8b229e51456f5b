"""Channel counters (issue 15 item 8): invariants of the spec counters, and the stream's tau against them."""

from __future__ import annotations

from typing import Any

import pytest

from observatory.channels import counters
from observatory.channels.view import ChannelView
from observatory.engines.metrics import SpecCounters
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.db import MeasurementRow
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

SUITE = [Probe("count", "counting", prompt="Count"), Probe("count2", "counting", prompt="Count more"),
         Probe("prose", "prose_en", prompt="Write"), Probe("zh", "prose_zh", prompt="写")]


def _delta(drafts: int, accepted_per_pos: list[int], k: int = 2) -> dict[str, Any]:
    return {"drafts": drafts, "draft_tokens": k * drafts, "accepted": sum(accepted_per_pos),
            "accepted_per_pos": accepted_per_pos}


def _clean_request(steps: list[int]) -> tuple[list[list[Any]], int, dict[str, Any]]:
    """A k=2 request: prefill's token, then one chunk of 1 + accepted per step; (chunks, tokens, counters)."""
    chunks = [[10.0, 1]] + [[10.0 * (i + 2), 1 + a] for i, a in enumerate(steps)]
    per_pos = [sum(a >= 1 for a in steps), sum(a >= 2 for a in steps)]
    return chunks, 1 + sum(1 + a for a in steps), _delta(len(steps), per_pos)


def _judge(store: Store, tweak: Any = None) -> dict[str, Any]:
    probes = counters.plan(SUITE)
    sid, arms, pids = session(store, probes, ["base", "mtp2"], options={"channels": ["counters"]})
    steps = [2, 1, 0, 2, 2, 1, 0, 1, 2, 2, 1, 0]
    for i, p in enumerate(probes):
        chunks, n, delta = _clean_request(steps[i:] + steps[:i])
        if tweak:
            delta = tweak(delta)
        result(store, arms["mtp2"], pids[p.name], "counters", list(range(n)), ["x"] * n, chunks=chunks,
               counters_delta=delta)
        result(store, arms["base"], pids[p.name], "counters", list(range(n)), ["x"] * n,
               chunks=[[10.0 * j, 1] for j in range(n)], counters_delta=_delta(0, [0, 0]))
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "counters", all_arms, {a.name: str(a.role) for a in all_arms},
                       {pids[p.name]: p for p in probes}, default_registry())
    return {v.gate: v for v in counters.judge(view)}


def test_plan_takes_one_probe_per_category() -> None:
    """Issue 15 item 8: three requests, one per category, no tools."""
    assert [p.meta["of"] for p in counters.plan(SUITE)] == ["count", "prose", "zh"]


@pytest.mark.parametrize("c, broken", [
    (SpecCounters(10, 20, 21, [11, 10]), "accepted 21 > draft tokens 20"),
    (SpecCounters(10, 30, 12, [6, 6]), "draft tokens 30 > k x drafts"),
    (SpecCounters(10, 20, 12, [6, 5]), "sum to 11"),
    (SpecCounters(10, 20, 12, [5, 7]), "increase with position"),
    (SpecCounters(problem="counters decreased between two reads (accepted 9 -> 4)"), "decreased"),
])
def test_each_invariant_trips_on_its_known_bad_input(c: SpecCounters, broken: str) -> None:
    """Issue 15 item 8, negative controls: each definitional invariant has an input that breaks it."""
    assert any(broken in b for b in counters.breaches(c, 2))


def test_a_clean_delta_keeps_every_invariant() -> None:
    """Issue 15 item 8, clean control (the per-request token bound included)."""
    assert counters.breaches(SpecCounters(10, 20, 12, [7, 5]), 2, tokens=1 + 10 + 12) == []


def test_inflated_acceptance_fails_the_per_request_token_bound(store: Store) -> None:
    """Issue 15 item 8 (fault: inflated acceptance counters, output intact): accepted more than the stream carried."""
    def inflate(d: dict[str, Any]) -> dict[str, Any]:
        per = [min(d["drafts"], 2 * x) for x in d["accepted_per_pos"]]
        return {**d, "accepted_per_pos": per, "accepted": sum(per)}

    got = _judge(store, inflate)
    assert got["counters:invariants"].verdict == "FAIL"
    assert "streamed tokens allow" in got["counters:invariants"].reason
    assert got["counters:stream_tau"].verdict == "WARN"


def test_truthful_counters_pass(store: Store) -> None:
    """Issue 15 item 8, clean control: the same session with truthful counters passes both parts."""
    got = _judge(store)
    assert got["counters:invariants"].verdict == "PASS"
    assert got["counters:stream_tau"].verdict == "PASS"
    assert "counters:invariants" in got and len(got) == 2  # base (no speculation) is not judged


def test_timed_batches_are_checked_too(store: Store) -> None:
    """Issue 15 item 8: the timed batches' deltas obey the definitional invariants as well."""
    probes = counters.plan(SUITE)
    sid, arms, pids = session(store, probes, ["base", "mtp2"], options={"channels": ["counters"]})
    store.add(MeasurementRow(arm_id=arms["mtp2"].id, concurrency=4, repeat=0, requests=4, completion_tokens=100,
                             wall_s=1.0, counters_delta=_delta(10, [4, 6])))
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "counters", all_arms, {a.name: str(a.role) for a in all_arms},
                       {pids[p.name]: p for p in probes}, default_registry())
    got = {v.gate: v for v in counters.judge(view)}
    assert got["counters:invariants"].verdict == "FAIL" and "timed c=4" in got["counters:invariants"].reason


def test_counters_not_reported_are_not_measurable(store: Store) -> None:
    """Unknown is not zero: an engine that reports no counters gets "not measurable", not a pass."""
    got = _judge(store, lambda d: {"drafts": None, "draft_tokens": None, "accepted": None, "accepted_per_pos": None})
    assert got["counters:invariants"].verdict == "SKIP"
    assert got["counters:invariants"].reason.startswith("not measurable")


class _Run:
    """A run whose counters move by one step on each read, twice, then settle."""

    def __init__(self) -> None:
        self.reads = 0

    def counters(self) -> SpecCounters:
        self.reads += 1
        n = min(self.reads, 3)
        return SpecCounters(n, 2 * n, n, [n, 0])


def test_settled_waits_for_two_equal_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 item 8: the engine records a step's stats after streaming it; reads wait until they settle."""
    monkeypatch.setattr(counters, "SETTLE_S", 0.0)
    run = _Run()
    assert counters.settled(run) == SpecCounters(3, 6, 3, [3, 0])


@pytest.mark.parametrize("tokens, clean", [(48, SpecCounters(16, 32, 32, [16, 16])),
                                           (41, SpecCounters(14, 28, 27, [14, 13]))])
def test_counts_seen_on_the_cpu_engine_pass_and_double_counting_fails(tokens: int, clean: SpecCounters) -> None:
    """Issue 15 item 8: counter deltas the clean mtp2 arm gave on the CPU engine keep the bound; counted twice
    (fault inflate_accepted) they break it. A +1-per-rejected-step inflation moved 27 to 28 there and passed."""
    assert counters.breaches(clean, 2, tokens) == []
    assert any("streamed tokens allow" in b for b in counters.breaches(clean + clean, 2, tokens))
