"""Figures of one arm as the perf gates read them (observatory.judge.perf_gates), built by hand for the speed rules."""

from __future__ import annotations

from typing import Any


def spec_figures(S: float | None, ttft: float, alpha: float | None, ci: list[float] | None = None,
        request_s: float = 2.0) -> dict[str, Any]:
    """A spec arm's figures: speed S (its interval CI), median TTFT, acceptance alpha, five requests of REQUEST_S."""
    return {"speed": {"ttft_ms": {"median": ttft}, "token_count": {}, "bursty": None,
                      "samples": [[64.0, request_s]] * 5},
            "acceptance": {"alpha": alpha}, "vs_base": {"S": S, "ci": ci}, "by_concurrency": {}}


# base's figures beside it: median TTFT 100 ms, five requests of 0.5 s
BASE = {"speed": {"ttft_ms": {"median": 100.0}, "samples": [[64.0, 0.5]] * 5}}


def by_check(perf: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The perf gates' rows by check name."""
    return {p["check"]: p for p in perf}


def bracketed(figures: dict[str, Any], ci: list[float], drift: float | None) -> dict[str, Any]:
    """FIGURES timed between base's blocks (observatory.judge.bracketed): its drift-corrected CI and base's drift."""
    return {**figures, "vs_base": {**figures["vs_base"], "design": "bracketed", "ci": ci, "drift": drift}}
