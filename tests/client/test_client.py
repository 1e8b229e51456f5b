"""The client: lean SSE reading, timed passes, the request deadline, error kinds, reasoning, detokenising.

Wire-level faults come from the hand-made stub in tests/support/sse_stub.py; the
request shapes are what vLLM sends (chat chunks with logprobs, usage chunk).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.client.answer import Response, read_stream
from observatory.client.send import EngineClient, timed_params
from observatory.client.sse import events
from tests.support.sse_answers import (
    CHAT,
    TEXT,
    USAGE,
    chat_chunk,
    chat_stream,
    completion_stream,
    error_event,
    five_hundred,
    logprobs_at,
    not_json,
)
from tests.support.sse_stub import SseStub, whole


def test_timed_pass_asks_what_vllm_bench_asks_and_counts_with_usage() -> None:
    """Issue "A fast instrument" item 1: no logprobs, include_usage; no token ids, chunks [ms, None]."""
    with SseStub({"/v1/chat/completions": chat_stream}) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run_timed(CHAT)
        client.close()
    path, req = stub.posts[-1]
    assert path == "/v1/chat/completions" and req["stream"] is True
    assert req["stream_options"] == {"include_usage": True}
    assert not {"logprobs", "top_logprobs", "return_tokens_as_token_ids"} & set(req)
    assert req["temperature"] == 0.0 and req["max_tokens"] == 8 and req["seed"] == 0
    assert r.ok and r.token_ids == [] and r.top_logprobs == []
    assert r.usage["completion_tokens"] == 2 and r.completion_tokens == 2
    assert r.chunks and all(n is None for _, n in r.chunks)
    assert r.ttft_ms == pytest.approx(r.chunks[0][0], abs=0.001) and r.text == "hi there" and r.finish_reason == "stop"
    assert timed_params(CHAT) == {k: req[k] for k in timed_params(CHAT)}


def test_correctness_pass_reads_ids_logprobs_and_reasoning_from_a_split_stream() -> None:
    """Issue 13 item 14: streamed reasoning (reasoning_content, and newer vLLM's reasoning) is kept."""
    with SseStub({"/v1/chat/completions": chat_stream}) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run(CHAT)
        client.close()
    req = stub.posts[-1][1]
    assert req["logprobs"] is True and req["top_logprobs"] == 10 and req["return_tokens_as_token_ids"] is True
    assert req["stream_options"] == {"include_usage": True}
    assert r.ok and r.token_ids == [7, 9] and r.token_texts == ["hi", "hi"]
    assert r.top_logprobs[1] == [[9, 0.0], [10, -0.5], [11, -1.0]]
    assert r.reasoning == "think more" and r.content == "hi there"
    assert [n for _, n in r.chunks] == [1, 1] and r.completion_tokens == 2


def test_non_streamed_reasoning_and_tool_calls() -> None:
    """Issue 13 item 14: message.reasoning_content of a non-streamed answer lands in Response.reasoning."""
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    body = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning_content": "plan", "tool_calls": [call]},
        "logprobs": logprobs_at(3)}], "usage": {"completion_tokens": 1}}
    import json

    with SseStub({"/v1/chat/completions": lambda req: whole(json.dumps(body).encode())}) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run(CHAT, stream=False)
        client.close()
    assert r.ok and r.reasoning == "plan" and r.tool_calls == [call] and r.token_ids == [3]


@pytest.mark.parametrize("script", ["drip", "drip_head", "silent"], ids=["drips-body", "drips-head", "silent"])
def test_request_timeout_is_a_deadline_for_the_whole_request(script: str) -> None:
    """Issue 19 item 3: a server dripping a byte at a time kept a request alive 25 s past a 5 s timeout."""
    with SseStub({"/v1/chat/completions": script}) as stub:
        client = EngineClient(stub.url, timeout=1.0)
        client.model()
        t0 = time.monotonic()
        r = client.run(CHAT)
        took = time.monotonic() - t0
        client.close()
    assert 0.9 < took < 1.6, took
    assert r.error_kind == "timeout" and "Timeout" in (r.error or "")


@pytest.mark.parametrize(("script", "kind", "text"), [
    (five_hundred, "http", "HTTP 500"),
    (not_json, "malformed", "malformed response"),
    (error_event, "http", "engine dead"),
], ids=["status-500", "not-json", "error-event"])
def test_error_kinds(script: Any, kind: str, text: str) -> None:
    """Issue 19 item 3: Response.error_kind says what failed (timeout, connect, http, malformed)."""
    with SseStub({"/v1/chat/completions": script}) as stub:
        client = EngineClient(stub.url, timeout=5)
        r = client.run(CHAT)
        client.close()
    assert not r.ok and r.error_kind == kind and text in (r.error or ""), r.error


def test_refused_connection_is_a_connect_error() -> None:
    with SseStub({}) as stub:
        client = EngineClient(stub.url, timeout=5)
        client.model()
    stub_url = stub.url  # the stub is gone: nothing listens there now
    r = client.run(CHAT)
    client.close()
    assert stub_url and r.error_kind == "connect" and not r.ok


