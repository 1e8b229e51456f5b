"""A minimal HTTP/1.1 client for the probe requests: one POST, its body as the bytes arrive.

Why not httpx here: at 64 streams its pure-Python HTTP parser (h11) and
transport layers cost about 0.1 ms of CPU per streamed chunk, more than the
rest of the client together, and the client is the instrument (issue "A fast
instrument"). This reads the socket itself: a status line, headers, then a
chunked, sized or close-delimited body, on keep-alive connections from a
small pool. Every socket read waits at most until the request's deadline, so
``--request-timeout`` bounds the whole request, headers included, and a
server that drips a byte a second cannot extend it.

Every other call the observatory makes to an engine (/health, /version,
/metrics, /v1/models, /tokenize, /detokenize) goes through `Pool.request` too:
httpx's timeout is per read, so a server dripping one byte every 3 s held
those forever (issue 32). Requests go straight to the arm's host:
HTTP_PROXY, HTTPS_PROXY and NO_PROXY are not applied, on purpose (`vllm bench
serve` does apply them): the timed passes measure the engine, and a proxy's
own latency and any buffering of the event stream (tokens delivered in
bunches) would be timed as the engine's (docs/usage.md, "Proxies").
"""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

_RECV = 65536
_HEX = frozenset(b"0123456789abcdefABCDEF")
# A response head larger than this is not an HTTP server's (vLLM's are under 1 kB).
MAX_HEAD_BYTES = 64 * 1024
# One chunk larger than this is refused (a streamed event is a few kB; a whole answer well under it).
MAX_CHUNK_BYTES = 64 * 1024 * 1024
# The most of one body read whole (an answer, an error body, /metrics): far above any real one.
MAX_BODY_BYTES = 64 * 1024 * 1024


class DeadlineExceeded(Exception):
    """The request ran past its deadline (the whole request, not one read)."""


class WireError(Exception):
    """The connection failed or the server broke the HTTP protocol; `kind` is "connect" or "timeout"."""

    def __init__(self, message: str, kind: str = "connect"):
        super().__init__(message)
        self.kind = kind


class BodyTooLarge(WireError):
    """A body over the limit its reader set (nothing past the limit is kept)."""


@dataclass
class Conn:
    """One open connection and the bytes read past the last response."""

    sock: socket.socket
    buf: bytes = b""


