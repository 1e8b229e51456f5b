"""Issue 29 item 3: GPU clocks and utilisation beside each timed block (observatory.engines.gpu_clocks).

This host has no GPU: the sampler is run against an nvidia-smi STUB (a shell script on PATH printing rows in
nvidia-smi's ``--format=csv,noheader,nounits`` layout, as the H200's driver 580 prints them), and without one
(the "not measurable" path, never an error). A URL-arm session on stub servers shows the runner path stores
"not measurable" beside each block. Cost: about 3 s.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from observatory.engines import gpu_clocks
from observatory.engines.gpu_clocks import SM_TOLERANCE, ClockSampler, drift
from observatory.judge.figures import gpu_clocks as block_clocks
from observatory.judge.perf_gates import clocks_check
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import run_gate


def _record(*rows: tuple[float, float]) -> dict[str, object]:
    """A stored record of (sm MHz, utilisation %) samples on GPU 0."""
    return {"measurable": True, "gpus": [0], "fields": ["t_s", *gpu_clocks.FIELDS],
            "samples": [[0.5 * i, 0.0, sm, 2619.0, util, 40.0, 300.0] for i, (sm, util) in enumerate(rows)]}


def test_a_moving_sm_clock_is_flagged_and_a_steady_one_is_not() -> None:
    steady = drift(_record((1980.0, 95.0), (1980.0, 97.0), (1965.0, 96.0)))
    assert steady["measurable"] and steady["moved"] is False and steady["sm_range"] < SM_TOLERANCE
    moved = drift(_record((1980.0, 95.0), (1755.0, 97.0), (1980.0, 96.0)))
    assert moved["moved"] is True and moved["sm_range"] == pytest.approx(225 / 1980)
    # an idle sample (utilisation 0: the block's start, before the first kernel) is not the clock under load
    idle = drift(_record((345.0, 0.0), (1980.0, 97.0), (1980.0, 96.0)))
    assert idle["moved"] is False and idle["busy_samples"] == 2


def test_the_speed_check_warns_on_either_side_and_skips_what_was_not_measured() -> None:
    moved = {"gpu_clocks": block_clocks([_Block(_record((1980.0, 95.0), (1755.0, 97.0)))])}
    calm = {"gpu_clocks": block_clocks([_Block(_record((1980.0, 95.0), (1980.0, 97.0)))])}
    blind = {"gpu_clocks": block_clocks([_Block({"measurable": False, "why": "not measurable: no nvidia-smi on "
                                                                             "this host"})])}
    assert clocks_check(calm, calm)["verdict"] == "PASS"
    warn = clocks_check(calm, moved)
    assert warn["verdict"] == "WARN" and "base c=1" in warn["reason"] and "not trustworthy" in warn["reason"]
    assert clocks_check(moved, None)["verdict"] == "WARN"
    skip = clocks_check(blind, blind)
    assert skip["verdict"] == "SKIP" and skip["reason"] == "not measurable: no nvidia-smi on this host"
    assert block_clocks([])["measurable"] is False


class _Block:
    concurrency, repeat = 1, 0

    def __init__(self, gpu: dict[str, object]):
        self.gpu = gpu


def _stub_smi(tmp_path: Path, sm: str) -> None:
    """nvidia-smi STUB: prints one row per asked GPU in the real tool's csv layout."""
    exe = tmp_path / "nvidia-smi"
    exe.write_text(f"#!/bin/sh\necho '0, {sm}, 3201, 97, 45, 310.52'\necho '1, {sm}, 3201, 96, 44, [N/A]'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)


def test_the_sampler_reads_nvidia_smi_during_the_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _stub_smi(tmp_path, "1980")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with ClockSampler([0, 1], interval_s=0.05) as s:
        import time
        time.sleep(0.2)
    rec = s.record()
    assert rec["measurable"] and len(rec["samples"]) >= 4  # at the start, during, at the end; two GPUs each
    assert {row[1] for row in rec["samples"]} == {0.0, 1.0} and rec["samples"][1][6] is None  # "[N/A]" power
    assert drift(json.loads(json.dumps(rec)))["moved"] is False


def test_without_nvidia_smi_or_a_gpu_it_is_not_measurable_never_an_error(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi here
    with ClockSampler([0]) as s:
        pass
    assert s.record() == {"measurable": False, "why": "not measurable: no nvidia-smi on this host"}
    with ClockSampler(None) as s:
        pass
    assert s.record() == {"measurable": False, "why": "not measurable: no GPU on this arm"}


def test_a_url_session_stores_not_measurable_beside_each_block(tmp_path: Path) -> None:
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        _, out, _ = run_gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    data = json.loads((out / "session.json").read_text())
    for arm in data["arms"]:
        clocks = arm["gpu_clocks"]
        assert clocks["measurable"] is False and "URL arm" in clocks["why"], clocks
        assert clocks["blocks"] and all(not b["measurable"] for b in clocks["blocks"])
    spec_arm = next(a for a in data["arms"] if a["name"] == "mtp1")
    assert next(p for p in spec_arm["performance"] if p["check"] == "gpu_clocks")["verdict"] == "SKIP"
