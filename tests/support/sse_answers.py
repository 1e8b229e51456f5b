"""Answers the SSE stub (support/sse_stub.py) serves for the client's tests: vLLM's stream shapes and its errors."""

from __future__ import annotations

from typing import Any

from observatory.model.probes import Probe
from tests.support.sse_stub import chunked, sse, whole

CHAT = Probe(name="p", category="prose_en", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
TEXT = Probe(name="t", category="prose_en", prompt="Once", max_tokens=3)


def logprobs_at(t: int) -> dict[str, Any]:
    tops = [{"token": f"token_id:{t + j}", "logprob": -0.5 * j, "bytes": [97]} for j in range(3)]
    return {"content": [{"token": f"token_id:{t}", "logprob": 0.0, "bytes": [104, 105], "top_logprobs": tops}]}


def chat_chunk(delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}


USAGE = {"id": "c", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}


def chat_stream(req: dict[str, Any]) -> list[bytes]:
    """Two content tokens, the second split over two writes; reasoning first; usage last."""
    lp = req.get("logprobs")
    body = sse([
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"reasoning_content": "think "}),
        chat_chunk({"reasoning": "more"}),
        chat_chunk({"content": "hi"}, logprobs_at(7) if lp else None),
        chat_chunk({"content": " there"}, logprobs_at(9) if lp else None),
        chat_chunk({}, None, "stop"),
        USAGE,
    ])
    cut = body.index(b" there") + 3
    return chunked([body[:cut], body[cut:]])


def five_hundred(req: dict[str, Any]) -> list[bytes]:
    return whole(b'{"error": "boom"}', 500)


def not_json(req: dict[str, Any]) -> list[bytes]:
    return chunked([b'data: {"choices": [\n\n'])


def error_event(req: dict[str, Any]) -> list[bytes]:
    return chunked([sse([{"error": {"message": "engine dead", "code": 500}}])])


def completion_stream(req: dict[str, Any]) -> list[bytes]:
    objs = [{"choices": [{"index": 0, "text": t, "finish_reason": None,
                          "logprobs": {"tokens": [f"token_id:{i}"], "top_logprobs": [{f"token_id:{i}": -0.1}]}}]}
            for i, t in ((40, "a"), (41, "b"), (42, "c"))]
    objs.append({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    return chunked([sse(objs, crlf=True)])
