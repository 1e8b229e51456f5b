"""SGLang's token ids: from ``choices[].token_ids`` (``"return_token_ids": true``) or, on SGLang
releases without that flag, from ``choices[].meta_info`` (``"return_meta_info": true``).

SGLang's OpenAI logprobs carry token texts, never ids (`observatory.engines.sglang`), so
a correctness pass on SGLang asks for the ids themselves, both ways at once (a server ignores
the request field it does not know: its request models are plain pydantic models).

Newer SGLang (checked against sgl-project/sglang at commit
004c82e07d876f6e4a0ad6e15325706b0f478f1a, ``python/sglang/srt/entrypoints/openai/``):

- ``protocol.py``: ``CompletionRequest`` and ``ChatCompletionRequest`` take
  ``return_token_ids: bool = False``. ``CompletionResponseChoice``,
  ``CompletionResponseStreamChoice`` and ``ChatCompletionResponseChoice`` carry
  ``token_ids: Optional[List[int]]``, left out of the JSON when None;
  ``ChatCompletionResponseStreamChoice`` has no such field.
- ``serving_completions.py``: whole, ``token_ids=ret_item["output_ids"]`` (every
  generated id); streamed, each choice chunk carries the ids generated since the
  previous chunk (``output_ids[n_prev_token_id:]``, or the engine's own delta with
  ``--incremental-streaming-output``), possibly ``[]``, on every chunk.
- ``serving_chat.py``: whole, ``token_ids = ret_item["output_ids"]``; streamed,
  refused: ``_convert_to_internal_request`` raises "return_token_ids is not
  supported with streaming on /v1/chat/completions". A correctness pass of a chat
  probe therefore goes whole (`observatory.client.send`, as the adapter's
  ``streams_chat_ids`` says): no TTFT and no chunk timeline for it.

SGLang 0.5.14 (the release the H200 bundle serves, examples/gpu/sglang/README.md; read
from its wheel and from its answers, examples/h200-engines/sglang-0.5.14/):

- no ``return_token_ids`` at all: its answers carry no ``token_ids``.
- a whole chat completion with ``"return_meta_info": true`` carries the engine's own
  ``choices[].meta_info`` (``serving_chat.py``: ``ret_item["meta_info"] if
  request.return_meta_info``): with ``logprobs`` asked, ``output_token_logprobs`` is one
  ``[logprob, token_id, text]`` per generated token and ``output_top_logprobs`` one list of
  such triples per position, so the ids *and* the top-k alternatives' ids are there
  (margins measurable), with the per-request speculative counters beside them. A streamed
  chat completion refuses the flag ("return_meta_info is not supported with streaming").
- ``/v1/completions`` has no ``return_meta_info``: a completion probe's answer has no ids and
  is malformed here (`missing_ids`), never judged with no ids.

- Logprobs (``utils.py`` ``to_openai_style_logprobs``, ``serving_chat.py``
  ``_process_logprobs_tokens``): chat entries carry ``token``, ``bytes``
  (``token.encode("utf-8")``), ``logprob`` and ``top_logprobs`` with text and bytes
  only; completions carry ``tokens`` (texts), ``token_logprobs`` and
  ``top_logprobs`` as dicts keyed by text. The texts give each id its text
  (`token_texts`) where they count as many as the ids; otherwise the texts are
  left unknown (``[]``), never detokenised by guess.

Read from ``token_ids``, the top-k alternatives have no ids, so the base arm's margin at a
divergence is not measurable: every position's top-k is stored empty, which the token diff
reports as "margin unknown", never as a number. The chosen token's own logprob is not kept
there: alone in a position's top-k it would read as a margin lower bound of 0 nats. Read
from ``meta_info``, each position's top-k is the engine's, ids and logprobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from observatory.model.errors import NotReported, ObservatoryError
from observatory.model.logprobs import checked_logprob


class Response(Protocol):
    """What of an answer being read (`observatory.client.answer.Response`) the ids fill."""

    token_ids: list[int]
    token_texts: list[str]
    top_logprobs: list[list[list[float]]]
    logprobs: list[float]
    bad_fields: list[str]

FLAG = "return_token_ids"
META_FLAG = "return_meta_info"  # SGLang 0.5.14's way to the ids of a whole chat completion
VLLM_FLAG = "return_tokens_as_token_ids"


def sglang_params(params: dict[str, Any], chat: bool = False) -> dict[str, Any]:
    """PARAMS as sent to SGLang: ``return_token_ids`` in place of vLLM's ``return_tokens_as_token_ids``,
    and for a CHAT completion (sent whole on SGLang) ``return_meta_info`` too."""
    extra = dict(params.get("extra_body") or {})
    if VLLM_FLAG not in extra:
        return params
    del extra[VLLM_FLAG]
    extra[FLAG] = True
    if chat:
        extra[META_FLAG] = True
    return {**params, "extra_body": extra}


def missing_ids() -> NotReported:
    """The error for an SGLang answer whose choice has no ``token_ids``."""
    return NotReported(
        f"SGLang answered without choices[].token_ids (asked with \"{FLAG}\": true) and without "
        f"choices[].meta_info.output_token_logprobs (asked with \"{META_FLAG}\" on a whole chat completion): "
        "this server reports no token ids for this request (SGLang 0.5.14's /v1/completions has neither), "
        "or --engine sglang does not name what serves this URL")


def take_ids(out: Response, choice: Mapping[str, Any], chat: bool) -> int:
    """Append one SGLang choice's ids (a whole answer, or one completion chunk) with their texts; how many."""
    if "token_ids" not in choice:
        meta = choice.get("meta_info")
        if not isinstance(meta, Mapping) or meta.get("output_token_logprobs") is None:
            raise missing_ids()
        n = _take_meta(out, meta)
        texts = _texts(choice.get("logprobs"), chat)
        if texts is not None and len(texts) == n:  # each id's text from the bytes of its OpenAI entry
            out.token_texts.extend(texts)
        return n
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


