"""One answer of a serving engine, read into a `Response`: whole or streamed, chat or text completion.

The reading half of `observatory.client.send` (which builds and sends the
requests): the stored fields of a request's result, and how each engine's
answer fills them. Token ids come from the choice's logprobs entries
(vLLM's ``token_id:N`` tokens, or an integer ``id`` where an engine gives one) or,
on an engine whose logprobs carry no ids, by its adapter's own reader (``take_ids``
in `observatory.engines`, passed in as a `Take`). TTFT is the first streamed chunk that carries a choice (see
`_note_first`); ``chunks`` is the timeline of the chunks that carried tokens.

Every field is validated here, at the edge (issue 32 item 3): a usage count
that is not an integer in 0..MAX_COUNT, a finish_reason that is not one of
FINISH_REASONS, a logprob that is NaN, +inf or above 0 (-inf, probability
zero, is allowed) make the answer *malformed*: what was received is kept
(text, ids), the bad values are left out of the stored fields and named in
the error, and the result is not ok.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observatory.engines.adapter import ids_in_choices_hint
from observatory.model.errors import ObservatoryError
from observatory.model.logprobs import checked_logprob
from observatory.model.logprobs import shown as _shown
from observatory.model.safe_read import too_deep

if TYPE_CHECKING:
    from observatory.engines.metrics import SpecCounters


@dataclass
class Response:
    """What one request returned, parsed and timed."""

    text: str = ""
    content: str | None = None
    # the thinking a reasoning parser split off (vLLM ``reasoning_content`` / ``reasoning``)
    reasoning: str | None = None
    token_ids: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)
    top_logprobs: list[list[list[float]]] = field(default_factory=list)
    # per generated position, the logprob the engine gave the token it emitted (the logprobs entry's own
    # ``logprob``, completions' ``token_logprobs``); a correctness pass only (a timed pass asks for none)
    logprobs: list[float] = field(default_factory=list)
    # vLLM's ``stop_reason``: the stop string or stop token id that ended the answer (None: EOS, length,
    # or an engine that does not send it)
    stop_reason: str | int | None = None
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    ttft_ms: float | None = None
    duration_ms: float | None = None
    # [[ms since request start, tokens in the chunk or None when unknown (timed passes)], ...]
    chunks: list[list[Any]] = field(default_factory=list)
    error: str | None = None
    # one of ERROR_KINDS when error is set: timeout | connect | http | malformed
    error_kind: str | None = None
    # fields of the answer that were out of range (the answer is malformed: see `finish`)
    bad_fields: list[str] = field(default_factory=list)
    # the openai SDK's verdict on this answer (`observatory.client.openai_sdk`); None: not read by it (timed pass,
    # no answer)
    sdk: dict[str, Any] | None = None
    # the engine's own speculative counters for this request, from the answer itself (where its adapter,
    # `observatory.engines.adapter`, finds them); None: the answer carries none. A
    # correctness pass only (a timed pass keeps no answer objects)
    request_counters: SpecCounters | None = None

    @property
    def ok(self) -> bool:
        """Whether the request completed without a transport or server error."""
        return self.error is None

    @property
    def completion_tokens(self) -> int | None:
        """Tokens generated: the server's usage count, else the token ids received, else None (unknown)."""
        n = self.usage.get("completion_tokens") if isinstance(self.usage, dict) else None
        if isinstance(n, int) and not isinstance(n, bool):
            return n
        return len(self.token_ids) if self.token_ids else None


# The finish reasons an OpenAI-compatible server may give: OpenAI's, vLLM's ("abort", "error"), and every
# built-in engine's (all within these).
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call", "abort", "error"})
# The largest count stored: PostgreSQL's integer (SQLite's is 64-bit); no answer has more tokens.
MAX_COUNT = 2**31 - 1
_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
# how the error of an answer with a field out of range starts (observatory.judge.figures counts them)
MALFORMED = "malformed response: "


def is_count(value: Any) -> bool:
    """Whether VALUE is a storable count: an int (not a bool) in 0..MAX_COUNT."""
    return type(value) is int and 0 <= value <= MAX_COUNT


