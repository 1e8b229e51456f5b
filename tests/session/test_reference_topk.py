"""Issue 20 item 5: non-streamed top logprobs are stored only where the stream cannot be the diff's reference."""

from __future__ import annotations

from observatory.client.answer import Response
from observatory.session.measure import stream_is_reference


def _resp(ids: list[int], usage: int | None, top: bool = True, error: str | None = None) -> Response:
    return Response(text="x", token_ids=ids, top_logprobs=[[[i, -0.1]] for i in ids] if top else [],
                    usage={} if usage is None else {"completion_tokens": usage}, error=error)


def test_a_complete_stream_is_the_reference() -> None:
    assert stream_is_reference(_resp([1, 2, 3], 3))
    assert stream_is_reference(_resp([1, 2, 3], None))


def test_an_incomplete_stream_keeps_the_nonstreamed_top_k() -> None:
    """Negative controls: withheld ids (CUDA hermes parser), no logprobs, a failed request."""
    assert not stream_is_reference(_resp([1, 2], 5))
    assert not stream_is_reference(_resp([1, 2, 3], 3, top=False))
    assert not stream_is_reference(_resp([], 0))
    assert not stream_is_reference(_resp([1], 1, error="boom"))