def _triple(entry: Any, where: str) -> tuple[Any, int, Any]:
    """One meta_info logprob entry, ``[logprob, token_id, text or null]``."""
    if not isinstance(entry, list) or len(entry) != 3 or type(entry[1]) is not int or entry[1] < 0:
        raise ObservatoryError(f"SGLang meta_info.{where} entries must be [logprob, token_id, text], "
                               f"got {str(entry)[:80]}")
    return entry[0], entry[1], entry[2]


def _take_meta(out: Response, meta: Mapping[str, Any]) -> int:
    """The ids, logprobs and top-k (with ids) of a whole answer from SGLang's meta_info."""
    chosen = meta["output_token_logprobs"]
    if not isinstance(chosen, list):
        raise ObservatoryError(f"SGLang meta_info.output_token_logprobs must be a list, got {str(chosen)[:80]}")
    tops = meta.get("output_top_logprobs")
    if tops is not None and (not isinstance(tops, list) or len(tops) != len(chosen)):
        raise ObservatoryError(f"SGLang meta_info.output_top_logprobs must hold one list per token "
                               f"({len(chosen)}), got {str(tops)[:80]}")
    for i, entry in enumerate(chosen):
        lp, token, _text = _triple(entry, "output_token_logprobs")
        out.token_ids.append(token)
        value = checked_logprob(out, lp)
        if value is not None:
            out.logprobs.append(value)
        top: list[list[float]] = []
        for alt in (tops[i] if tops is not None else None) or ():
            alp, atok, _ = _triple(alt, "output_top_logprobs")
            checked = checked_logprob(out, alp)
            if checked is not None:
                top.append([atok, checked])
        out.top_logprobs.append(sorted(top, key=lambda p: -p[1]))
    return len(chosen)