@dataclass
class WireResponse:
    """A response whose head has been read; iterate `body()` once, to its end."""

    status: int
    headers: dict[str, str]
    _pool: Pool
    _conn: Conn
    _deadline: float
    _done: bool = field(default=False)
    _released: bool = field(default=False)

    def _recv(self) -> bytes:
        left = self._deadline - time.perf_counter()
        if left <= 0:
            raise DeadlineExceeded()
        self._conn.sock.settimeout(left)
        try:
            data = self._conn.sock.recv(_RECV)
        except TimeoutError:
            raise DeadlineExceeded() from None
        except OSError as e:
            raise WireError(f"connection lost mid-response: {e}") from None
        return data

    def body(self) -> Iterator[bytes]:
        """The body's bytes as they arrive (transfer coding removed); the connection is reused after."""
        try:
            if self.status in (204, 304) or 100 <= self.status < 200:
                pass  # no body, whatever the headers say (RFC 9112 6.3)
            elif "chunked" in self.headers.get("transfer-encoding", "").lower():
                yield from self._chunked()
            elif "content-length" in self.headers:
                length = self.headers["content-length"].strip()
                if not _digits(length) or len(length) > 18:  # int() takes "-5", "+5", " 5", "1_0", "²"
                    raise WireError(f"bad Content-Length {length[:40]!r}")
                yield from self._sized(int(length))
            else:
                yield from self._until_close()
            self._done = True
        finally:
            self.close()

    def finish(self, body: Iterator[bytes], grace_s: float = 0.05) -> None:
        """Drain what is left of BODY (the chunked terminator after an SSE [DONE]) so the
        connection can be reused; a server that does not end the body within GRACE_S
        just loses the connection (the answer is already complete)."""
        self._deadline = min(self._deadline, time.perf_counter() + grace_s)
        try:
            for _ in body:
                pass
        except (DeadlineExceeded, WireError):
            self.close()

    def read(self, limit: int = MAX_BODY_BYTES) -> bytes:
        """The whole body (BodyTooLarge past LIMIT bytes: an error body or a whole answer is bounded too)."""
        out = bytearray()
        for part in self.body():
            out += part
            if len(out) > limit:
                raise BodyTooLarge(f"the body is over {limit} bytes")
        return bytes(out)

    def close(self) -> None:
        """Give the connection back (whole response read, keep-alive) or close it."""
        if self._released:
            return
        self._released = True
        keep = self._done and self.headers.get("connection", "").lower() != "close"
        self._pool.release(self._conn, keep)

    def _sized(self, n: int) -> Iterator[bytes]:
        c = self._conn
        while True:
            if c.buf:
                take, c.buf = c.buf[:n], c.buf[n:]
                n -= len(take)
                yield take
            if n <= 0:
                return
            data = self._recv()
            if not data:
                raise WireError("the server closed the connection before the whole body")
            c.buf = data

    def _until_close(self) -> Iterator[bytes]:
        c = self._conn
        if c.buf:
            yield c.buf
            c.buf = b""
        while data := self._recv():
            yield data
        self.headers["connection"] = "close"

    def _chunked(self) -> Iterator[bytes]:
        c = self._conn
        buf = c.buf
        while True:
            out: list[bytes] = []
            pos = 0
            while True:  # every whole chunk in the buffer
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                size = chunk_size(buf[pos:eol])
                if size == 0:
                    end = buf.find(b"\r\n\r\n", eol)  # optional trailers, then an empty line
                    if end < 0 and buf[eol:eol + 4] != b"\r\n\r\n":
                        break
                    if out:
                        yield b"".join(out)
                    c.buf = buf[end + 4:]
                    return
                if len(buf) < eol + 2 + size + 2:
                    break
                out.append(buf[eol + 2:eol + 2 + size])
                pos = eol + 2 + size + 2
            buf = buf[pos:]
            if out:
                yield b"".join(out)
            if b"\r\n" not in buf and len(buf) > MAX_HEAD_BYTES:
                raise WireError("a chunk-size line over 64 kB")
            data = self._recv()
            if not data:
                raise WireError("the server closed the connection mid-stream")
            buf += data


