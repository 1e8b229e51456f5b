"""The soak channel (issue 15 item 2): its sequence, its judge on stored results, its fault."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from observatory.channels import soak
from observatory.faults import field_state
from observatory.model.probes import Probe
from tests.support.state_channels import CLEAN, build, by_arm, suite

ROLES = {"base": "base", "mtp2": "spec"}
COUNTERS = {"drafts": 10, "draft_tokens": 20, "accepted": 12, "accepted_per_pos": [8, 4]}


def test_sequence_is_a_b_a_then_long_short_then_the_suite_repeated() -> None:
    """Issue 15 item 2: A, B (long), A again; long then short; the whole suite repeated, in one ordered list."""
    s = suite()
    seq = [p.name for p in soak.sequence(s)]
    longest = max(s, key=soak._size).name
    shortest = min(s, key=soak._size).name
    assert seq[:5] == [s[0].name, longest, s[0].name, longest, shortest]
    assert seq[-len(s):] == [p.name for p in s] and seq.count(s[0].name) >= 6
    probes = soak.plan(s)
    assert [p.meta["index"] for p in probes] == list(range(len(probes)))
    assert all(p.max_tokens <= soak.MAX_TOKENS and p.channel == "soak" for p in probes)
    occ = [p.meta["occurrence"] for p in probes if p.meta["of"] == s[0].name]
    assert occ == list(range(len(occ)))


def _view(tmp_path: Path, wrong: dict[str, set[int]], roles: dict[str, str] | None = None,
          counters: Any = None) -> Any:
    """Each arm answers CLEAN except at the sequence indexes WRONG names for it."""
    def answer(p: Probe, arm: str) -> dict[str, Any]:
        odd = [5, 8, 8, 8] if arm == "base" else [5, 9, 9, 9]
        tokens = odd if p.meta["index"] in wrong.get(arm, set()) else CLEAN
        cd = counters(p, arm) if counters else (COUNTERS if arm == "mtp2" else {})
        return {"tokens": tokens, "repeat": p.meta["occurrence"], "counters": cd}
    return build(tmp_path, soak.CHANNEL, roles or ROLES, answer)


def test_clean_sequence_passes(tmp_path: Path) -> None:
    """The clean control: every request equal to base's, acceptance steady: PASS, PASS."""
    view = _view(tmp_path, {})
    rows = soak.judge(view)
    assert by_arm(rows, view)["mtp2"].verdict == "PASS" and by_arm(rows, view)["base"].verdict == "PASS"
    assert by_arm(rows, view, "acceptance")["mtp2"].verdict == "PASS"


def test_a_later_occurrence_that_differs_only_on_spec_fails(tmp_path: Path) -> None:
    """Negative control: A's later occurrences change on the spec arm only (state poisoned): FAIL, naming it."""
    late = {p.meta["index"] for p in soak.plan(suite()) if p.meta["of"] == suite()[0].name and p.meta["occurrence"] >= 5}
    view = _view(tmp_path, {"mtp2": late})
    row = by_arm(soak.judge(view), view)["mtp2"]
    assert row.verdict == "FAIL" and f"probe={suite()[0].name}" in row.reason and "occurrence=5" in row.reason
    indexes = [r["index"] for r in row.details["table"]]
    assert indexes == sorted(indexes)  # in the order sent: the first FAIL named is the first in the sequence
    assert {r["same_as_first"] for r in row.details["table"] if r["verdict"] == "FAIL"} == {"no"}


def test_where_base_itself_drifts_it_is_not_attributable(tmp_path: Path) -> None:
    """Base's own occurrence differs from its first: spec differing there too is WARN, not FAIL."""
    late = {p.meta["index"] for p in soak.plan(suite()) if p.meta["of"] == suite()[0].name and p.meta["occurrence"] >= 4}
    view = _view(tmp_path, {"mtp2": late, "base": late})
    rows = by_arm(soak.judge(view), view)
    assert rows["mtp2"].verdict == "WARN" and rows["base"].details["noisy"] == len(late)
    assert {r["kind"] for r in rows["mtp2"].details["table"] if r["verdict"] == "WARN"} == {
        "not attributable: base's occurrence 4 differs from its first",
        "not attributable: base's occurrence 5 differs from its first"}
    view2 = _view(tmp_path / "b", {"mtp2": late, "base": {min(late)}})
    rows2 = by_arm(soak.judge(view2), view2)
    assert rows2["mtp2"].verdict == "FAIL"  # base drifted at one occurrence only; the other is still a FAIL
    assert [r["verdict"] for r in rows2["mtp2"].details["table"] if r["index"] in late] == ["WARN", "FAIL"]


