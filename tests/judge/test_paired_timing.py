"""`--timing paired` (issue 29 item 2): S from pairs of requests, base's server kept up beside each spec arm.

The arithmetic is checked on rows whose true S is known (a host that slows
down mid-session by a known factor) and the plan's refusals without an engine.
The whole path once on the real CPU engine (base kept up, the spec arm's
single-stream requests alternated with base's, the pairs stored, S paired,
and base stopped at the end) is real_engine/test_paired_session.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from observatory.judge.paired import paired_ratio, pairs
from observatory.model.errors import ObservatoryError
from observatory.session import plan as plan_mod
from observatory.session.options import SessionPlan
from observatory.session.plan import plan_compare
from tests.support.paths import FIXTURES

SUITE = FIXTURES / "channel_tiny.toml"


def _row(probe: int, rep: int, tokens: int, secs: float, ok: bool = True) -> Any:
    return SimpleNamespace(probe_id=probe, repeat=rep, concurrency=1, ok=ok, usage={"completion_tokens": tokens},
                           token_ids=None, duration_ms=secs * 1000.0)


def test_pairs_cancel_a_drift_that_sequential_blocks_put_into_S() -> None:
    """A host that halves its speed mid-session: spec truly 1.2x base in every pair, so paired S is 1.2 exactly,
    while comparing base's early block with the spec arm's late block reads 0.6."""
    spec, base, early_base, late_spec = [], [], [], []
    for i in range(20):
        slow = 2.0 if i >= 10 else 1.0  # the host's speed halves for the second half of the pairs
        base.append(_row(i, 0, 100, 1.0 * slow))
        spec.append(_row(i, 0, 100, (1.0 / 1.2) * slow))
        early_base.append(1.0)  # a sequential session: base timed while the host was fast ...
        late_spec.append((1.0 / 1.2) * 2.0)  # ... and the spec arm after it slowed down
    got = pairs(spec, base)
    assert got is not None and got["incomplete"] == 0 and len(got["pairs"]) == 20
    S, ci = paired_ratio(got["pairs"])
    assert S == pytest.approx(1.2) and ci is not None and ci[0] == pytest.approx(1.2) and ci[1] == pytest.approx(1.2)
    sequential = (100 / (sum(late_spec) / 20)) / (100 / (sum(early_base) / 20))
    assert sequential == pytest.approx(0.6)  # what timing the arms one after another would have said


def test_incomplete_pairs_are_left_out_and_counted() -> None:
    spec = [_row(0, 0, 10, 0.5), _row(1, 0, 10, 0.5, ok=False), _row(2, 0, 10, 0.5)]
    base = [_row(0, 0, 10, 1.0), _row(1, 0, 10, 1.0), _row(2, 0, 0, 1.0)]  # probe 2: base reported no tokens
    got = pairs(spec, base)
    assert got is not None and got["incomplete"] == 2 and got["pairs"] == [[10.0, 0.5, 10.0, 1.0]]
    assert paired_ratio(got["pairs"]) == (pytest.approx(2.0), None)  # one pair: S, but no interval
    assert pairs(spec, []) is None  # not timed in pairs


def test_a_warm_up_pair_left_out_is_neither_a_pair_nor_incomplete() -> None:
    """The spec arm's warm-up (observatory.judge.steady_state) leaves its pair out on both sides; it is not an
    incomplete pair (a side that failed or reported nothing)."""
    spec = [_row(0, 0, 10, 5.0), _row(0, 1, 10, 0.5), _row(0, 2, 10, 0.5)]  # repeat 0 still warming up
    base = [_row(0, 0, 10, 1.0), _row(0, 1, 10, 1.0), _row(0, 2, 10, 1.0)]
    got = pairs(spec, base, {(0, 0)})
    assert got is not None and got["incomplete"] == 0 and got["pairs"] == [[10.0, 0.5, 10.0, 1.0]] * 2
    full = pairs(spec, base)
    assert full is not None and full["pairs"][0] == [10.0, 5.0, 10.0, 1.0]  # nothing left out: the slow pair counts


def test_paired_timing_refuses_parallel_arms_and_an_unshared_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ObservatoryError, match="cannot be combined with --parallel-arms"):
        plan_compare(SessionPlan(arms="base,mtp1", timing="paired", parallel_arms=True))
    monkeypatch.setattr(plan_mod, "gpu_count", lambda: 1)
    monkeypatch.setattr(plan_mod, "check_launchable", lambda *_a: None)
    with pytest.raises(ObservatoryError, match="gpu-memory-utilization") as e:
        plan_compare(SessionPlan(arms="base,mtp1", timing="paired"))
    assert "base, mtp1" in str(e.value)
    opts = plan_compare(SessionPlan(arms="base,mtp1", timing="paired",
                                    engine_args=["--gpu-memory-utilization=0.4"]))
    assert opts.plan.timing == "paired"
    with pytest.raises(ObservatoryError, match="--timing must be one of auto, bracketed, sequential, concurrent, paired"):
        plan_compare(SessionPlan(arms="base,mtp1", timing="interleaved"))


def test_suite_interval_holds_timing_noise_not_the_spread_between_probes():
    """Two probes with very different S (code vs prose), each timed twice alike: the pair bootstrap is wide
    (it draws other mixes of probes), the within-probe interval is tight (the same probes every night)."""
    from observatory.judge.paired import paired_ratio, suite_interval

    rows, probes = [], []
    for probe, spec_s in ((1, 0.5), (2, 1.0)):  # 100 tokens; base 1.0 s: S 2.0 and 1.0
        for jitter in (0.99, 1.01):
            rows.append([100.0, spec_s * jitter, 100.0, 1.0])
            probes.append(probe)
    S, ci = paired_ratio(rows)
    tight = suite_interval(rows, probes)
    assert S == pytest.approx(200 / 1.5 / 100)
    assert ci is not None and tight is not None
    assert ci[1] - ci[0] > 0.5 and tight[1] - tight[0] < 0.05
    assert tight[0] <= S <= tight[1]
    assert suite_interval(rows[::2], probes[::2]) is None  # one timing per probe: nothing to resample
