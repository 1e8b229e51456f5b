"""Numerics-driven events judged as rates against controls (issue 46 item 2, observatory/judge/rates.py).

A near-tie flip alone is a NOTE when the arm's rate of such flips is within its controls' (the A/A copy tonight,
the platform's clean history in the store, the documented platform bound); an excess is WARN, a large one FAIL;
with no control at all the flips stay WARN and the rate row says why. The negative control: a kernel that flips
near-ties at several times the control's rate is red.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from observatory.judge import rates
from observatory.judge.rates import Count, conditional_p, count_of, events_only, judge_rate
from observatory.report.data import build
from observatory.store.session_store import Store
from tests.support.judged_sessions import make_session


def test_the_conditional_test_is_exact_and_one_sided() -> None:
    assert conditional_p(0, 100, 5, 100) == 1.0  # nothing seen: nothing to flag
    assert conditional_p(5, 100, 5, 100) > 0.5  # the same rate as the control
    # 10 flips in 1,000 opportunities against none in 1,000: p = 0.5 ** 10
    assert conditional_p(10, 1000, 0, 1000) == pytest.approx(0.5 ** 10)
    assert conditional_p(3, 100, 0, 0) == 1.0  # a control without opportunities weighs nothing


def test_within_the_control_is_a_pass_and_several_times_it_a_fail() -> None:
    aa = Count(2, 1000, "A/A copy base#2 tonight")
    clean = judge_rate(Count(3, 1000, "this arm"), [aa], "near-tie flips against base")
    assert clean.verdict == "PASS" and "within the control's rate" in clean.reason
    # the verify-path numerics class: the same stream of plausible flips, ten times as many
    broken = judge_rate(Count(40, 1000, "this arm"), [aa], "near-tie flips against base")
    assert broken.verdict == "FAIL" and "the control's rate" in broken.reason, broken.reason
    # an excess that is not large: WARN
    some = judge_rate(Count(15, 1000, "this arm"), [Count(1, 1000, "A/A")], "near-tie flips against base")
    assert some.verdict == "WARN", some.reason  # p = 17 / 2 ** 16 = 2.6e-4: beyond WARN_P, not FAIL_P
    # twelve times the control's rate on these few events is not yet beyond doubt (p = 0.0017): no alarm
    assert judge_rate(Count(12, 1000, "this arm"), [Count(1, 1000, "A/A")], "x").verdict == "PASS"


def test_an_excess_must_stand_against_every_control() -> None:
    """A bf16 GPU's verify path flips more near-ties than its A/A copy (docs/design.md 3.6): against the platform's
    clean spec rate as well, a clean arm's flips are not an excess."""
    mine = Count(20, 1000, "this arm")
    aa, platform = Count(0, 1000, "A/A"), Count(60, 3000, "documented")
    assert judge_rate(mine, [aa], "x").verdict == "FAIL"
    assert judge_rate(mine, [aa, platform], "x").verdict == "PASS"


def test_no_control_says_so_and_keeps_the_warn() -> None:
    judged = judge_rate(Count(3, 500, "this arm"), [], "near-tie flips against base")
    assert judged.verdict == "WARN" and judged.details["no_control"] and "no control" in judged.reason


def _row(gate: str, kind: str | None, n: int, table: list[dict[str, object]] | None = None) -> SimpleNamespace:
    details: dict[str, object] = {"kind": kind, rates.OPPORTUNITIES: n}
    if table is not None:
        details = {"table": table}
    return SimpleNamespace(gate=gate, probe_id=None if table is not None else 1, details=details, verdict="WARN")


def test_counts_take_the_suite_diffs_and_the_channels_tables() -> None:
    rows = [_row("token_diff", "near_tie", 40), _row("token_diff", "identical", 60),
            _row("token_diff:batch", "near_tie", 30),
            _row("soak", None, 0, [{"verdict": "WARN", "kind": "near_tie", rates.OPPORTUNITIES: 7},
                                   {"verdict": "PASS", "kind": "identical", rates.OPPORTUNITIES: 3}])]
    assert count_of(rows, rates.NEAR_TIE) == Count(2, 110, "this arm")
    assert count_of(rows, rates.SELF_NEAR_TIE) == Count(1, 30, "this arm")


def test_a_channel_warn_is_events_only_for_near_ties_and_base_noise() -> None:
    assert events_only([{"verdict": "WARN", "kind": "near_tie"}, {"verdict": "PASS"}]) == "near_tie"
    assert events_only([{"verdict": "WARN", "kind": "not attributable: base varies"}]) == "base_varies"
    assert events_only([{"verdict": "WARN", "kind": "near_tie"}, {"verdict": "FAIL", "kind": "diverged"}]) is None
    assert events_only([{"verdict": "WARN", "kind": "request failed here"}]) is None


