"""The client hangs up on purpose (channel cancel, issue 49 item 2): `EngineClient.run_cut`, and its own request id.

Wire-level behaviour on the SSE stub (a stream cut at a chosen chunk, a server that never answers); the real
engine's side of it (the abort, the answers after it) is the cancel channel's, on the CPU engine.
"""

from __future__ import annotations

import time
from typing import Any

from observatory.client.send import EngineClient, tokens_in
from observatory.model.probes import Probe
from tests.support.sse_stub import SseStub, chunked, sse

CHAT = Probe("c", "x", messages=[{"role": "user", "content": "hi"}], max_tokens=8)


def _tokens(req: dict[str, Any]) -> list[bytes]:
    """A role chunk, then five one-token chunks, then the end."""
    role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    toks = [{"choices": [{"index": 0, "delta": {"content": f" t{i}"}, "logprobs": {"content": [
        {"token": f"token_id:{10 + i}", "logprob": -0.5, "bytes": list(f" t{i}".encode()), "top_logprobs": []}]}}]}
        for i in range(5)]
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}
    return chunked([sse([role, *toks, end])])


def test_a_stream_is_cut_after_n_tokens() -> None:
    """The role chunk carries none: a cut after 2 tokens keeps two; the answer says it was cut on purpose."""
    with SseStub({"/v1/chat/completions": _tokens}) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run_cut(CHAT, tokens=2, request_id="mine-1")
        whole = client.run(CHAT, request_id="mine-2")
        client.close()
    assert r.error_kind == "cancelled" and (r.error or "").startswith("cancelled") and r.token_ids == [10, 11]
    assert whole.ok and whole.token_ids == [10, 11, 12, 13, 14]  # the same stream read to its end
    assert [body.get("request_id") for _, body in stub.posts] == ["mine-1", "mine-2"]


def test_an_answer_that_ends_before_the_cut_is_kept_as_it_is() -> None:
    """A cut after 9 tokens of a 5-token answer: nothing was cut, the answer is ok."""
    with SseStub({"/v1/chat/completions": _tokens}) as stub:
        client = EngineClient(stub.url, timeout=10)
        r = client.run_cut(CHAT, tokens=9)
        client.close()
    assert r.ok and r.token_ids == [10, 11, 12, 13, 14]


def test_a_whole_request_is_given_up_after_its_time() -> None:
    """A client timeout: the request hangs up WITHIN_S after sending (no answer yet), marked cancelled, never
    read as the engine's hang (error_kind timeout would make the runner mark the arm HUNG)."""
    with SseStub({"/v1/chat/completions": "silent"}) as stub:
        client = EngineClient(stub.url, timeout=10)
        client.model()
        t0 = time.monotonic()
        r = client.run_cut(CHAT, within_s=0.3)
        took = time.monotonic() - t0
        client.close()
    assert r.error_kind == "cancelled" and 0.25 < took < 1.5, (r.error, took)


def test_tokens_in_counts_logprob_entries_and_no_roles() -> None:
    """How many tokens a streamed event carried: its logprob entries (a merged chunk carries several)."""
    assert tokens_in({"choices": [{"delta": {"role": "assistant"}}]}) == 0
    assert tokens_in({"usage": {"completion_tokens": 3}, "choices": []}) == 0
    assert tokens_in({"choices": [{"text": "a"}]}) == 1
    assert tokens_in({"choices": [{"delta": {"content": "a"}}]}) == 1
    assert tokens_in({"choices": [{"delta": {}, "logprobs": {"content": [{"token": "token_id:2"}] * 3}}]}) == 3
    assert tokens_in({"choices": [{"text": "ab", "logprobs": {"tokens": ["token_id:1", "token_id:2"]}}]}) == 2