def checked_usage(out: Response, usage: Any) -> dict[str, Any]:
    """USAGE as stored: a dict whose counts are counts; anything else named in OUT.bad_fields and left out."""
    if not usage:
        return {}
    if not isinstance(usage, dict):
        out.bad_fields.append(f"usage = {_shown(usage)} is not an object")
        return {}
    kept = dict(usage)
    for key in _USAGE_COUNTS:
        if key in kept and kept[key] is not None and not is_count(kept[key]):
            out.bad_fields.append(f"usage.{key} = {_shown(kept.pop(key))} is not a count (an integer in "
                                  f"0..{MAX_COUNT})")
    for key in [k for k in kept if k not in _USAGE_COUNTS and not _in_range(kept[k])]:
        out.bad_fields.append(f"usage.{key} = {_shown(kept.pop(key))} is out of range")
    return kept


def _in_range(value: Any, depth: int = 0) -> bool:
    """Whether every number in VALUE (nested a few levels) is finite and every integer within +-MAX_COUNT."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_COUNT
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (dict, list)) and depth < 4:
        return all(_in_range(v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


# the longest stop_reason kept (a stop string the request gave: short; a server's megabytes are no stop string)
MAX_STOP_REASON_CHARS = 4096


def _check_stop_reason(out: Response) -> None:
    reason = out.stop_reason
    if reason is None or (type(reason) is int and 0 <= reason <= MAX_COUNT) or (
            isinstance(reason, str) and len(reason) <= MAX_STOP_REASON_CHARS):
        return
    out.bad_fields.append(f"stop_reason {_shown(reason)} is not a stop string or a token id")
    out.stop_reason = None


def _check_finish(out: Response) -> None:
    reason = out.finish_reason
    if reason is None:
        return
    if not isinstance(reason, str):
        out.bad_fields.append(f"finish_reason {_shown(reason)} is not a string")
        out.finish_reason = None
    elif reason not in FINISH_REASONS:
        out.bad_fields.append(f"finish_reason {_shown(reason)} is not one of {sorted(FINISH_REASONS)}")


# Reads one choice's token ids (with their texts and top-k) into a Response: (out, choice, chat) -> how many.
Take = Callable[[Response, Mapping[str, Any], bool], int]


# The largest token id taken: a vocabulary is far smaller, and ids are stored as 32-bit integers.
MAX_TOKEN_ID = 2**31 - 1


def ids_hint() -> str:
    """Which --engine reads an answer whose logprobs carry no ids (the engines whose adapters read them elsewhere)."""
    return ids_in_choices_hint()


def parse_token_id(token: str) -> int:
    """``token_id:123`` -> 123 (vLLM's return_tokens_as_token_ids form): ASCII digits, at most MAX_TOKEN_ID
    (str.isdigit takes "٣" and int() reads it; a 23-digit id was stored as received)."""
    if not isinstance(token, str):
        raise ObservatoryError(f"Expected a token like 'token_id:123' from the engine, got {_shown(token)}")
    prefix, sep, num = token.partition(":")
    if prefix == "token_id" and sep and num.isascii() and num.isdigit() and (len(num) > 10 or int(num) > MAX_TOKEN_ID):
        raise ObservatoryError(f"token id {_shown(num)} is out of range (0..{MAX_TOKEN_ID})")
    if prefix != "token_id" or not sep or not num.isascii() or not num.isdigit():
        raise ObservatoryError(
            f"Expected a token like 'token_id:123' from the engine, got {token!r}; "
            f"is this a vLLM server (return_tokens_as_token_ids)? {ids_hint()}"
        )
    return int(num)


def _bytes_text(b: list[int] | None, fallback: str) -> str:
    if b is None:
        return fallback
    return bytes(b).decode("utf-8", errors="replace")


# How deep a tool call may nest (function, arguments as a string: 3 levels in the API); deeper is no tool call,
# and nothing that nests hundreds deep may reach the store (its masking and JSON encoding recurse).
MAX_TOOL_CALL_DEPTH = 16


def _check_tool_calls(out: Response) -> None:
    calls = out.tool_calls
    if calls is None:
        return
    if not isinstance(calls, list) or too_deep(calls, MAX_TOOL_CALL_DEPTH):
        out.bad_fields.append(f"tool_calls nest over {MAX_TOOL_CALL_DEPTH} levels or are not a list")
        out.tool_calls = None
        return
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(call.get("id"), (str, type(None))) or not all(
                isinstance(fn.get(k), (str, type(None))) for k in ("name", "arguments")):
            out.bad_fields.append(f"tool call {_shown(call)} is not an object with a string id, name and arguments")
            out.tool_calls = None
            return


def finish(out: Response, t0: float) -> Response:
    """OUT with its duration since T0 (`time.perf_counter()`); an answer without a finish_reason is malformed.

    So is one with a field out of range (`bad_fields`): kept as received, not ok.
    """
    _check_finish(out)
    _check_tool_calls(out)
    _check_stop_reason(out)
    out.usage = checked_usage(out, out.usage)
    if out.error is None and out.bad_fields:
        out.error = MALFORMED + "; ".join(dict.fromkeys(out.bad_fields))
        out.error_kind = "malformed"
    if out.error is None and out.finish_reason is None:
        out.error = "malformed response: the server ended without a finish_reason"
        out.error_kind = "malformed"
    out.duration_ms = (time.perf_counter() - t0) * 1000.0
    return out


def read_stream(out: Response, stream: Iterable[tuple[float, dict[str, Any]]], chat: bool, timed: bool,
                take: Take | None = None) -> None:
    """Fill OUT from a streamed answer's (ms, event) pairs: chat or text completion, timed or correctness pass.

    One loop for both kinds; only what a chunk's choice carries is the kind's own (a chat delta's content,
    reasoning and tool calls by index; a completion's text), branched inline: the loop runs per streamed chunk,
    and its CPU is part of what a timed pass measures. TAKE reads each chunk's token ids (default
    `take_logprobs`: from its logprobs entries).
    """
    take = take or take_logprobs
    texts: list[str] = []  # the content's (chat) or the text's (completion) pieces
    reasoning: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for ms, obj in stream:
        if obj.get("usage"):
            out.usage = obj["usage"]
        choices = obj.get("choices")
        if not choices:
            continue
        choice = choices[0]
        _note_first(out, ms)
        if chat:
            carried = _take_delta(choice.get("delta") or {}, texts, reasoning, calls)
        else:
            text = choice.get("text") or ""
            texts.append(text)
            carried = bool(text)
        if timed:
            if carried:
                _note_chunk(out, ms, None)
        else:
            n = take(out, choice, chat)
            if n:
                _note_chunk(out, ms, n)
        if choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
            out.stop_reason = choice.get("stop_reason")
    if not chat:
        out.text = "".join(texts)
        out.content = out.text
        return
    out.content = "".join(texts) if texts or not calls else None
    out.text = out.content or ""
    out.reasoning = "".join(reasoning) or None
    if calls:
        out.tool_calls = [calls[i] for i in sorted(calls)]


def _take_delta(delta: Mapping[str, Any], content: list[str], reasoning: list[str],
                calls: dict[int, dict[str, Any]]) -> bool:
    """One chat chunk's delta into CONTENT, REASONING and CALLS (by index); whether it carried any of them."""
    carried = False
    if delta.get("content"):
        content.append(delta["content"])
        carried = True
    think = delta.get("reasoning_content") or delta.get("reasoning")
    if think:
        reasoning.append(think)
        carried = True
    for tc in delta.get("tool_calls") or ():
        carried = True
        slot = calls.setdefault(tc.get("index", 0),
                                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
        if tc.get("id"):
            slot["id"] = tc["id"]
        fn = tc.get("function") or {}
        slot["function"]["name"] += fn.get("name") or ""
        slot["function"]["arguments"] += fn.get("arguments") or ""
    return carried


def take_logprobs(out: Response, choice: Mapping[str, Any], chat: bool) -> int:
    """Token ids, texts and top-k from the choice's logprobs entries (every engine whose entries carry ids)."""
    return (_take_chat_logprobs if chat else _take_completion_logprobs)(out, choice.get("logprobs"))


def take_whole(out: Response, obj: Any, chat: bool, take: Take) -> None:
    """A non-streamed answer."""
    choice = obj["choices"][0]
    out.usage = obj.get("usage") or {}
    out.finish_reason = choice.get("finish_reason")
    out.stop_reason = choice.get("stop_reason")
    if chat:
        msg = choice.get("message") or {}
        out.content = msg.get("content")
        out.text = out.content or ""
        out.reasoning = msg.get("reasoning_content") or msg.get("reasoning") or None
        if msg.get("tool_calls"):
            out.tool_calls = list(msg["tool_calls"])
    else:
        out.text = choice.get("text") or ""
        out.content = out.text
    take(out, choice, chat)


def _note_chunk(out: Response, ms: float, n_tokens: int | None) -> None:
    """Time a streamed chunk that carried N_TOKENS (None: unknown)."""
    out.chunks.append([round(ms, 3), n_tokens])


def _note_first(out: Response, ms: float) -> None:
    """The TTFT: the first chunk that carries a choice, whatever its delta holds.

    Every built-in engine sends its first choice (the chat role,
    or the first text) when the engine hands back the request's first
    token; a token whose text is still empty (an incomplete UTF-8 sequence,
    a special token) sends no text chunk of its own, so timing the first
    *text* would count later steps as prefill (on the H200's dense model,
    26-34% more than `vllm bench serve`, which times the first choice too:
    benchmarks/README.md).
    """
    if out.ttft_ms is None:
        out.ttft_ms = ms


def item_token_id(item: dict[str, Any]) -> int:
    """A logprobs entry's token id: its integer ``id`` where the engine gives one (on every entry and
    top-logprob entry: see the adapters, `observatory.engines.adapter`), else vLLM's ``token_id:N``
    token."""
    tid = item.get("id")
    if type(tid) is int and 0 <= tid <= MAX_TOKEN_ID:
        return tid
    if tid is not None:
        raise ObservatoryError(f"Expected a token id in 0..{MAX_TOKEN_ID}, got id={_shown(tid)}")
    return parse_token_id(item["token"])


def _take_chat_logprobs(out: Response, logprobs: Any) -> int:
    items = (logprobs or {}).get("content") if isinstance(logprobs, dict) else None
    if not items:
        return 0
    for item in items:
        out.token_ids.append(item_token_id(item))
        out.token_texts.append(_bytes_text(item.get("bytes"), ""))
        if "logprob" in item:
            lp = checked_logprob(out, item["logprob"])
            if lp is not None:
                out.logprobs.append(lp)
        top = [(item_token_id(t), checked_logprob(out, t["logprob"])) for t in item.get("top_logprobs") or ()]
        out.top_logprobs.append([[t, lp] for t, lp in top if lp is not None])
    return len(items)


def _take_completion_logprobs(out: Response, logprobs: Any) -> int:
    if isinstance(logprobs, dict) and "content" in logprobs and "tokens" not in logprobs:
        # an engine whose /v1/completions answers logprobs in the chat form, with ids (see its adapter)
        return _take_chat_logprobs(out, logprobs)
    tokens = (logprobs or {}).get("tokens") if isinstance(logprobs, dict) else None
    if not tokens:
        return 0
    tops = logprobs.get("top_logprobs") or [None] * len(tokens)
    chosen = logprobs.get("token_logprobs")
    if isinstance(chosen, list) and len(chosen) == len(tokens):
        out.logprobs.extend(lp for lp in (checked_logprob(out, v) for v in chosen) if lp is not None)
    for tok, top in zip(tokens, tops):
        out.token_ids.append(parse_token_id(tok))
        checked = [(parse_token_id(k), checked_logprob(out, v)) for k, v in (top or {}).items()]
        pairs = sorted(((t, lp) for t, lp in checked if lp is not None), key=lambda p: -p[1])
        out.top_logprobs.append([[t, lp] for t, lp in pairs])
    return len(tokens)
