"""Timed batches on one thread: N requests, CONCURRENCY in flight, every socket read by one select loop.

`ArmRun.throughput` used to send a timed batch from a pool of CONCURRENCY
threads, one blocking `EngineClient.run_timed` each. At 64 streams x 100
tok/s on a pacing stub that cost the throughput figure 3-9% (issue "A fast
instrument", benchmarks/README.md): starting the 64 threads took up to
100 ms inside the timed window, each thread opened its connection there, and
64 threads waking for every chunk passed the GIL around, so first tokens
were read 5-20 ms late. An asyncio loop did worse (its per-read machinery
doubled the client's CPU per chunk). Here one thread waits on every socket
with `selectors`, reads what arrived and parses it in place (`_Exchange`: the
response head, the chunked body, the SSE events); a connection sends its next
request as soon as its last answer is complete.

A request is what `EngineClient.run_timed` sends (the same body, headers and
deadline: ``--request-timeout`` bounds the whole request) and is read by the
same SSE and chat/completion readers into the same Response, with the same
error kinds.

The batch's wall time, the throughput figure's denominator, runs from just
before the first request is written to just after the last response is read:
`vllm bench serve`'s benchmark duration (ramp-up and tail included). The
connections are opened (or taken from the client's keep-alive pool) before
it starts, as with a warmed pool; one re-opened mid-batch is inside it.
"""

from __future__ import annotations

import selectors
import ssl
import time
from collections.abc import Iterator
from typing import Any

import msgspec

from observatory.client import (
    REQUEST_FAILURES,
    EngineClient,
    Response,
    finish,
    http_error,
    read_stream,
    request_body,
    timed_params,
)
from observatory.probes import Probe
from observatory.sse import EventReader
from observatory.wire import Conn, DeadlineExceeded, Pool, WireError, parse_head

_encode = msgspec.json.Encoder().encode
_RECV = 65536
_DRAIN_S = 0.05  # the chunked terminator after [DONE] must come this fast for the connection to be kept
_CHECK_S = 0.05  # how often the requests' deadlines are looked at
_ERROR_BODY = 64 * 1024  # what an error answer's body may hold (its start goes into the message)


def timed_batch(client: EngineClient, work: list[Probe], concurrency: int) -> tuple[list[Response], float]:
    """Send every probe of WORK as a timed pass, CONCURRENCY at a time: (responses in WORK's order, wall seconds).

    Never raises for a request's failure: it is that request's Response, as
    with `EngineClient.run_timed`. Connections still open at the end go back
    to the client's keep-alive pool.
    """
    pool = client._wire
    n = min(max(1, concurrency), len(work))
    conns: list[Conn | None] = []
    for _ in range(n):
        conn = pool.take_idle()
        if conn is None:
            try:
                conn = pool.connect(time.perf_counter() + client.timeout)
            except (WireError, DeadlineExceeded):
                conn = None  # the request opens it again and stores why it cannot
        conns.append(conn)
    return _Loop(client, pool).run(work, conns)


