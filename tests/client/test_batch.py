"""Timed batches (observatory.client.batch): the same answers as run_timed, the set-up outside the clock.

Wire-level behaviour comes from the hand-made stub in tests/support/sse_stub.py (its
answers are the shapes vLLM sends); the throughput this buys is measured by
benchmarks/client_throughput.py, not asserted here.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from observatory.client.answer import Response
from observatory.client.batch import timed_batch
from observatory.client.send import EngineClient
from tests.support.sse_answers import CHAT, TEXT, chat_stream, completion_stream, error_event, five_hundred, not_json
from tests.support.sse_stub import SseStub, chunked, sse, whole


def _comparable(r: Response) -> tuple[Any, ...]:
    return (r.ok, r.text, r.content, r.reasoning, r.finish_reason, r.usage, len(r.chunks),
            [n for _, n in r.chunks], r.token_ids, r.tool_calls, r.error_kind)


def test_batch_answers_as_run_timed_does_in_the_order_sent() -> None:
    """Issue 20 item 1: a timed batch reads each answer as `EngineClient.run_timed` does, chat and text alike."""
    with SseStub({"/v1/chat/completions": chat_stream, "/v1/completions": completion_stream}) as stub:
        client = EngineClient(stub.url, timeout=10)
        one = [client.run_timed(CHAT), client.run_timed(TEXT)]
        work = [CHAT, TEXT, CHAT, TEXT, TEXT, CHAT]
        got, wall = timed_batch(client, work, 3)
        client.close()
    assert all(r.ok for r in one), [r.error for r in one]
    assert [_comparable(r) for r in got] == [_comparable(one[0] if p is CHAT else one[1]) for p in work]
    assert all(r.ttft_ms is not None and r.duration_ms is not None and r.ttft_ms <= r.duration_ms for r in got)
    timed = [req for path, req in stub.posts[2:]]
    assert len(timed) == 6 and all("logprobs" not in req and req["stream"] is True for req in timed)
    assert 0 < wall < 10


def test_batch_keeps_concurrency_requests_in_flight_on_connections_opened_before_the_clock() -> None:
    """Issue 20 item 1: 64 threads started and connected inside the timed window (about 30-100 ms a batch);
    the batch opens its connections first, keeps CONCURRENCY in flight, and leaves them in the keep-alive pool."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def slow(req: dict[str, Any]) -> list[bytes]:
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.1)
        with lock:
            state["now"] -= 1
        return chat_stream(req)

    with SseStub({"/v1/chat/completions": slow}) as stub:
        client = EngineClient(stub.url, timeout=10)
        client.model()
        before = stub.connections
        got, wall = timed_batch(client, [CHAT] * 12, 4)
        opened = stub.connections - before
        again, _ = timed_batch(client, [CHAT] * 4, 4)
        reopened = stub.connections - before - opened
        idle = len(client._wire._idle)
        client.close()
    assert all(r.ok for r in got + again)
    assert state["most"] == 4 and opened == 4 and reopened == 0 and idle == 4
    assert 0.3 <= wall < 1.2  # three waves of 0.1 s, not twelve


@pytest.mark.parametrize(("script", "kind", "text"), [
    (five_hundred, "http", "HTTP 500"),
    (not_json, "malformed", "malformed response"),
    (error_event, "http", "engine dead"),
    (lambda req: chunked([sse([{"choices": [{"index": 0, "delta": {"content": "x"}}]}])]), "malformed",
     "without a finish_reason"),
], ids=["status-500", "not-json", "error-event", "no-finish"])
def test_batch_error_kinds_are_run_timed_s(script: Any, kind: str, text: str) -> None:
    """Issue 20 item 1: a failed request in a batch is stored as `run_timed` stores it; the others still run."""
    with SseStub({"/v1/chat/completions": script, "/v1/completions": completion_stream}) as stub:
        client = EngineClient(stub.url, timeout=5)
        single = client.run_timed(CHAT)
        got, _ = timed_batch(client, [CHAT, TEXT, CHAT], 2)
        client.close()
    assert not single.ok and single.error_kind == kind and text in (single.error or ""), single.error
    assert [(r.ok, r.error_kind, r.error) for r in got] == [(False, kind, single.error), (True, None, None),
                                                             (False, kind, single.error)]


@pytest.mark.parametrize("script", ["drip", "drip_head", "silent"], ids=["drips-body", "drips-head", "silent"])
def test_batch_request_timeout_is_a_deadline_for_each_whole_request(script: str) -> None:
    """Issue 19 item 3 in a batch: a dripping or silent server is cut off at --request-timeout, per request."""
    with SseStub({"/v1/chat/completions": script, "/v1/completions": completion_stream}) as stub:
        client = EngineClient(stub.url, timeout=1.0)
        client.model()
        t0 = time.monotonic()
        got, _ = timed_batch(client, [CHAT, CHAT, TEXT], 3)
        took = time.monotonic() - t0
        client.close()
    assert 0.9 < took < 1.8, took
    assert [r.error_kind for r in got] == ["timeout", "timeout", None]
    assert "Timeout" in (got[0].error or "") and got[2].ok


def test_batch_on_a_server_gone_stores_connect_errors() -> None:
    with SseStub({}) as stub:
        client = EngineClient(stub.url, timeout=5)
        client.model()
    got, _ = timed_batch(client, [CHAT, CHAT, CHAT], 2)
    client.close()
    assert [r.error_kind for r in got] == ["connect"] * 3 and all("cannot connect" in (r.error or "") for r in got)


def test_batch_retries_a_kept_alive_connection_the_server_closed() -> None:
    """A stale keep-alive connection (closed while idle) is retried once on a new one."""
    with SseStub({"/v1/chat/completions": chat_stream}) as stub:
        client = EngineClient(stub.url, timeout=5)
        assert client.run_timed(CHAT).ok
        stale = client._wire._idle[0]
        stale.sock.shutdown(2)  # as if the server had closed it: reads give b"" at once
        got, _ = timed_batch(client, [CHAT, CHAT], 1)
        client.close()
    assert [r.ok for r in got] == [True, True], [r.error for r in got]


def test_batch_reads_sized_and_closing_answers() -> None:
    """An SSE answer sent with Content-Length and Connection: close is read whole; the next request reconnects."""
    def closing(req: dict[str, Any]) -> list[bytes]:
        body = sse([{"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": "stop"}]},
                    {"choices": [], "usage": {"completion_tokens": 1}}])
        return [whole(body, ctype="text/event-stream")[0].replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)]

    with SseStub({"/v1/chat/completions": closing}) as stub:
        client = EngineClient(stub.url, timeout=5)
        client.model()
        got, _ = timed_batch(client, [CHAT] * 3, 1)
        client.close()
    assert [(r.ok, r.text, r.completion_tokens) for r in got] == [(True, "x", 1)] * 3, [r.error for r in got]
