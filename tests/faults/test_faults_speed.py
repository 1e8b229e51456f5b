"""observatory.faults.field_speed: the slow_step fault's decisions and its hooks (no vLLM, no GPU)."""

from __future__ import annotations

import sys
import types

import pytest

from observatory.faults import FAULTS, field_speed, patches


def test_slow_step_waits_for_calibration_then_delays_a_fraction_of_the_median():
    s = field_speed.SlowStep(0.05, steps=5)
    times = [0.0, 0.010, 0.020, 0.031, 0.040, 0.050]  # intervals 10, 10, 11, 9, 10 ms
    delays = [s.observe(t) for t in times]
    assert delays[:5] == [0.0] * 5
    assert delays[5] == pytest.approx(0.05 * 0.010)
    assert s.observe(99.0) == pytest.approx(0.0005)  # fixed once calibrated: the fault's own delay never feeds back


def test_gaps_between_requests_do_not_move_the_calibration():
    s = field_speed.SlowStep(0.1, steps=6)
    for t in [0.0, 0.01, 0.02, 5.0, 5.01, 5.02, 5.03]:  # one 4.98 s idle gap among 10 ms steps
        d = s.observe(t)
    assert d == pytest.approx(0.001)


@pytest.mark.parametrize("raw, expected", [("", 0.05), ("0.1", 0.1), (" 2 ", 2.0)])
def test_fraction_from_env(raw, expected):
    assert field_speed.fraction_from_env({field_speed.FRACTION_VAR: raw}) == expected


@pytest.mark.parametrize("raw", ["0", "-0.1", "fast", "11"])
def test_bad_fraction_stops_the_engine(raw):
    with pytest.raises(ValueError, match=field_speed.FRACTION_VAR):
        field_speed.fraction_from_env({field_speed.FRACTION_VAR: raw})


def test_cycles_for():
    assert field_speed.cycles_for(0.001, 1.98e9) == 1_980_000
    assert field_speed.cycles_for(-1.0, 1e9) == 0


def _module(name: str, cls: type) -> types.ModuleType:
    m = types.ModuleType(name)
    m.RejectionSampler = cls  # type: ignore[attr-defined]
    return m


def test_v1_forward_is_slowed_once_calibrated(monkeypatch, capsys):
    calls = []

    class RejectionSampler:
        def forward(self, x):
            calls.append(x)
            return x + 1

    slept = []
    monkeypatch.setattr(field_speed, "_sleep", slept.append)
    monkeypatch.setattr(field_speed, "CALIBRATION_STEPS", 3)
    clock = iter([0.0, 0.02, 0.04, 0.06, 0.08])
    monkeypatch.setattr(field_speed, "_clock", lambda: next(clock))
    monkeypatch.setitem(sys.modules, patches.V1_SAMPLER, _module(patches.V1_SAMPLER, RejectionSampler))
    patches.install(frozenset({"slow_step"}))
    patches.install(frozenset({"slow_step"}))  # idempotent: one wrapper
    rs = RejectionSampler()
    assert [rs.forward(i) for i in range(5)] == [1, 2, 3, 4, 5] and calls == [0, 1, 2, 3, 4]
    assert slept == [pytest.approx(0.001), pytest.approx(0.001)]  # 5% of 20 ms from the 4th call on
    said = capsys.readouterr().err.splitlines()  # one line in the engine's log, once
    assert said == ["observatory fault slow_step: spec step median 20.000 ms over 3 intervals; each spec step "
                    "now delayed 1.000 ms (0.05 of it)"]


def test_calls_captured_into_a_cuda_graph_are_neither_timed_nor_delayed(monkeypatch):
    delays: list[float] = []
    capturing = iter([True, True, False, False, True, False, False])  # graph capture at start-up, then decode
    clock = iter([0.0, 0.01, 0.02, 0.03])  # read only outside capture
    monkeypatch.setattr(field_speed, "_delayer", lambda on_cuda: delays.append)
    monkeypatch.setattr(field_speed, "_capturing", lambda: next(capturing))
    monkeypatch.setattr(field_speed, "_clock", lambda: next(clock))
    monkeypatch.setattr(field_speed, "CALIBRATION_STEPS", 2)
    slowed = field_speed._wrap(lambda self, x: x, on_cuda=True)
    assert [slowed(None, i) for i in range(7)] == list(range(7))
    assert delays == [0.0, 0.0, pytest.approx(0.0005), pytest.approx(0.0005)]


def test_v2_call_is_wrapped_and_other_faults_leave_it_alone(monkeypatch):
    class RejectionSampler:
        def __call__(self, logits):
            return logits

    original = RejectionSampler.__call__
    monkeypatch.setitem(sys.modules, patches.V2_SAMPLER, _module(patches.V2_SAMPLER, RejectionSampler))
    patches.install(frozenset({"ghost"}))
    assert RejectionSampler.__call__ is original
    patches.install(frozenset({"slow_step"}))
    assert getattr(RejectionSampler.__call__, "__observatory_fault__", False)
    assert RejectionSampler()(7) == 7


def test_slow_step_is_registered():
    assert "slow_step" in FAULTS