def test_acceptance_drop_on_the_same_output_is_flagged(tmp_path: Path) -> None:
    """Acceptance of A falling from 60% to 5% on identical output is a WARN trend; steady counts are not."""
    def counters(p: Probe, arm: str) -> dict[str, Any]:
        if arm != "mtp2":
            return {}
        low = p.meta["of"] == suite()[0].name and p.meta["occurrence"] >= 4
        return {**COUNTERS, "draft_tokens": 40, "accepted": 2 if low else 24}
    view = _view(tmp_path / "c", {}, counters=counters)
    row = by_arm(soak.judge(view), view, "acceptance")["mtp2"]
    assert row.verdict == "WARN" and "drop" in row.reason


def test_z_two_proportions() -> None:
    """The trend statistic: equal rates give 0, a large drop a large negative z, no data None."""
    assert soak.z_two_proportions(12, 20, 12, 20) == 0.0
    z = soak.z_two_proportions(24, 40, 2, 40)
    assert z is not None and z < -soak.Z_TREND
    assert soak.z_two_proportions(0, 0, 1, 2) is None


def test_soak_poison_ghosts_from_the_sixth_serving_of_a_prompt() -> None:
    """The fault: the same prompt served 5 times is clean; from the 6th on its spec steps repeat the last token."""
    sched = SimpleNamespace(requests={}, cache_config=SimpleNamespace(block_size=128), num_spec_tokens=2)
    got = []
    for i in range(7):
        rid = f"r{i}"
        sched.requests[rid] = SimpleNamespace(prompt_token_ids=[1, 2, 3], num_prompt_tokens=3,
                                              sampling_params=SimpleNamespace(stop=None))
        outs = []
        for spec, toks, fin in ((False, [10], None), (True, [11, 12], "length")):
            o = SimpleNamespace(request_id=rid, new_token_ids=toks, new_logprobs=None, finish_reason=fin,
                                new_sampling_mask=None)
            so = SimpleNamespace(scheduled_spec_decode_tokens={rid: [1, 1]} if spec else {},
                                 num_scheduled_tokens={rid: 3})
            field_state.rewrite(sched, so, {0: SimpleNamespace(outputs=[o])}, frozenset({"soak_poison"}))
            outs += o.new_token_ids
        got.append(outs)
        del sched.requests[rid]
    assert got[:5] == [[10, 11, 12]] * 5 and got[5:] == [[10, 10, 11, 12]] * 2


def test_requests_whose_ids_were_withheld_are_not_measurable_not_failed(tmp_path: Path) -> None:
    """H200 nightly regression: vLLM 0.26's stream held back the ids its hermes tool parser swallowed
    (2 to 6 of 16); those requests differed "at token 0" on every spec arm. Incomplete ids on either side
    make a request not measurable, with the reason; complete ones are still diffed."""
    first = suite()[0].name

    def answer(p: Probe, arm: str) -> dict[str, Any]:
        short = p.meta["of"] == first
        tokens = ([5, 6] if arm == "base" else [9, 6, 7]) if short else CLEAN
        return {"tokens": tokens, "repeat": p.meta["occurrence"], "usage": {"completion_tokens": 16 if short else 4},
                "counters": COUNTERS if arm == "mtp2" else {}}

    view = build(tmp_path, soak.CHANNEL, ROLES, answer)
    row = by_arm(soak.judge(view), view)["mtp2"]
    withheld = [r for r in row.details["table"] if r["verdict"] == "NOT_MEASURABLE"]
    assert row.verdict == "PASS", row.reason
    assert withheld and {r["probe"] for r in withheld} == {first}
    assert withheld[0]["kind"].startswith("ids withheld here: 3 of 16 came back")
    assert row.details["judged"] == len(row.details["table"]) - len(withheld)
