"""A hand-made STUB of an OpenAI-compatible server, for faults a real engine cannot show on demand.

Used only for: a server that hangs mid-request, one that returns a malformed
body, and hostile servers (NaN or decreasing /metrics, an echoed
Authorization header, NaN logprobs, over-long /version and finish_reason).
Everything else is tested against real vLLM.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from tests.support.local_http import LocalHttp


class StubServer(LocalHttp):
    """Serves /health, /version, /v1/models, /metrics; chat completions per `mode`.

    max_model_len: what /v1/models reports (absent when None).
    mode: "ok" (answers every completion, streamed or not, after `delay_s`),
    "hang" (never answers a completion), "malformed" (200 with a broken
    body), "hang_after:N" (answers N completions, then hangs everything,
    /health included), "echo_auth" (every completion fails with a 401 whose
    body echoes the Authorization header), "drip" (streams a keep-alive
    comment and a one-token chunk every 0.2 s, never finishing).

    A request with SGLang's ``return_token_ids`` gets its ``choices[].token_ids`` too (unstreamed answers).

    Hostile extras: `metrics` are served by /metrics in turn (the last one
    repeated); `version`, `finish_reason` and `logprob` go into the answers as given;
    `with_logprobs=False` withholds logprobs; `drip_metrics=True` makes /metrics drip
    a comment line every 0.2 s, never finishing. Out-of-range answers (issue 32):
    `models` are the ids /v1/models answers in turn (the last repeated; any JSON
    value); `completion_tokens` goes into every usage as given; `finish_reason`
    and `logprob` may be any JSON value; `pieces` are the answer's token texts,
    one logprobs entry each (e.g. a key split over two tokens). `server_info` is
    what /get_server_info answers (SGLang's server arguments), any JSON value.

    Half-configured servers (issue 30 item 6): `max_logprobs` answers a request asking
    for more top logprobs with vLLM's HTTP 400 (a server started with --max-logprobs N);
    `token_ids=False` answers logprobs with token texts, not ``token_id:N`` (a server
    ignoring return_tokens_as_token_ids).
    """

    def __init__(self, mode: str, delay_s: float = 0.0, token: int = 5, metrics: list[str] | None = None,
                 version: str = "stub-0", finish_reason: str = "stop", logprob: float = 0.0,
                 with_logprobs: bool = True, drip_metrics: bool = False, max_model_len: int | None = None,
                 models: list[object] | None = None, completion_tokens: object = 1, pieces: list[str] | None = None,
                 model: str = "stub-model", server_info: object = None, max_logprobs: int | None = None,
                 token_ids: bool = True):
        self.mode = mode
        self.server_info = server_info  # what /get_server_info answers (SGLang's), when given; else 404
        self.max_logprobs = max_logprobs
        self.token_ids = token_ids
        self.model = model  # the id /v1/models serves
        self.max_model_len = max_model_len
        self.delay_s = delay_s
        self.token = token
        self.metrics = metrics or ["vllm:num_requests_running 0\n"]
        self.metrics_reads = 0
        self.version = version
        self.finish_reason = finish_reason
        self.logprob = logprob
        self.with_logprobs = with_logprobs
        self.drip_metrics = drip_metrics
        self.models = models or [model]
        self.models_reads = 0
        self.completion_tokens = completion_tokens
        self.pieces = pieces or ["ok"]
        self.completions = 0
        self.authorizations: list[str] = []
        self.stop_event = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _hung(self) -> bool:
                if stub.mode.startswith("hang_after:"):
                    return stub.completions >= int(stub.mode.split(":")[1])
                return False

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _drip(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]}
                try:
                    while not stub.stop_event.wait(0.2):
                        self.wfile.write(b": keep-alive\n\n" + f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                except OSError:
                    pass

            def _hang(self) -> None:
                stub.stop_event.wait(120)

            def do_GET(self) -> None:
                if self._hung():
                    return self._hang()
                if self.path == "/health":
                    return self._send(200, b"")
                if self.path == "/version":
                    return self._send(200, json.dumps({"version": stub.version}).encode())
                if self.path == "/v1/models":
                    model: dict[str, object] = {"id": stub.models[min(stub.models_reads, len(stub.models) - 1)]}
                    stub.models_reads += 1
                    if stub.max_model_len is not None:
                        model["max_model_len"] = stub.max_model_len
                    return self._send(200, json.dumps({"data": [model]}).encode())
                if self.path == "/metrics" and stub.drip_metrics:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain")
                    self.end_headers()
                    try:
                        while not stub.stop_event.wait(0.2):
                            self.wfile.write(b"# still writing\n")
                            self.wfile.flush()
                    except OSError:
                        pass
                    return None
                if self.path == "/get_server_info" and stub.server_info is not None:
                    return self._send(200, json.dumps(stub.server_info).encode())
                if self.path == "/metrics":
                    text = stub.metrics[min(stub.metrics_reads, len(stub.metrics) - 1)]
                    stub.metrics_reads += 1
                    return self._send(200, text.encode(), "text/plain")
                return self._send(404, b"{}")

            def do_POST(self) -> None:
                stub.authorizations.append(self.headers.get("Authorization", ""))
                n = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(n) or b"{}")
                if stub.mode == "hang" or self._hung():
                    return self._hang()
                stub.completions += 1
                if stub.mode == "malformed":
                    return self._send(200, b'{"id": "x", "choices": [{"message": ')
                if stub.mode == "echo_auth":
                    echo = {"error": {"message": f"bad key: {self.headers.get('Authorization', '')}",
                                      "type": "auth", "code": 401}}
                    return self._send(401, json.dumps(echo).encode())
                asked = request.get("top_logprobs") or 0
                if stub.max_logprobs is not None and isinstance(asked, int) and asked > stub.max_logprobs:
                    error = {"error": {"message": f"Requested sample logprobs of {asked}, which is greater than "
                                                  f"max allowed: {stub.max_logprobs}", "type": "BadRequestError",
                                       "code": 400}}
                    return self._send(400, json.dumps(error).encode())
                time.sleep(stub.delay_s)
                if stub.mode == "drip":
                    return self._drip()
                lp = stub.logprob
                text = "".join(stub.pieces)
                usage = {"prompt_tokens": 1, "completion_tokens": stub.completion_tokens, "total_tokens": 2}
                logprobs = {"content": [{"token": f"token_id:{stub.token}", "logprob": lp, "bytes": list(p.encode()),
                                         "top_logprobs": [{"token": f"token_id:{stub.token}", "logprob": lp, "bytes": []}]}
                                        for p in stub.pieces]}
                if not stub.with_logprobs:
                    logprobs = None
                if request.get("stream"):
                    chunks = [
                        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [{"index": 0, "delta": {"role": "assistant", "content": text},
                                      "logprobs": logprobs, "finish_reason": None}]},
                        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [{"index": 0, "delta": {}, "finish_reason": stub.finish_reason}]},
                        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub-model",
                         "choices": [], "usage": usage},
                    ]
                    data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                    return self._send(200, data.encode(), "text/event-stream")
                body = {
                    "id": "c", "object": "chat.completion", "created": int(time.time()), "model": "stub-model",
                    "choices": [{"index": 0, "finish_reason": stub.finish_reason,
                                 "message": {"role": "assistant", "content": text},
                                 "logprobs": {"content": [{"token": "token_id:5" if stub.token_ids else p,
                                                           "logprob": 0.0,
                                                           "bytes": list(p.encode()), "top_logprobs": []}
                                                          for p in stub.pieces]}
                                 if stub.with_logprobs else None}],
                    "usage": usage,
                }
                if request.get("return_token_ids"):  # SGLang's ids (observatory.engines.sglang_ids), chat: whole only
                    body["choices"][0]["token_ids"] = [stub.token]
                return self._send(200, json.dumps(body).encode())

        self._serve(Handler)

    def _stopping(self) -> None:
        self.stop_event.set()
