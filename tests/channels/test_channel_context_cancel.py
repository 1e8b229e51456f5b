"""Channels context_limit (issue 49 item 1) and cancel (item 2): the judges, on synthetic sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from observatory.channels import cancel, context_limit
from observatory.channels.view import ChannelView
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ResultRow
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

SUITE = [Probe(f"p{i}", "prose_en", messages=[{"role": "user", "content": f"Write {i}"}], max_tokens=16)
         for i in range(5)]
LIMIT = 1024


def _view(store: Store, sid: int, name: str, probes: list[Probe], pids: dict[str, int]) -> ChannelView:
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}
    return ChannelView(store, sid, name, all_arms, roles, {pids[p.name]: p for p in probes}, default_registry())


def _context(store: Store, arms: list[str], corrupt: str | None = None, overrun: str | None = None,
             flip: str | None = None, tie: bool = False) -> dict[str, Any]:
    """Every arm answers alone and in 3 rounds; CORRUPT's neighbours differ in the rounds (limit_neighbour);
    OVERRUN's boundary answers run one token past the limit; FLIP's fill answer takes base's second choice at
    token 2 (base's margin there 0.05 nats with TIE, a near-tie; else 4.9)."""
    probes = context_limit.plan(SUITE)
    sid, arm_rows, pids = session(store, probes, arms, options={"channels": ["context_limit"]})
    for name, arm in arm_rows.items():
        store.update(ArmRow, arm.id, launch={**arm.launch, "channel_facts": {"context_limit": {"max_model_len": LIMIT}}})
        for repeat, conc in ((0, 1), *((r, len(probes)) for r in range(1, context_limit.ROUNDS + 1))):
            for p in probes:
                room = p.meta.get("room") or p.meta.get("fill")
                n = p.max_tokens + (1 if overrun == name and room else 0)
                ids = [100 + i for i in range(n)]
                if corrupt == name and repeat and not room:
                    ids[0] = 7  # the boundary request's first token, in a neighbour's row
                tops = [[[t, -0.1], [t + 1, -5.0]] for t in ids]
                if p.meta.get("fill") and tie:
                    tops[2] = [[ids[2], -0.1], [ids[2] + 1, -0.15]]
                if p.meta.get("fill") and flip == name:
                    ids[2] += 1
                usage = {"prompt_tokens": LIMIT - room if room else 20, "completion_tokens": n}
                row = result(store, arm, pids[p.name], "context_limit", ids, [f" t{t}" for t in ids], repeat=repeat,
                             concurrency=conc, top_logprobs=tops)
                store.update(ResultRow, row.id, usage=usage)
    view = _view(store, sid, "context_limit", probes, pids)
    names = {a.id: a.name for a in store.arms(sid)}
    return {(names[v.arm_id], v.gate): v for v in context_limit.judge(view)}


def test_context_limit_plan_has_neighbours_at_their_budget_and_boundary_requests() -> None:
    """Three neighbours (max_tokens 256, 255, 254, EOS ignored), room:1..3 and fill boundary requests."""
    probes = context_limit.plan(SUITE)
    assert [p.max_tokens for p in probes] == [256, 255, 254, 1, 2, 3, context_limit.FILL]
    assert all(p.sampling == {"ignore_eos": True} for p in probes)
    b = context_limit.boundary_prompt(probes[3], 100, [1, 2], [9])
    assert len(b.prompt) == 99  # type: ignore[arg-type]


def test_context_limit_clean_arms_pass(store: Store) -> None:
    """Clean control: equal answers in every round PASS both parts."""
    got = _context(store, ["base", "base#2", "mtp1"])
    assert got[("mtp1", "context_limit")].verdict == "PASS"
    assert got[("mtp1", "context_limit:boundary")].verdict == "PASS"
    assert got[("base#2", "context_limit")].verdict == "PASS"


def test_a_neighbour_corrupted_in_the_rounds_fails(store: Store) -> None:
    """Negative control (limit_neighbour): neighbours that differ from base only beside the boundary requests."""
    got = _context(store, ["base", "mtp1"], corrupt="mtp1")
    v = got[("mtp1", "context_limit")]
    assert v.verdict == "FAIL" and "round" in v.reason
    assert got[("mtp1", "context_limit:boundary")].verdict == "PASS"


def test_a_boundary_answer_past_the_limit_fails_by_rule(store: Store) -> None:
    """A boundary answer whose prompt + completion tokens pass max_model_len FAILs the boundary part."""
    got = _context(store, ["base", "mtp1"], overrun="mtp1")
    v = got[("mtp1", "context_limit:boundary")]
    assert v.verdict == "FAIL" and "past max_model_len 1024" in v.reason


def test_a_boundary_answer_parted_at_a_near_tie_is_no_boundary_fault(store: Store) -> None:
    """A GPU night's fill answer parted from base's at base's near-tie (margin 0.062 nats, the H100 of
    2026-12-06): the boundary part PASSes and says so; the flip is the near-tie rule's (row context_limit)."""
    got = _context(store, ["base", "mtp1"], flip="mtp1", tie=True)
    v = got[("mtp1", "context_limit:boundary")]
    assert v.verdict == "PASS" and "parted from base's at a near-tie" in v.reason, v.reason
    assert any("near-tie" in str(t["result"]) for t in v.details["table"])


def test_a_boundary_answer_parted_where_base_is_sure_fails(store: Store) -> None:
    """Negative control: the same flip where base's margin is 4.9 nats is a boundary FAIL."""
    got = _context(store, ["base", "mtp1"], flip="mtp1")
    v = got[("mtp1", "context_limit:boundary")]
    assert v.verdict == "FAIL" and "ids differs from base's" in v.reason, v.reason


def _cancel(store: Store, arms: list[str], stale: str | None = None, uncut: str | None = None,
            unseen: str | None = None) -> dict[str, Any]:
    """Every arm's followers answer as alone; STALE's first follower after each cut starts with a stale token."""
    probes = cancel.plan(SUITE)
    sid, arm_rows, pids = session(store, probes, arms, options={"channels": ["cancel"]})
    followers = [p for p in probes if not p.meta.get("victim")]
    for name, arm in arm_rows.items():
        for p in probes:
            if p.meta.get("victim"):
                seq = p.meta["sequence"]
                if seq == cancel.ALONE:
                    result(store, arm, pids[p.name], "cancel", [1] * 768, [" x"] * 768)
                    continue
                n = 1 + cancel.SEQUENCES.index(seq)
                row = result(store, arm, pids[p.name], "cancel", [1, 1], [" x", " x"], repeat=n, finish=None)
                made = cancel.VICTIM_TOKENS if unseen == name else 9
                store.update(type(row), row.id, usage={cancel.VICTIM_GENERATED: made})
                if uncut != name:
                    store.update(type(row), row.id, ok=False, error="cancelled: the client hung up, on purpose")
        for n in range(len(cancel.SEQUENCES) + 1):
            for conc in ((1,) if n == 0 else (len(followers), 1)):
                for p in followers:
                    ids = [200 + p.meta["follower"] * 10 + i for i in range(8)]
                    if stale == name and n and conc > 1 and p.meta["follower"] == 0:
                        ids[0] = 1
                    result(store, arm, pids[p.name], "cancel", ids, [f" t{t}" for t in ids], repeat=n,
                           concurrency=conc, top_logprobs=[[[t, -0.1], [t + 1, -4.0]] for t in ids])
    view = _view(store, sid, "cancel", probes, pids)
    names = {a.id: a.name for a in store.arms(sid)}
    return {(names[v.arm_id], v.gate): v for v in cancel.judge(view)}


def test_cancel_clean_arms_pass_and_cuts_are_shown(store: Store) -> None:
    """Clean control: followers equal base's everywhere PASS; every victim cut mid-answer."""
    got = _cancel(store, ["base", "base#2", "mtp1"])
    assert got[("mtp1", "cancel")].verdict == "PASS"
    assert got[("mtp1", "cancel:cuts")].verdict == "PASS"
    assert got[("base#2", "cancel")].verdict == "PASS"


def test_the_next_request_after_an_abort_answered_from_a_stale_slot_fails(store: Store) -> None:
    """Negative control (abort_stale): the first follower after each cut starts with the victim's token."""
    got = _cancel(store, ["base", "mtp1"], stale="mtp1")
    v = got[("mtp1", "cancel")]
    assert v.verdict == "FAIL" and "at once" in v.reason


def test_a_victim_not_cut_is_not_exercised(store: Store) -> None:
    """A victim that ended before its cut did not exercise the sequence: SKIP, never PASS."""
    got = _cancel(store, ["base", "mtp1"], uncut="mtp1")
    assert got[("mtp1", "cancel:cuts")].verdict == "SKIP"
    assert "not exercised" in got[("mtp1", "cancel:cuts")].reason


def test_a_cut_the_engine_finished_anyway_is_not_exercised(tmp_path: Path) -> None:
    """The client hung up, but the engine generated the victim to its end (it never saw the client go): SKIP."""
    got = _cancel(Store(str(tmp_path / "u.db")), ["base", "mtp1"], unseen="mtp1")
    v = got[("mtp1", "cancel:cuts")]
    assert v.verdict == "SKIP" and "generated all 768 tokens" in str(v.details["table"])
    assert "stopped it after 9 of 768" in str(got[("base", "cancel:cuts")].details["table"])


def test_victim_generated_is_the_counter_move_less_the_followers() -> None:
    """What the engine generated for the victim: the counter's move less the followers' usage counts."""
    from observatory.client.answer import Response

    answers = [Response(usage={"completion_tokens": 24}) for _ in range(6)]
    assert cancel.victim_generated(1000, 1000 + 144 + 30, answers) == 30
    assert cancel.victim_generated(None, 1200, answers) is None
