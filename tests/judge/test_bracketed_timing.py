"""`--timing bracketed` (issue 46 item 3): each spec arm's timed block between two of base's, the host's drift.

The arithmetic on rows whose truth is known (a host that slows down between base's blocks by a known factor,
a steady host) and the plan's choice of design. The whole path once on the real CPU engine (base kept up, each
spec repeat between base's blocks, the drift and the drift-corrected interval stored) is
real_engine/test_bracketed_session.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from observatory.judge.bracketed import bracketed_vs_base, brackets, drift
from observatory.session import plan as plan_mod
from observatory.session.options import SessionPlan
from observatory.session.plan import plan_compare
from tests.support.paths import FIXTURES

SUITE = FIXTURES / "channel_tiny.toml"


def _row(probe: int, rep: int, secs: float, tokens: int = 100, ok: bool = True) -> Any:
    return SimpleNamespace(probe_id=probe, repeat=rep, concurrency=1, ok=ok, usage={"completion_tokens": tokens},
                           token_ids=None, duration_ms=secs * 1000.0, ttft_ms=secs * 100.0)


def _session(spec_s: float, base_before_s: float, base_after_s: float, probes: int = 12) -> dict[str, Any]:
    spec = [_row(p, 0, spec_s * (1 + 0.01 * (p % 3))) for p in range(probes)]
    base = [_row(p, 0, base_before_s * (1 + 0.01 * (p % 3))) for p in range(probes)]
    base += [_row(p, 1, base_after_s * (1 + 0.01 * (p % 3))) for p in range(probes)]
    got = brackets(spec, base)
    assert got is not None
    return bracketed_vs_base(got)


def test_a_steady_host_gives_a_tight_interval_and_no_drift() -> None:
    """Base 1.0 s before and after, spec 0.8 s: S 1.25, drift 0, the drift-corrected interval tight around it."""
    vb = _session(0.8, 1.0, 1.0)
    assert vb["S"] == pytest.approx(1.25) and vb["drift"] == pytest.approx(0.0)
    assert vb["ci"][0] == pytest.approx(1.25, rel=0.02) and vb["ci"][1] == pytest.approx(1.25, rel=0.02)
    assert vb["design"] == "bracketed" and vb["pairs"] == 12 and vb["incomplete_pairs"] == 0


def test_a_drifting_host_widens_the_interval_to_both_brackets() -> None:
    """The host slows by half between base's blocks; the spec arm in the middle took 1.5 s. Against base before
    it reads 0.67, against base after 1.33: the drift-corrected interval spans both, and the drift says -50%."""
    vb = _session(1.5, 1.0, 2.0)
    assert vb["drift"] == pytest.approx(-0.5, rel=0.02)
    assert vb["before"]["S"] == pytest.approx(1 / 1.5, rel=0.02) and vb["after"]["S"] == pytest.approx(2 / 1.5, rel=0.02)
    assert vb["ci"][0] <= 0.67 and vb["ci"][1] >= 1.33
    assert vb["S"] == pytest.approx(1.0, rel=0.02)  # against both brackets pooled


def test_incomplete_brackets_and_warm_up_are_left_out() -> None:
    spec = [_row(0, 0, 0.5), _row(1, 0, 0.5, ok=False), _row(2, 0, 0.5), _row(3, 0, 0.5)]
    base = [_row(p, 0, 1.0) for p in range(4)] + [_row(p, 1, 1.0) for p in (0, 1, 3)]  # probe 2: no after
    got = brackets(spec, base, left_out={(3, 0)})
    assert got is not None and got["incomplete"] == 2 and got["rows"] == [[100.0, 0.5, 100.0, 1.0, 100.0, 1.0]]
    assert brackets(spec, []) is None  # not bracketed
    assert drift([1.0, None, 2.0]) is None and drift([2.0, 1.0, 1.5]) == pytest.approx(-0.5)


def test_auto_timing_brackets_on_the_cpu_and_says_why_not_on_an_unshared_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """--timing auto (the default): bracketed where base's server can stay up beside the spec arms; on a GPU
    without an explicit memory share, or with --parallel-arms, sequential with the reason kept."""
    monkeypatch.setattr(plan_mod, "gpu_count", lambda: 0)
    assert plan_compare(SessionPlan(arms="base,mtp1")).timing == "bracketed"
    monkeypatch.setattr(plan_mod, "gpu_count", lambda: 1)
    monkeypatch.setattr(plan_mod, "check_launchable", lambda *_a: None)
    opts = plan_compare(SessionPlan(arms="base,mtp1"))
    assert opts.timing == "sequential" and opts.timing_note and "memory share" in opts.timing_note
    shared = plan_compare(SessionPlan(arms="base,mtp1", engine_args=("--gpu-memory-utilization=0.4",)))
    assert shared.timing == "bracketed" and shared.timing_note is None
    assert plan_compare(SessionPlan(arms="base,mtp1", timing="sequential")).timing == "sequential"
