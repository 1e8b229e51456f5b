"""Serve the default model with vLLM (CPU) and measure it on a probe suite.

Each arm starts one OpenAI-compatible server in its own process group
(base: no speculation; mtpK: ``{"method": "mtp", "num_speculative_tokens": K}``),
sends every probe greedily (temperature 0, token ids and top-5 logprobs
returned), reads the spec-decode counters from ``/metrics`` before and after
each probe, and stops the server. Spec arms are compared token for token with
the base arm.

Usage: python -m training.serve_check [--arms base,mtp1,mtp2] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from transformers import AutoTokenizer

from observatory.probes import Probe, load_probe_file
from training.build_tokenizer import DEFAULT_OUT
from training.check_mtp import REPO, check_expect

PORT = 8765
_COUNTERS = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}


def server_command(model: Path, port: int, k: int) -> list[str]:
    """The api_server command line of one arm (k = 0: no speculation)."""
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--port", str(port), "--host", "127.0.0.1",
        "--dtype", "float32", "--max-model-len", "1024", "--seed", "0",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ]  # fmt: skip
    if k:
        cmd += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": k})]
    return cmd


def start_server(cmd: list[str], log: Path, port: int, timeout: float = 600) -> subprocess.Popen:
    """Start the server in a new process group; return once /health answers."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(2)
    stop_server(proc)
    raise RuntimeError(f"server not healthy after {timeout}s; see {log}")


def stop_server(proc: subprocess.Popen) -> None:
    """Terminate the server's whole process group."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def spec_counters(port: int) -> dict[str, float]:
    """Spec-decode counters (totals and accepted per position) from /metrics."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    out: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
                out[f"pos{s.labels['position']}"] += s.value
            elif s.name.removesuffix("_total") in _COUNTERS:
                out[_COUNTERS[s.name.removesuffix("_total")]] += s.value
    return dict(out)


def request_body(probe: Probe, model: str) -> dict[str, Any]:
    """Greedy chat request with token ids and top-5 logprobs."""
    body: dict[str, Any] = {
        "model": model,
        "messages": probe.messages,
        "max_tokens": probe.max_tokens,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 5,
        "return_tokens_as_token_ids": True,
    }
    if probe.tools:
        body["tools"] = probe.tools
        body["tool_choice"] = probe.tool_choice or "auto"
    return body


def run_probe(probe: Probe, port: int, model: str, tok: Any) -> dict[str, Any]:
    """One request; the output, its token ids, the parsed tool calls, the
    expectation verdict and this request's spec-decode counter deltas."""
    before = spec_counters(port)
    r = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions", json=request_body(probe, model), timeout=300
    )
    r.raise_for_status()
    choice = r.json()["choices"][0]
    after = spec_counters(port)
    ids = [int(t["token"].removeprefix("token_id:")) for t in choice["logprobs"]["content"]]
    raw = tok.decode(ids, skip_special_tokens=False).removesuffix("<|im_end|>")
    passed, reason = check_expect(probe, raw)
    calls = choice["message"].get("tool_calls") or []
    if probe.category == "tool_call" and [c["function"]["name"] for c in calls] != probe.expect.get(
        "tool_names", [c["function"]["name"] for c in calls]
    ):
        passed, reason = False, "the hermes parser did not return the expected tool_calls"
    return {
        "name": probe.name,
        "category": probe.category,
        "content": choice["message"].get("content"),
        "tool_calls": [c["function"] for c in calls],
        "finish_reason": choice["finish_reason"],
        "token_ids": ids,
        "passed": passed,
        "reason": reason,
        "spec": {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after},
    }


def run_arm(k: int, probes: list[Probe], model: Path, port: int, log_dir: Path) -> list[dict]:
    """Serve one arm, send every probe, stop the server."""
    tok = AutoTokenizer.from_pretrained(model)
    proc = start_server(server_command(model, port, k), log_dir / f"server_k{k}.log", port)
    try:
        return [run_probe(p, port, str(model), tok) for p in probes]
    finally:
        stop_server(proc)


def acceptance(results: list[dict]) -> dict[str, float]:
    """Accepted / drafted tokens per category and overall."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in results:
        groups[r["category"]].append(r)
    groups["all"] = results
    out = {}
    for name, group in groups.items():
        drafted = sum(r["spec"].get("draft_tokens", 0) for r in group)
        accepted = sum(r["spec"].get("accepted", 0) for r in group)
        out[name] = accepted / drafted if drafted else 0.0
    return out


def main() -> None:
    """Run the arms, print verdicts, acceptance and token-id equality."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--probes", type=Path, default=REPO / "probes" / "default.toml")
    ap.add_argument("--arms", default="base,mtp1,mtp2")
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp"))
    ap.add_argument("--json", type=Path, help="also write all results here")
    args = ap.parse_args()
    probes = load_probe_file(args.probes)
    arms = {a: (0 if a == "base" else int(a.removeprefix("mtp"))) for a in args.arms.split(",")}
    results = {}
    for arm, k in arms.items():
        results[arm] = run_arm(k, probes, args.model.resolve(), args.port, args.log_dir)
        for r in results[arm]:
            spec = r["spec"]
            rate = f"{spec.get('accepted', 0):.0f}/{spec.get('draft_tokens', 0):.0f}" if k else "-"
            print(f"{arm:5s} {'PASS' if r['passed'] else 'FAIL'}  {r['name']:24s} {rate:>7s}  "
                  f"{r['content']!r} {r['tool_calls'] or ''}", flush=True)
        if k:
            print(f"{arm} acceptance: " + "  ".join(f"{c} {v:.3f}" for c, v in acceptance(results[arm]).items()))
    if "base" in results:
        for arm in results:
            if arm != "base":
                same = [a["token_ids"] == b["token_ids"] for a, b in zip(results[arm], results["base"])]
                print(f"{arm}: token ids equal to base on {sum(same)}/{len(same)} probes")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
