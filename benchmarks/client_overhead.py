#!/usr/bin/env python
"""The observatory client's own cost per request, with no server: a mocked stream.

`EngineClient.run` is fed a canned vLLM chat stream (role chunk, TOKENS token
chunks each with top-10 logprobs as the observatory requests them, finish and
usage chunks) through a local HTTP server in a thread, so what is timed is the
client alone: request build, SSE and JSON parsing (observatory.client.wire, observatory.client.sse),
the observatory's token bookkeeping. For scale, the same bytes are also parsed
the way `vllm bench serve` does (`json.loads` of each SSE message).

    python benchmarks/client_overhead.py [--tokens 64] [--runs 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from observatory.client.send import TOP_LOGPROBS, EngineClient
from observatory.model.probes import Probe


def _chunk(delta: dict[str, Any], logprobs: dict[str, Any] | None = None, finish: str | None = None) -> str:
    c = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}
    return "data: " + json.dumps(c) + "\n\n"


def _logprobs(t: int) -> dict[str, Any]:
    tops = [{"token": f"token_id:{t + i}", "logprob": -0.1 * i, "bytes": [97]} for i in range(TOP_LOGPROBS)]
    return {"content": [{"token": f"token_id:{t}", "logprob": -0.1, "bytes": [97], "top_logprobs": tops}]}


def stream_body(tokens: int) -> bytes:
    """A vLLM-like streamed chat response of TOKENS tokens with logprobs."""
    parts = [_chunk({"role": "assistant", "content": ""})]
    parts += [_chunk({"content": "a"}, _logprobs(5 + i)) for i in range(tokens)]
    parts.append(_chunk({}, None, "length"))
    usage = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
             "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}}
    parts.append("data: " + json.dumps(usage) + "\n\n")
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode()


class _Canned(ThreadingHTTPServer):
    daemon_threads = True
    body = b""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, data: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._send(b'{"data": [{"id": "m"}]}', "application/json")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(self.server.body, "text/event-stream")  # type: ignore[attr-defined]


def mocked_client(body: bytes) -> EngineClient:
    """An EngineClient talking to an in-process HTTP server that answers every POST with BODY."""
    server = _Canned(("127.0.0.1", 0), _Handler)
    server.body = body
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return EngineClient(f"http://127.0.0.1:{server.server_address[1]}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--runs", type=int, default=50)
    a = p.parse_args()
    body = stream_body(a.tokens)
    client = mocked_client(body)
    probe = Probe(name="p", category="prose_en", messages=[{"role": "user", "content": "hi"}], max_tokens=a.tokens)
    first = client.run(probe)
    if not first.ok or len(first.token_ids) != a.tokens:
        raise SystemExit(f"mocked stream not parsed: {first.error}, {len(first.token_ids)} tokens")
    cpu, ttft, dur = [], [], []
    for _ in range(a.runs):
        c0 = time.thread_time()
        r = client.run(probe)
        cpu.append((time.thread_time() - c0) * 1000.0)
        ttft.append(float(r.ttft_ms or 0.0))
        dur.append(float(r.duration_ms or 0.0))
    client.close()
    msgs = [m for m in body.decode().split("\n\n") if m]
    plain = []
    for _ in range(a.runs):
        c0 = time.process_time()
        for m in msgs:
            data = m.removeprefix("data: ")
            if data != "[DONE]":
                d = json.loads(data)
                if d.get("choices"):
                    d["choices"][0]["delta"].get("content")
        plain.append((time.process_time() - c0) * 1000.0)
    med = statistics.median
    print(f"observatory EngineClient.run, {a.tokens}-token stream, no server (median of {a.runs}):")
    print(f"  CPU {med(cpu):.2f} ms per request, {med(cpu) / a.tokens:.3f} ms per token")
    print(f"  TTFT floor {med(ttft):.2f} ms; after the first token {(med(dur) - med(ttft)) / (a.tokens - 1):.3f} ms a token")
    print(f"vllm bench-style parse of the same bytes (json.loads per message): {med(plain):.3f} ms per request")


if __name__ == "__main__":
    main()
