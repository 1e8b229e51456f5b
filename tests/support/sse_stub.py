"""A hand-made STUB HTTP server for the client's wire-level faults a real engine cannot show on demand.

Used only for: bodies split at chosen bytes, a server that drips its answer
one byte at a time or goes silent, error statuses, and counting the requests
the client sends. Each POST path maps to a function of the decoded request
returning raw response bytes (`script`), or to a `drip`/`silent` behaviour.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.local_http import LocalHttp

Script = Callable[[dict[str, Any]], list[bytes]]


def sse(objs: list[Any], crlf: bool = False) -> bytes:
    """Objects as SSE data events, then [DONE] (CRLF line ends if asked)."""
    text = "".join(f"data: {json.dumps(o)}\n\n" for o in objs) + "data: [DONE]\n\n"
    return (text.replace("\n", "\r\n") if crlf else text).encode()


def chunked(pieces: list[bytes], status: int = 200, ctype: str = "text/event-stream") -> list[bytes]:
    """A chunked HTTP response: the head, then each piece as one chunk (written one by one)."""
    head = f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    return [head] + [b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p] + [b"0\r\n\r\n"]


def whole(body: bytes, status: int = 200, ctype: str = "application/json") -> list[bytes]:
    """A sized HTTP response in one write."""
    return [f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body]


class SseStub(LocalHttp):
    """Serves GET /v1/models and /health; POST paths from SCRIPTS; records every POST (path, body)."""

    def __init__(self, scripts: dict[str, Script | str]):
        self.scripts = scripts
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.connections = 0  # TCP connections accepted
        self.stop = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                stub.connections += 1
                super().setup()

            def do_GET(self) -> None:
                body = b'{"data": [{"id": "stub-model"}]}'
                self.wfile.write(whole(body)[0])

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                req = json.loads(self.rfile.read(n) or b"{}")
                stub.posts.append((self.path, req))
                script = stub.scripts.get(self.path)
                if script is None:
                    self.wfile.write(whole(b"{}", 404)[0])
                elif script == "drip":  # headers, then one byte every 0.2 s, forever
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                     b"Transfer-Encoding: chunked\r\n\r\n")
                    while not stub.stop.wait(0.2):
                        self.wfile.write(b"1\r\n:\r\n")
                        self.wfile.flush()
                elif script == "drip_head":  # the status line itself, one byte every 0.2 s
                    for b in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"y" * 1000:
                        if stub.stop.wait(0.2):
                            break
                        self.wfile.write(bytes([b]))
                        self.wfile.flush()
                elif script == "silent":
                    stub.stop.wait(30)
                else:
                    for part in script(req):  # type: ignore[operator]
                        self.wfile.write(part)
                        self.wfile.flush()
                        time.sleep(0.002)

        self._serve(Handler)

    def _stopping(self) -> None:
        self.stop.set()
