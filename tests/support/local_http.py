"""A local HTTP server for the stub servers (sse_stub, stub_answers, stub_server): a free port, a daemon thread,
started and stopped by a with-block."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LocalHttp:
    """Serves a handler on 127.0.0.1 while its with-block runs; ``url`` is its base URL once `_serve` ran."""

    httpd: ThreadingHTTPServer
    url: str
    thread: threading.Thread

    def _serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        """Bind HANDLER to a free local port (started by ``__enter__``)."""
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _stopping(self) -> None:
        """Before the server stops: release handlers that wait (a subclass's events)."""

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping()
        self.httpd.shutdown()
        self.httpd.server_close()