class _Exchange:
    """One request on one connection: the bytes to send, and its answer parsed as the bytes arrive (no I/O)."""

    def __init__(self, index: int, probe: Probe, t0: float, deadline: float):
        self.index = index
        self.probe = probe
        self.t0 = t0
        self.deadline = deadline
        self.out = Response()
        self.conn: Conn | None = None
        self.reused = False  # sent on a kept-alive connection (a stale one is retried once)
        self.retried = False
        self.got = False  # any byte of the answer arrived
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.buf = b""
        self.chunked = False
        self.left = -1  # bytes of a sized body still to come; -1: chunked or until close
        self.sse = EventReader()
        self.events: list[tuple[float, dict[str, Any]]] = []
        self.error_body = b""
        self.complete = False  # the body ended; the connection can carry the next request
        self.drain_until: float | None = None  # [DONE] seen: the terminator is awaited until then

    @property
    def chat(self) -> bool:
        """Whether this is a chat request."""
        return self.probe.kind == "chat"

    def feed(self, data: bytes, now: float) -> None:
        """Take bytes read from the socket at NOW; sets `complete` when the body ends."""
        self.got = True
        buf = self.buf + data
        if not self.head_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            self.status, self.headers = parse_head(buf[:end])
            self.head_done = True
            buf = buf[end + 4:]
            self.chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
            if not self.chunked and "content-length" in self.headers:
                self.left = int(self.headers["content-length"])
        if self.left >= 0:  # sized
            take, buf = buf[:self.left], buf[self.left:]
            self.left -= len(take)
            self._piece(take, now)
            self.complete = self.left == 0
            self.buf = b""
            return
        if not self.chunked:
            self._piece(buf, now)  # until close
            self.buf = b""
            return
        pos = 0
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                break
            try:
                size = int(buf[pos:eol].split(b";", 1)[0], 16)
            except ValueError:
                raise WireError(f"bad chunk size {buf[pos:eol][:40]!r}") from None
            if size == 0:
                if buf.find(b"\r\n\r\n", eol) < 0 and buf[eol:eol + 4] != b"\r\n\r\n":
                    break  # trailers not all here yet
                self.complete = True
                pos = len(buf)
                break
            if len(buf) < eol + 2 + size + 2:
                break
            self._piece(buf[eol + 2:eol + 2 + size], now)
            pos = eol + 2 + size + 2
        self.buf = buf[pos:]
        if self.sse.done and not self.complete and self.drain_until is None:
            self.drain_until = now + _DRAIN_S

    def _piece(self, piece: bytes, now: float) -> None:
        if not piece:
            return
        if self.status >= 400:
            if len(self.error_body) < _ERROR_BODY:
                self.error_body += piece
            return
        objs = self.sse.feed(piece)
        ms = (now - self.t0) * 1000.0
        self.events.extend((ms, obj) for obj in objs)

    def result(self, path: str) -> Response:
        """The Response of an answer that ended (or whose stream ended with [DONE])."""
        if self.status >= 400:
            raise http_error(self.status, path, self.error_body)
        read_stream(self.out, self.events, self.chat, timed=True)
        return self.out


