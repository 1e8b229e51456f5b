"""SGLang's token ids: asked for with ``"return_token_ids": true``, read from ``choices[].token_ids``.

SGLang's OpenAI logprobs carry token texts, never ids (`observatory.engines.spec_counters`), so
a correctness pass on SGLang asks for the ids themselves. What SGLang returns,
checked against sgl-project/sglang at commit 004c82e07d876f6e4a0ad6e15325706b0f478f1a,
``python/sglang/srt/entrypoints/openai/``:

- ``protocol.py``: ``CompletionRequest`` and ``ChatCompletionRequest`` take
  ``return_token_ids: bool = False``. ``CompletionResponseChoice``,
  ``CompletionResponseStreamChoice`` and ``ChatCompletionResponseChoice`` carry
  ``token_ids: Optional[List[int]]``, left out of the JSON when None;
  ``ChatCompletionResponseStreamChoice`` has no such field. The request models are
  plain pydantic models (unknown fields ignored), so a server that predates the
  flag, or ignores it, answers without ``token_ids``: that answer is malformed here
  (`missing_ids`), never judged with no ids.
- ``serving_completions.py``: whole, ``token_ids=ret_item["output_ids"]`` (every
  generated id); streamed, each choice chunk carries the ids generated since the
  previous chunk (``output_ids[n_prev_token_id:]``, or the engine's own delta with
  ``--incremental-streaming-output``), possibly ``[]``, on every chunk.
- ``serving_chat.py``: whole, ``token_ids = ret_item["output_ids"]``; streamed,
  refused: ``_convert_to_internal_request`` raises "return_token_ids is not
  supported with streaming on /v1/chat/completions". A correctness pass of a chat
  probe therefore goes whole (`observatory.client.send`): no TTFT and no chunk timeline for it.
- Logprobs (``utils.py`` ``to_openai_style_logprobs``, ``serving_chat.py``
  ``_process_logprobs_tokens``): chat entries carry ``token``, ``bytes``
  (``token.encode("utf-8")``), ``logprob`` and ``top_logprobs`` with text and bytes
  only; completions carry ``tokens`` (texts), ``token_logprobs`` and
  ``top_logprobs`` as dicts keyed by text. The texts give each id its text
  (`token_texts`) where they count as many as the ids; otherwise the texts are
  left unknown (``[]``), never detokenised by guess.

Top-k alternatives have no ids, so the base arm's margin at a divergence is not
measurable: every position's top-k is stored empty, which the token diff reports
as "margin unknown", never as a number. The chosen token's own logprob is not
kept: alone in a position's top-k it would read as a margin lower bound of 0 nats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from observatory.model.errors import ObservatoryError

if TYPE_CHECKING:
    from observatory.client.answer import Response

FLAG = "return_token_ids"
VLLM_FLAG = "return_tokens_as_token_ids"


def sglang_params(params: dict[str, Any]) -> dict[str, Any]:
    """PARAMS as sent to SGLang: ``return_token_ids`` in place of vLLM's ``return_tokens_as_token_ids``."""
    extra = dict(params.get("extra_body") or {})
    if VLLM_FLAG not in extra:
        return params
    del extra[VLLM_FLAG]
    extra[FLAG] = True
    return {**params, "extra_body": extra}


def missing_ids() -> ObservatoryError:
    """The error for an SGLang answer whose choice has no ``token_ids``."""
    return ObservatoryError(
        f"SGLang answered without choices[].token_ids although the request set \"{FLAG}\": true: "
        f"the server ignores {FLAG} (an SGLang from before it?); upgrade the server, or check that "
        "--engine sglang names what serves this URL")


def take_ids(out: Response, choice: Mapping[str, Any], chat: bool) -> int:
    """Append one SGLang choice's ids (a whole answer, or one completion chunk) with their texts; how many."""
    if "token_ids" not in choice:
        raise missing_ids()
    ids = choice["token_ids"]
    if not isinstance(ids, list) or not all(type(i) is int and i >= 0 for i in ids):
        raise ObservatoryError(f"SGLang choices[].token_ids must be a list of non-negative integers, "
                               f"got {str(ids)[:80]}")
    texts = _texts(choice.get("logprobs"), chat)
    out.token_ids.extend(ids)
    out.top_logprobs.extend([] for _ in ids)  # alternatives have no ids: margins not measurable
    if texts is not None and len(texts) == len(ids):
        out.token_texts.extend(texts)  # a chunk whose texts do not count as its ids adds none: all unknown
    return len(ids)


def _texts(logprobs: Any, chat: bool) -> list[str] | None:
    """The per-token texts of one choice's logprobs (None when there are none)."""
    if not isinstance(logprobs, Mapping):
        return None
    if chat:
        items = logprobs.get("content")
        if not isinstance(items, list):
            return None
        return [_item_text(item) for item in items]
    tokens = logprobs.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return None
    return list(tokens)


def _item_text(item: Any) -> str:
    """A chat logprobs entry's text: its bytes decoded, else its token."""
    if not isinstance(item, Mapping):
        raise ObservatoryError(f"SGLang logprobs.content entries must be objects, got {str(item)[:80]}")
    b = item.get("bytes")
    if isinstance(b, list) and all(type(x) is int and 0 <= x < 256 for x in b):
        return bytes(b).decode("utf-8", errors="replace")
    return str(item.get("token", ""))