def _verdicts(store: Store, sid: int, arm: str) -> dict[str, tuple[str, str]]:
    view = build(store, sid)
    a = next(x for x in view.arms if x.name == arm)
    out = {g: (v.verdict, v.reason or "") for g, v in a.arm_verdicts.items()}
    out.update({f"{r.probe}/{g}": (v.verdict, v.reason or "") for r in a.results for g, v in r.verdicts.items()})
    return out


def test_a_session_with_an_aa_copy_notes_a_near_tie_and_judges_the_rate(tmp_path: Path) -> None:
    """The default report session: mtp1 parts from base at a 0.1-nat margin on one probe, the A/A copy never:
    one flip in its near-tie positions is within the control, a NOTE, and the arm's rate row PASSes."""
    store = Store(str(tmp_path / "r.db"))
    sid = make_session(store)
    got = _verdicts(store, sid, "mtp1")
    assert got["poem-zh/token_diff"][0] == "NOTE", got["poem-zh/token_diff"]
    assert got["rate:near_tie"][0] == "PASS", got["rate:near_tie"]
    assert "WARN" not in {v for v, _ in got.values()}


def test_without_any_control_the_flip_stays_a_warn(tmp_path: Path) -> None:
    """No A/A copy, no history, no documented bound: nothing to weigh the flip against (today's WARN)."""
    store = Store(str(tmp_path / "r.db"))
    sid = make_session(store, arms=("base", "mtp1"))
    got = _verdicts(store, sid, "mtp1")
    assert got["poem-zh/token_diff"][0] == "WARN"
    assert got["rate:near_tie"][0] == "WARN" and "no control" in got["rate:near_tie"][1]


def test_clean_history_in_the_store_is_a_control(tmp_path: Path) -> None:
    """No A/A copy on any night: the first night has no control (its flip a WARN), and is the platform's record
    for the next ones, whose same flip is weighed against that history: a NOTE."""
    store = Store(str(tmp_path / "r.db"))
    first = make_session(store, arms=("base", "mtp1"))
    make_session(store, arms=("base", "mtp1"))
    tonight = make_session(store, arms=("base", "mtp1"))
    assert _verdicts(store, first, "mtp1")["rate:near_tie"][0] == "WARN"
    got = _verdicts(store, tonight, "mtp1")
    assert got["poem-zh/token_diff"][0] == "NOTE" and got["rate:near_tie"][0] == "PASS", got["rate:near_tie"]
    assert "earlier arm-nights" in got["rate:near_tie"][1]


def test_a_night_in_excess_is_kept_out_of_the_history(tmp_path: Path) -> None:
    """History counts the nights whose rate was within its control: a flagged night is not the platform's norm."""
    row = SimpleNamespace(gate="rate:near_tie", verdict="FAIL", details={"k": 50, "n": 100, "kind": "spec",
                                                                        "platform": {"engine": "vllm"}})
    ok = SimpleNamespace(gate="rate:near_tie", verdict="PASS", details={"k": 1, "n": 100, "kind": "spec",
                                                                       "platform": {"engine": "vllm"}})
    got = rates.history_counts([row, ok], rates.NEAR_TIE, "spec", {"engine": "vllm"})
    assert got == [Count(1, 100, "1 clean earlier arm-nights of this platform")]


def test_a_variant_arm_near_tie_flip_is_weighed_like_an_aa_copy(tmp_path: Path) -> None:
    """A non-speculating variant (a channel's chunked-stream control, `base+stream_interval=3` on the H100 of
    2026-12-06) that parts from base at a near-tie is the engine's own noise: a NOTE under its rate row, judged
    against the A/A copy, no longer a WARN per flip. Its own excess still shows: a hard divergence (3 nats) stays a
    token_diff FAIL (negative control)."""
    store = Store(str(tmp_path / "r.db"))
    tie = {"chunked": {"poem-zh": (6, list("到处闻啼鸟。"), 0.1)}}
    sid = make_session(store, arms=("base", "base#2", "chunked"), divergences=tie)
    got = _verdicts(store, sid, "chunked")
    assert got["poem-zh/token_diff"][0] == "NOTE", got["poem-zh/token_diff"]
    assert got["rate:near_tie"][0] == "PASS" and "A/A copy" in got["rate:near_tie"][1], got["rate:near_tie"]
    hard = {"chunked": {"count": (4, [" 5", ",", " 5", ",", " 5"], 3.0)}}
    sid = make_session(store, arms=("base", "base#2", "chunked"), divergences=hard)
    assert _verdicts(store, sid, "chunked")["count/token_diff"][0] == "FAIL"
