"""The instrument's speed benchmarks run (figures are recorded in benchmarks/README.md, never asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load(name: str) -> Any:
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_client_throughput_against_the_pacing_stub(capsys: pytest.CaptureFixture[str]) -> None:
    _load("client_throughput").main(["--streams", "2", "--rate", "2000", "--tokens", "20", "--repeats", "1"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "received" in ln]
    assert [ln.split()[0] for ln in lines] == ["batch", "timed", "full", "raw"]
    assert all("0 failed" in ln for ln in lines)


def test_cli_startup_times_fresh_processes() -> None:
    times = _load("cli_startup").time_command(["--version"], 1)
    assert len(times) == 1 and times[0] > 0


def test_compare_throughput_reads_the_figure_compare_stored(capsys: pytest.CaptureFixture[str]) -> None:
    _load("client_throughput")
    _load("compare_throughput").main(["--runs", "1", "--level", "2", "--rate", "2000"])
    out = capsys.readouterr().out
    assert "run 1:" in out and "of 4000 offered (load average" in out


def test_steady_bands_recomputes_the_bands_of_a_stored_session(capsys: pytest.CaptureFixture[str],
                                                                 tmp_path: Path) -> None:
    """benchmarks/steady_bands.py on the committed nightly-tiny session: both warm-ups, and the three spreads."""
    from conftest import example_db
    db = example_db("h200-nightly/nightly-tiny.db", tmp_path / "n.db")
    _load("steady_bands").main([str(db)])
    out = capsys.readouterr().out
    assert "mtp1: 10 requests; first: TTFT 50.13x" in out and out.count("warm-up found: 1") == 2
    assert "probe mix, after the first request (36 requests)" in out and "A/A pair's two servers (10)" in out