class Pool:
    """Keep-alive connections to one server (thread-safe)."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None):
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        self.prefix = u.path.rstrip("/")
        host_header = u.netloc.rsplit("@", 1)[-1]
        headers = dict(headers or {})
        if u.username is not None:
            # Credentials in the URL travel as HTTP Basic auth, as httpx and curl send them; they are
            # this arm's own, so they take the place of a session-wide --api-key.
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            creds = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(creds).decode()
        self._head = f"Host: {host_header}\r\nUser-Agent: observatory\r\nAccept: */*\r\n" + "".join(
            f"{k}: {v}\r\n" for k, v in headers.items())
        self._idle: list[Conn] = []
        self._lock = threading.Lock()
        self._ssl = ssl.create_default_context() if self.tls else None

    def connect(self, deadline: float) -> Conn:
        """A new connection (TCP_NODELAY; TLS for https), opened within DEADLINE and 10 s."""
        left = deadline - time.perf_counter()
        if left <= 0:
            raise DeadlineExceeded()
        try:
            sock = socket.create_connection((self.host, self.port), timeout=min(left, 10.0))
        except TimeoutError:
            raise DeadlineExceeded() if time.perf_counter() >= deadline else WireError(
                f"ConnectTimeout: no connection to {self.host}:{self.port} within 10 s", "timeout") from None
        except OSError as e:
            raise WireError(f"cannot connect to {self.host}:{self.port}: {e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl is not None:
            sock = self._ssl.wrap_socket(sock, server_hostname=self.host)
        return Conn(sock)

    def take_idle(self) -> Conn | None:
        """An idle kept-alive connection, taken out of the pool (None if there is none)."""
        with self._lock:
            return self._idle.pop() if self._idle else None

    def release(self, conn: Conn, keep: bool) -> None:
        """Back to the pool, or closed."""
        if keep:
            with self._lock:
                self._idle.append(conn)
        else:
            try:
                conn.sock.close()
            except OSError:
                pass

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            self.release(c, False)

    def request_bytes(self, path: str, body: bytes | None, method: str = "POST") -> bytes:
        """The whole HTTP/1.1 request: a JSON BODY (None: no body) to PATH (this server's prefix, host, auth)."""
        if body is None:
            return f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._head}\r\n".encode("latin-1")
        return (f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._head}Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body

    def post(self, path: str, body: bytes, deadline: float) -> WireResponse:
        """Send one POST of a JSON BODY and read the response head (a stale kept-alive connection is retried once)."""
        return self.request("POST", path, body, deadline)

    def request(self, method: str, path: str, body: bytes | None, deadline: float) -> WireResponse:
        """Send one request and read the response head, all within DEADLINE (perf_counter seconds)."""
        request = self.request_bytes(path, body, method)
        conn = self.take_idle()
        for attempt in (0, 1):
            fresh = conn is None
            if conn is None:
                conn = self.connect(deadline)
            resp = WireResponse(0, {}, self, conn, deadline)
            try:
                conn.sock.settimeout(max(deadline - time.perf_counter(), 0.001))
                conn.sock.sendall(request)
                head = self._head_of(resp)
            except (WireError, OSError) as e:
                self.release(conn, False)
                if fresh or attempt:
                    raise e if isinstance(e, WireError) else WireError(str(e)) from None
                conn = None  # the server had closed the idle connection: once more on a new one
                continue
            except DeadlineExceeded:
                self.release(conn, False)
                raise
            status, headers = head
            resp.status, resp.headers = status, headers
            return resp
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _head_of(resp: WireResponse) -> tuple[int, dict[str, str]]:
        c = resp._conn
        while b"\r\n\r\n" not in c.buf:
            if len(c.buf) > MAX_HEAD_BYTES:
                raise WireError(f"a response head over {MAX_HEAD_BYTES} bytes")
            data = resp._recv()
            if not data:
                raise WireError("the server closed the connection before answering")
            c.buf += data
        head, c.buf = c.buf.split(b"\r\n\r\n", 1)
        return parse_head(head)


def _digits(text: str) -> bool:
    """TEXT is ASCII digits only (str.isdigit takes "²", which int() refuses)."""
    return bool(text) and all("0" <= c <= "9" for c in text)


def chunk_size(line: bytes) -> int:
    """The size on a chunk-size LINE (hex digits, then optional extensions); WireError if it is not one.

    Only hex digits: int(x, 16) also takes "-5", "+5", " 5" and "1_0", and a
    negative size moved the reader backwards over its own buffer forever
    without reading (issue 32).
    """
    digits = line.split(b";", 1)[0].rstrip(b" \t")
    if not digits or len(digits) > 16 or not all(b in _HEX for b in digits):
        raise WireError(f"bad chunk size {line[:40]!r}")
    size = int(digits, 16)
    if size > MAX_CHUNK_BYTES:
        raise WireError(f"a chunk of {size} bytes (over {MAX_CHUNK_BYTES})")
    return size


def parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    """(status, lower-cased headers) of a response head (without its blank line); WireError if not HTTP.

    An HTTP/1.0 answer without ``Connection: keep-alive`` gets ``connection: close``.
    """
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not _digits(parts[1]):
        raise WireError(f"not an HTTP response: {lines[0][:80]!r}")
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    if parts[0] == "HTTP/1.0" and headers.get("connection", "").lower() != "keep-alive":
        headers["connection"] = "close"
    return int(parts[1]), headers