def test_keep_alive_connections_are_reused() -> None:
    with SseStub({"/v1/chat/completions": chat_stream}) as stub:
        client = EngineClient(stub.url, timeout=10)
        rs = [client.run(CHAT) for _ in range(3)] + [client.run_timed(CHAT)]
        idle = list(client._wire._idle)
        alive = [c.sock.fileno() >= 0 for c in idle]
        client.close()
    assert all(r.ok for r in rs) and alive == [True]


def _detok(req: dict[str, Any]) -> list[bytes]:
    import json

    text = "".join("\x1f" if t == 31 else chr(ord("A") + t - 40) for t in req["tokens"])
    return whole(json.dumps({"prompt": text}).encode())


def test_completion_tokens_are_detokenised_in_one_request() -> None:
    """Issue 19: one /detokenize request per generated token (100 s instead of 17 s); now one per output."""
    import json

    scripts: dict[str, Any] = {"/v1/completions": completion_stream, "/detokenize": _detok,
                               "/tokenize": lambda req: whole(json.dumps({"tokens": [31]}).encode())}
    with SseStub(scripts) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run(TEXT)
        r2 = client.run(TEXT)
        client.close()
    assert r.ok and r.token_ids == [40, 41, 42] and r.token_texts == ["A", "B", "C"] == r2.token_texts
    paths = [p for p, _ in stub.posts]
    assert paths.count("/detokenize") == 2 and paths.count("/tokenize") == 1


def test_a_separator_after_a_space_token_is_found() -> None:
    """SentencePiece tokenizers put a space token before the separator: its last token is tried alone."""
    import json

    scripts: dict[str, Any] = {"/v1/completions": completion_stream, "/detokenize": _detok,
                               "/tokenize": lambda req: whole(json.dumps({"tokens": [40, 31]}).encode())}
    with SseStub(scripts) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run(TEXT)
        client.close()
    assert r.token_texts == ["A", "B", "C"]
    assert [p for p, _ in stub.posts].count("/detokenize") == 2  # the separator check, then the output


def test_detokenise_falls_back_to_one_request_per_token_without_a_separator() -> None:
    import json

    scripts: dict[str, Any] = {"/v1/completions": completion_stream, "/detokenize": _detok,
                               "/tokenize": lambda req: whole(json.dumps({"tokens": [1, 2]}).encode())}
    with SseStub(scripts) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run(TEXT)
        client.close()
    assert r.token_texts == ["A", "B", "C"]
    assert [p for p, _ in stub.posts].count("/detokenize") == 1 + 3  # the separator check, then each token


def test_sse_events_split_anywhere_with_comments_and_multiline_data() -> None:
    body = b": ping\r\n\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:{\"b\": 2}\n\ndata: [DONE]\n\ndata: {\"c\": 3}\n\n"
    for size in (1, 2, 3, 7, len(body)):
        pieces = [body[i:i + size] for i in range(0, len(body), size)]
        assert [o for _, o in events(pieces, time.perf_counter())] == [{"a": 1}, {"b": 2}], size


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_request_timeout_must_be_a_positive_number(value: str) -> None:
    """Issue 19 item 3: --request-timeout 0, negative or NaN is a usage error (exit 3)."""
    from observatory.cli import cli

    for cmd in ("compare", "gate"):
        res = CliRunner().invoke(cli, [cmd, "--request-timeout", value, "--arms", "base=http://127.0.0.1:9"])
        assert res.exit_code == 3, (cmd, res.output)
        assert "--request-timeout" in res.output and "positive" in res.output


def test_timed_pass_keeps_the_probes_own_sampling() -> None:
    """A timed pass dropped all of extra_body, so a probe with ignore_eos (or min_tokens, stop_token_ids)
    stopped at EOS in its timed pass and measured another generation than its correctness pass; only the
    logprobs and the id flags are left out."""
    from dataclasses import replace

    probe = replace(CHAT, sampling={"ignore_eos": True, "min_tokens": 4})
    params = timed_params(probe)
    assert params["extra_body"] == {"ignore_eos": True, "min_tokens": 4}
    assert not {"logprobs", "top_logprobs"} & set(params)
    assert "extra_body" not in timed_params(CHAT)  # nothing but the id flag was there


@pytest.mark.parametrize("timed", [True, False])
def test_ttft_is_the_first_choice_even_before_any_text(timed: bool) -> None:
    """vLLM sends the role chunk with the first token; a token whose text is still empty sends nothing more.

    On the H200's dense model the first tokens of some prompts were bytes of
    an unfinished UTF-8 character: timing the first text put TTFT two to four
    steps late (26-34% above `vllm bench serve`, which times the first choice).
    """
    events_ = [(40.0, chat_chunk({"role": "assistant", "content": ""})),
               (95.0, chat_chunk({"content": "hi"}, logprobs_at(7))),
               (100.0, chat_chunk({"content": "!"}, logprobs_at(8), "stop")), (100.5, USAGE)]
    out = Response()
    read_stream(out, events_, chat=True, timed=timed)
    assert out.ttft_ms == 40.0 and out.text == "hi!"
    assert [ms for ms, _ in out.chunks] == [95.0, 100.0]  # the timeline holds the chunks that carried tokens
    text = [(12.0, {"choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": None}]}),
            (30.0, {"choices": [{"index": 0, "text": "a", "logprobs": None, "finish_reason": "length"}]})]
    out = Response()
    read_stream(out, text, chat=False, timed=True)
    assert out.ttft_ms == 12.0 and out.text == "a"
