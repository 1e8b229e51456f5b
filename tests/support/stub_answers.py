"""A hand-made STUB of an OpenAI-compatible chat server whose answers a test chooses.

For verdict cases a real engine cannot show on demand: a server that fails
every completion while /health says 200, one that withholds logprobs, one
that answers only whitespace, one that answers differently only while
several requests are in flight. Everything else is tested against real vLLM.

``answer(request, in_flight) -> Answer`` decides each reply.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.local_http import LocalHttp


@dataclass
class Answer:
    """One reply: text and token ids (None: withhold logprobs), or an HTTP error."""

    text: str = "ok"
    token_ids: list[int] | None = field(default_factory=lambda: [5])
    status: int = 200
    usage_tokens: int | None = None  # default: len(token_ids) or 1
    delay_s: float = 0.0


def fixed(text: str = "ok", token_ids: list[int] | None = None, **kw: Any) -> Callable[[dict[str, Any], int], Answer]:
    """The same answer to every request."""
    ids = [5] if token_ids is None else token_ids
    return lambda request, in_flight: Answer(text=text, token_ids=list(ids), **kw)


class AnswerStub(LocalHttp):
    """Serves /health, /version, /v1/models, /metrics (no spec counters) and chat completions."""

    def __init__(self, answer: Callable[[dict[str, Any], int], Answer], withhold_logprobs: bool = False):
        self.answer = answer
        self.withhold_logprobs = withhold_logprobs
        self.in_flight = 0
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                routes = {"/health": b"", "/version": b'{"version": "stub-answers-0"}',
                          "/v1/models": b'{"data": [{"id": "stub-model", "max_model_len": 4096}]}'}
                if self.path == "/metrics":
                    return self._send(200, b"vllm:num_requests_running 0\n", "text/plain")
                if self.path in routes:
                    return self._send(200, routes[self.path])
                return self._send(404, b"{}")

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(n) or b"{}")
                with stub.lock:
                    stub.in_flight += 1
                    now = stub.in_flight
                try:
                    a = stub.answer(request, now)
                    time.sleep(a.delay_s)
                finally:
                    with stub.lock:
                        stub.in_flight -= 1
                if a.status != 200:
                    return self._send(a.status, json.dumps({"error": {"message": "stub failure"}}).encode())
                ids = None if stub.withhold_logprobs else a.token_ids
                logprobs = None if ids is None else {"content": [
                    {"token": f"token_id:{t}", "logprob": 0.0, "bytes": list(a.text.encode()) if i == 0 else [],
                     "top_logprobs": [{"token": f"token_id:{t}", "logprob": 0.0, "bytes": []}]}
                    for i, t in enumerate(ids)]}
                usage_n = a.usage_tokens if a.usage_tokens is not None else len(a.token_ids or [1])
                usage = {"prompt_tokens": 1, "completion_tokens": usage_n, "total_tokens": usage_n + 1}
                if request.get("stream"):
                    chunks = [
                        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": a.text},
                                      "logprobs": logprobs, "finish_reason": None}]},
                        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [], "usage": usage},
                    ]
                    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                    return self._send(200, data.encode(), "text/event-stream")
                body = {"id": "c", "object": "chat.completion", "created": int(time.time()), "model": "stub-model",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": a.text}, "logprobs": logprobs}],
                        "usage": usage}
                return self._send(200, json.dumps(body).encode())

        self._serve(Handler)
