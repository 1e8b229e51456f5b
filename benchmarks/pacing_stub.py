#!/usr/bin/env python
"""A hand-made STUB of a vLLM OpenAI server that paces tokens: what a client can receive, offered exactly.

Every completion request (chat or text, streamed or not) is answered with
``max_tokens`` tokens, one SSE chunk each, the i-th sent at ``start + i / RATE``
seconds on an absolute schedule, so a stream offers RATE tok/s whatever the
client does; a client that reads slower only finishes later. It sends what
vLLM sends: logprobs with ``token_id:N`` tokens and top-k alternatives when
asked, a role chunk, a finish chunk, a usage chunk when
``stream_options.include_usage`` is set, ``[DONE]``. /health, /version,
/v1/models, /metrics (no spec counters), /tokenize and /detokenize answer too.

It is asyncio on raw sockets (HTTP/1.1, keep-alive, chunked streams) and runs
in its own process, so at 64 streams x 100 tok/s it spends little CPU and
never shares the client's GIL. Used by `benchmarks/client_throughput.py`.

    python benchmarks/pacing_stub.py --rate 100 [--port 0] [--random-top]   # prints its URL, serves until killed
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from array import array
from typing import Any

VOCAB = 2000


def _chunk(obj: dict[str, Any]) -> bytes:
    data = b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _token(i: int) -> int:
    return 5 + (i * 7919) % VOCAB


# --random-top: alternatives drawn from a 151,936-token vocabulary (Qwen's) with random float32
# logprobs, the least compressible top-k a server can send (benchmarks/storage_size.py)
RANDOM_TOP: random.Random | None = None


def _alternatives(t: int, k: int) -> list[tuple[int, float]]:
    """The top-K (token id, logprob) pairs of chosen token T, best first."""
    rnd = RANDOM_TOP
    if rnd is None:
        return [((t + j) % VOCAB, -0.25 * j) for j in range(k)]
    f32 = array("f", [0.0] + sorted(-rnd.random() * 8 for _ in range(k - 1)))
    return [(t if j == 0 else rnd.randrange(151936), f32[j]) for j in range(k)]


def _chat_logprobs(t: int, k: int) -> dict[str, Any]:
    tops = [{"token": f"token_id:{a}", "logprob": lp, "bytes": [97]} for a, lp in _alternatives(t, k)]
    return {"content": [{"token": f"token_id:{t}", "logprob": 0.0, "bytes": [97], "top_logprobs": tops}]}


def _text_logprobs(t: int, k: int) -> dict[str, Any]:
    return {"tokens": [f"token_id:{t}"], "token_logprobs": [0.0], "text_offset": [0],
            "top_logprobs": [{f"token_id:{a}": lp for a, lp in _alternatives(t, max(k, 1))}]}


class Stub:
    """The server's state: its pacing rate."""

    def __init__(self, rate: float):
        self.rate = rate

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one keep-alive connection."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                n = int(headers.get("content-length", 0))
                body = json.loads(await reader.readexactly(n)) if n else {}
                await self.route(method, path, body, writer)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def reply(self, writer: asyncio.StreamWriter, obj: Any, code: int = 200,
                    ctype: str = "application/json") -> None:
        """One whole response."""
        data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
        writer.write(b"HTTP/1.1 %d OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
                     % (code, ctype.encode(), len(data), data))
        await writer.drain()

    async def route(self, method: str, path: str, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """Dispatch one request."""
        if path == "/health":
            return await self.reply(writer, b"")
        if path == "/version":
            return await self.reply(writer, {"version": "pacing-stub"})
        if path == "/v1/models":
            return await self.reply(writer, {"data": [{"id": "pacing-stub"}]})
        if path == "/metrics":
            return await self.reply(writer, b"vllm:num_requests_running 0\n", ctype="text/plain")
        if path == "/tokenize":
            return await self.reply(writer, {"tokens": [ord(c) % VOCAB for c in str(body.get("prompt", ""))]})
        if path == "/detokenize":
            return await self.reply(writer, {"prompt": "".join(chr(t) if t < 32 else "a" for t in body["tokens"])})
        if path in ("/v1/chat/completions", "/v1/completions"):
            return await self.complete(path.endswith("chat/completions"), body, writer)
        return await self.reply(writer, {"error": "not found"}, 404)

    async def complete(self, chat: bool, body: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        """Pace max_tokens tokens at the stub's rate."""
        n = int(body.get("max_tokens") or 16)
        lp = body.get("logprobs")
        k = int(body.get("top_logprobs") or 0) if chat else int(lp or 0)
        want_lp = bool(lp)
        start = time.monotonic()
        base = {"id": "x", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
                "model": "pacing-stub"}
        usage = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
        if not body.get("stream"):
            await asyncio.sleep(n / self.rate)
            ids = [_token(i) for i in range(n)]
            if chat:
                choice: dict[str, Any] = {"index": 0, "finish_reason": "length",
                                          "message": {"role": "assistant", "content": "a" * n}}
                if want_lp:
                    choice["logprobs"] = {"content": [c for t in ids for c in _chat_logprobs(t, k)["content"]]}
            else:
                choice = {"index": 0, "finish_reason": "length", "text": "a" * n}
                if want_lp:
                    parts = [_text_logprobs(t, k) for t in ids]
                    choice["logprobs"] = {key: [x for p in parts for x in p[key]]
                                          for key in ("tokens", "token_logprobs", "text_offset", "top_logprobs")}
            return await self.reply(writer, {**base, "choices": [choice], "usage": usage})
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for i in range(n):
            delay = start + (i + 1) / self.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            t = _token(i)
            if chat:
                delta = {"role": "assistant", "content": "a"} if i == 0 else {"content": "a"}
                choice = {"index": 0, "delta": delta, "finish_reason": None}
                if want_lp:
                    choice["logprobs"] = _chat_logprobs(t, k)
            else:
                choice = {"index": 0, "text": "a", "finish_reason": None}
                if want_lp:
                    choice["logprobs"] = _text_logprobs(t, k)
            writer.write(_chunk({**base, "choices": [choice]}))
        end = {"index": 0, "delta": {}, "finish_reason": "length"} if chat else \
            {"index": 0, "text": "", "finish_reason": "length"}
        writer.write(_chunk({**base, "choices": [end]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            writer.write(_chunk({**base, "choices": [], "usage": usage}))
        data = b"data: [DONE]\n\n"
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        await writer.drain()


async def serve(rate: float, port: int) -> None:
    """Serve until killed; print the URL first."""
    stub = Stub(rate)
    server = await asyncio.start_server(stub.handle, "127.0.0.1", port, backlog=1024)
    print(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=100.0, help="tokens per second per stream")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--random-top", action="store_true",
                   help="top-k alternatives with random ids (151,936-token vocabulary) and random float32 logprobs")
    a = p.parse_args(argv)
    global RANDOM_TOP
    RANDOM_TOP = random.Random(0) if a.random_top else None
    try:
        asyncio.run(serve(a.rate, a.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