class _Loop:
    """One batch: the select loop over its connections."""

    def __init__(self, client: EngineClient, pool: Pool):
        self.client = client
        self.pool = pool
        self.sel = selectors.DefaultSelector()
        self.active: dict[int, _Exchange] = {}  # fileno -> the exchange in flight on it
        self.next_check = 0.0  # when deadlines are looked at next (perf_counter)

    def run(self, work: list[Probe], conns: list[Conn | None]) -> tuple[list[Response], float]:
        """Send WORK over CONNS (None: open when needed) and read every answer: (responses, wall seconds)."""
        out: list[Response | None] = [None] * len(work)
        todo = iter(enumerate(work))
        t0 = time.perf_counter()
        try:
            for conn in conns:
                self._next(todo, conn, out)
            while self.active:
                self._step(todo, out)
        finally:
            wall = time.perf_counter() - t0
            for ex in list(self.active.values()):  # only after an unexpected error
                self._drop(ex)
            self.sel.close()
        return [r if r is not None else Response(error="not sent", error_kind="connect") for r in out], wall

    def _next(self, todo: Iterator[tuple[int, Probe]], conn: Conn | None, out: list[Response | None]) -> None:
        """Start the next request of TODO on CONN (None: a new connection); give CONN back when none is left."""
        while True:
            item = next(todo, None)
            if item is None:
                if conn is not None:
                    self.pool.release(conn, True)
                return
            i, probe = item
            t0 = time.perf_counter()
            ex = _Exchange(i, probe, t0, t0 + self.client.timeout)
            try:
                self._send(ex, conn)
                return
            except REQUEST_FAILURES as e:
                out[i] = finish(self.client.failed(e), t0)
                conn = None

    def _send(self, ex: _Exchange, conn: Conn | None) -> None:
        """Write EX's request on CONN (or a new connection) and start watching its socket."""
        client = self.client
        path = "/v1/chat/completions" if ex.chat else "/v1/completions"
        request = self.pool.request_bytes(path, _encode(
            request_body(ex.probe, client.served_model(), timed_params(ex.probe), True)))
        for attempt in (0, 1):
            fresh = conn is None
            if conn is None:
                conn = self.pool.connect(ex.deadline)
            try:
                conn.sock.settimeout(max(ex.deadline - time.perf_counter(), 0.001))
                conn.sock.sendall(request)
                conn.sock.setblocking(False)
                break
            except OSError as e:
                self.pool.release(conn, False)
                conn = None
                if fresh or attempt:
                    raise WireError(str(e)) from None
        assert conn is not None
        ex.conn, ex.reused = conn, not fresh
        if conn.buf:  # bytes read past an earlier answer: not an answer to this request
            conn.buf = b""
        self.active[conn.sock.fileno()] = ex
        self.sel.register(conn.sock, selectors.EVENT_READ, ex)

    def _step(self, todo: Iterator[tuple[int, Probe]], out: list[Response | None]) -> None:
        """Wait for bytes (at most until the next deadline check), read them, finish what ended.

        Deadlines are checked every _CHECK_S, not after every read: at 64
        streams the loop wakes thousands of times a second, and a scan of
        every request each time was a few percent of the client's CPU.
        """
        for key, _ in self.sel.select(max(self.next_check - time.perf_counter(), 0.0)):
            ex: _Exchange = key.data
            self._read(ex, todo, out)
            if ex.drain_until is not None:
                self.next_check = min(self.next_check, ex.drain_until)
        now = time.perf_counter()
        if now < self.next_check:
            return
        for ex in list(self.active.values()):
            if ex.drain_until is not None and now >= ex.drain_until:
                self._end(ex, todo, out, keep=False)  # a whole stream; the connection is not reused
            elif now >= ex.deadline:
                self._fail(ex, DeadlineExceeded(), todo, out)
        self.next_check = min([now + _CHECK_S] + [ex.drain_until or ex.deadline for ex in self.active.values()])

    def _read(self, ex: _Exchange, todo: Iterator[tuple[int, Probe]], out: list[Response | None]) -> None:
        assert ex.conn is not None
        sock = ex.conn.sock
        try:
            data = sock.recv(_RECV)
            while isinstance(sock, ssl.SSLSocket) and sock.pending():
                data += sock.recv(_RECV)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as e:
            self._lost(ex, f"connection lost mid-response: {e}", todo, out)
            return
        if not data:
            if ex.head_done and ex.left == -1 and not ex.chunked:
                self._end(ex, todo, out, keep=False)  # a body that ends with the connection
            else:
                self._lost(ex, "the server closed the connection mid-stream", todo, out)
            return
        try:
            ex.feed(data, time.perf_counter())
        except REQUEST_FAILURES as e:
            self._fail(ex, e, todo, out)
            return
        if ex.complete:
            keep = ex.headers.get("connection", "").lower() != "close"
            self._end(ex, todo, out, keep=keep)

    def _lost(self, ex: _Exchange, why: str, todo: Iterator[tuple[int, Probe]],
              out: list[Response | None]) -> None:
        """The connection failed: a stale kept-alive one is retried once on a new connection."""
        if ex.reused and not ex.got and not ex.retried:
            self._unwatch(ex, keep=False)
            ex.retried = True
            try:
                self._send(ex, None)
            except REQUEST_FAILURES as e:
                out[ex.index] = finish(self.client.failed(e), ex.t0)
                self._next(todo, None, out)
            return
        self._fail(ex, WireError(why), todo, out)

    def _end(self, ex: _Exchange, todo: Iterator[tuple[int, Probe]], out: list[Response | None],
             keep: bool) -> None:
        # The next request goes out before this answer's events are gathered into its Response:
        # when a wave of equal requests ends together, that work would otherwise delay every send.
        done = time.perf_counter()
        conn = self._unwatch(ex, keep)
        self._next(todo, conn, out)
        path = "/v1/chat/completions" if ex.chat else "/v1/completions"
        try:
            resp = ex.result(path)
        except REQUEST_FAILURES as e:
            resp = self.client.failed(e)
        out[ex.index] = finish(resp, ex.t0, done)

    def _fail(self, ex: _Exchange, e: BaseException, todo: Iterator[tuple[int, Probe]],
              out: list[Response | None]) -> None:
        out[ex.index] = finish(self.client.failed(e), ex.t0)
        self._unwatch(ex, keep=False)
        self._next(todo, None, out)

    def _unwatch(self, ex: _Exchange, keep: bool) -> Conn | None:
        """Stop watching EX's socket: the connection to reuse (blocking again), or None (closed)."""
        conn, ex.conn = ex.conn, None
        if conn is None:
            return None
        self.sel.unregister(conn.sock)
        del self.active[conn.sock.fileno()]
        if keep:
            conn.sock.setblocking(True)
            return conn
        self.pool.release(conn, False)
        return None

    def _drop(self, ex: _Exchange) -> None:
        self._unwatch(ex, keep=False)

