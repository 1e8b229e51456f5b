"""Issue 29 item 4: the timed steps against each arm's captured CUDA graphs (observatory.judge.graph_coverage).

Recorded logs: examples/h200/hybrid-base.log (vLLM 0.26 on the H200, CUDA graphs [1, 2, 4, 8, 16],
--max-num-seqs 8) and examples/h200/tiny-mtp1.log (--enforce-eager); recorded launches: the committed
H200 sessions' argv. Each flag with its negative control. Cost: under 1 s.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from observatory.engines.cuda_graphs import from_argv, from_log_file
from observatory.judge.graph_coverage import coverage
from observatory.judge.perf_gates import graphs_check
from observatory.model.paths import REPO_ROOT

H200 = REPO_ROOT / "examples" / "h200"
ARGV = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/tmp/hybrid", "--max-num-seqs=8"]


def arm(k: int = 0, gpus: list[int] | None = None, **launch: Any) -> Any:
    spec = {"method": "mtp", "num_speculative_tokens": k} if k else None
    return SimpleNamespace(engine="vllm", launch={"engine": "vllm", "gpus": [0] if gpus is None else gpus,
                                                  "argv": ARGV, "speculative_config": spec, **launch})


def test_the_recorded_logs_give_the_captured_sizes() -> None:
    hybrid = from_log_file(H200 / "hybrid-base.log")
    assert hybrid == {"source": "engine log", "eager": False, "mode": "FULL_AND_PIECEWISE",
                      "sizes": [1, 2, 4, 8, 16], "max_size": 16, "max_num_seqs": 8}
    tiny = from_log_file(H200 / "tiny-mtp1.log")
    assert tiny is not None and tiny["eager"] and tiny["mode"] == "NONE" and tiny["sizes"] == []
    assert from_log_file(H200 / "README.md") is None and from_log_file(H200 / "absent.log") is None


def test_a_spec_step_above_the_largest_graph_is_flagged_and_one_within_is_not() -> None:
    """k = 2 verifies 3 tokens per sequence: c = 4 is 12 tokens (padded to the 16 graph), c = 8 is 24 (> 16: eager)."""
    graphs = from_log_file(H200 / "hybrid-base.log")
    within = coverage(arm(2, cuda_graphs=graphs), [1, 4])
    assert within["status"] == "covered" and not within["flagged"]
    assert [(r["step_tokens"], r["graph_size"]) for r in within["levels"]] == [(3, 4), (12, 16)]
    outside = coverage(arm(2, cuda_graphs=graphs), [1, 8])
    assert outside["status"] == "outside" and outside["flagged"]
    assert "c=8: 24 tokens per step > largest captured size 16" in outside["why"]
    base = coverage(arm(0, cuda_graphs=graphs), [1, 8])  # base at c = 8: 8 tokens, its own graph
    assert base["status"] == "covered" and base["levels"][-1]["exact"]
    capped = coverage(arm(2, cuda_graphs={**graphs, "max_num_seqs": 4}), [8])  # never more than 4 sequences
    assert capped["status"] == "covered" and capped["levels"][0]["step_tokens"] == 12


def test_a_capture_list_from_the_launch_flags() -> None:
    """--cuda-graph-sizes without 1: a single stream pads up to 8 (covered); -O's max caps c = 4 of k = 1."""
    got = coverage(arm(0, argv=[*ARGV, "--cuda-graph-sizes", "8 16"]), [1])
    assert got["status"] == "covered" and got["levels"][0]["graph_size"] == 8
    cc = json.dumps({"cudagraph_capture_sizes": [1, 2, 4], "max_cudagraph_capture_size": 4})
    assert coverage(arm(1, argv=[*ARGV, "-O", cc]), [4])["status"] == "outside"
    assert coverage(arm(1, argv=[*ARGV, "-O", cc]), [2])["status"] == "covered"


def test_eager_arms_are_flagged_cpu_arms_are_not_applicable() -> None:
    tiny = from_log_file(H200 / "tiny-mtp1.log")
    eager = coverage(arm(1, cuda_graphs=tiny), [1])
    assert eager["status"] == "eager" and eager["flagged"]
    assert coverage(arm(1, argv=[*ARGV, "--enforce-eager"]), [1])["status"] == "eager"  # the committed tiny argv
    cpu = coverage(arm(1, gpus=[]), [1])
    assert cpu["status"] == "not applicable" and not cpu["flagged"]
    unknown = coverage(arm(1), [1])  # no log line stored, argv leaves the sizes to vLLM
    assert unknown["status"] == "unknown" and not unknown["flagged"]
    assert coverage(arm(1, url="http://x"), [1])["status"] == "unknown"
    assert from_argv(ARGV) is None


def test_the_speed_check_warns_on_base_as_on_the_spec_arm() -> None:
    graphs = from_log_file(H200 / "hybrid-base.log")
    ok = {"cuda_graphs": coverage(arm(2, cuda_graphs=graphs), [1])}
    eager_base = {"cuda_graphs": coverage(arm(0, argv=[*ARGV, "--enforce-eager"]), [1])}
    assert graphs_check(ok, {"cuda_graphs": coverage(arm(0, cuda_graphs=graphs), [1])})["verdict"] == "PASS"
    warn = graphs_check(ok, eager_base)
    assert warn["verdict"] == "WARN" and warn["reason"].count("base:") == 1
    assert graphs_check({"cuda_graphs": coverage(arm(2, cuda_graphs=graphs), [8])}, None)["verdict"] == "WARN"
    cpu = {"cuda_graphs": coverage(arm(1, gpus=[]), [1])}
    skip = graphs_check(cpu, cpu)
    assert skip["verdict"] == "SKIP" and "not applicable" in skip["reason"]
