"""The official openai SDK as a conformance judge of one answer (issue 28 item 7).

Real applications read these servers through the ``openai`` package, so each
correctness-pass answer (whole or streamed; never a timed pass) is read a
second time, by the SDK's own code, right after the lean reader
(`observatory.client.answer`) has read it and its duration is stamped:

- **Types.** A whole answer is validated as ``openai.types.chat.ChatCompletion``
  or ``openai.types.Completion``; each streamed event as
  ``ChatCompletionChunk`` or ``Completion`` (what ``/v1/completions`` streams
  are typed as in the SDK: ``Stream[Completion]``), with pydantic's
  ``model_validate``: exactly what the SDK does with
  ``OpenAI(_strict_response_validation=True)`` (``_base_client._process_response_data``
  -> ``_models.validate_type`` -> ``model_validate``). One exception, named in
  `_SDK_TYPE_GAP`: a ``/v1/completions`` chunk before the last with
  ``finish_reason: null``. The SDK declares ``CompletionChoice.finish_reason``
  required (``Literal["stop", "length", "content_filter"]``), yet OpenAI's own
  API streams null there until the last chunk: that is the SDK's type, not the
  server, and is not counted.
- **Accumulation.** A chat stream is accumulated by the SDK's stream helper,
  ``openai.lib.streaming.chat.ChatCompletionStreamState`` (content, tool-call
  deltas by their ``index``, finish reason; its ``current_completion_snapshot``:
  ``get_final_completion`` adds only the structured-output parse, which raises on
  every ``finish_reason: "length"``), fed each chunk as the SDK's default
  (non-strict) client builds it (``_models.construct_type``) and filtered as
  ``ChatCompletionStream.__stream__`` filters them (only ``object ==
  "chat.completion.chunk"``): what ``client.chat.completions.stream(...)``
  gives an application. The chunks go to the helper without their logprobs
  (validated above, never compared): the helper's logprobs bookkeeping was
  half its cost per token (measured: docs/channels.md). The SDK has no helper for ``/v1/completions`` streams:
  there the accumulated text is the SDK-built chunks' ``choices[0].text``
  joined, and the finish reason the last non-null one (what the SDK's
  documentation loop does).

The verdict is compact (`judge_whole`, `judge_stream`): the SDK's version,
its error (a validation or accumulation error, as the SDK raised it, bounded),
and ``differs``: only the fields (``content``, ``tool_calls``, ``finish_reason``)
where the SDK's reading is not the lean reader's. A stored answer therefore
carries the SDK's whole reading at a few dozen bytes; the channel ``sdk``
(`observatory.channels.sdk`) judges it.

The SDK costs 4-5x the lean reader's CPU per token (README), so it reads the
answer once the lean reader is done and never runs in a timed pass.
"""

from __future__ import annotations

from typing import Any

# The fields of an answer both readers read, compared one by one.
FIELDS = ("content", "tool_calls", "finish_reason")
# An SDK error as stored: at most this many characters (pydantic quotes the offending input).
MAX_ERROR_CHARS = 600
# Validation errors the SDK's types raise on a conformant answer (see the module docstring).
_SDK_TYPE_GAP = "a /v1/completions chunk before the last with finish_reason null (the SDK's type requires it)"


def _sdk() -> Any:
    """The SDK's modules, imported on first use (about 2 s: never at CLI start-up)."""
    import openai
    from openai import _models
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types import Completion
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    return openai, _models, ChatCompletionStreamState, Completion, ChatCompletion, ChatCompletionChunk


def version() -> str:
    """The installed openai SDK's version."""
    import openai

    return str(openai.__version__)


def _error(e: BaseException, where: str, skip_gap: bool = False) -> str:
    """The SDK's error E as stored: one line, bounded; a pydantic error as its entries (location: message,
    the offending input shortened), `_SDK_TYPE_GAP` entries left out where SKIP_GAP."""
    errs = e.errors() if hasattr(e, "errors") and callable(e.errors) else None
    if errs:
        shown = [f"{'.'.join(str(x) for x in err.get('loc', ()))}: {err.get('msg')} "
                 f"(input {_short(err.get('input'))})" for err in errs if not (skip_gap and _is_gap(err))]
        text = f"{where}: {type(e).__name__} for {getattr(e, 'title', '?')}: {'; '.join(shown)}"
    else:
        text = f"{where}: {type(e).__name__}: {e}"
    text = " ".join(text.split())
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "..."


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def _is_gap(err: Any) -> bool:
    return tuple(err.get("loc", ()))[-1:] == ("finish_reason",) and err.get("input") is None


def calls_of(raw: Any) -> list[dict[str, Any]] | None:
    """Tool calls as compared: [{"id", "type", "name", "arguments"}, ...], None for none."""
    if not raw:
        return None
    out = []
    for c in raw:
        c = c if isinstance(c, dict) else {}
        fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else {}
        out.append({"id": c.get("id"), "type": c.get("type"), "name": fn.get("name"),
                    "arguments": fn.get("arguments")})
    return out


def _reading(content: Any, calls: Any, finish: Any) -> dict[str, Any]:
    # an empty content and none are one reading (vLLM sends "" with the role, or no content at all)
    return {"content": content or None, "tool_calls": calls_of(calls), "finish_reason": finish}


def _verdict(sdk: dict[str, Any] | None, lean: dict[str, Any], error: str | None,
             events: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"sdk": version(), "error": error}
    if events is not None:
        out["events"] = events
    if sdk is not None:
        out["differs"] = {k: sdk[k] for k in FIELDS if sdk[k] != lean[k]}
    return out


def lean_reading(content: str | None, text: str, tool_calls: Any, finish_reason: str | None,
                 chat: bool) -> dict[str, Any]:
    """The lean reader's reading in the compared form (completions: the text is the content)."""
    return _reading(content if chat else text, tool_calls, finish_reason)


def judge_whole(obj: Any, chat: bool, lean: dict[str, Any]) -> dict[str, Any]:
    """The SDK's verdict on a whole answer OBJ (decoded JSON) against the lean reader's LEAN reading."""
    _, _, _, completion, chat_completion, _ = _sdk()
    try:
        parsed = (chat_completion if chat else completion).model_validate(obj)
    except Exception as e:  # the SDK's rejection, whatever pydantic raised
        return _verdict(None, lean, _error(e, "the whole answer"))
    if not parsed.choices:
        return _verdict(_reading(None, None, None), lean, None)
    choice = parsed.choices[0]
    if chat:
        msg = choice.message
        calls = [c.model_dump() for c in msg.tool_calls] if msg.tool_calls else None
        return _verdict(_reading(msg.content, calls, choice.finish_reason), lean, None)
    return _verdict(_reading(choice.text, None, choice.finish_reason), lean, None)


def _gap(e: Any, last: bool, chat: bool) -> bool:
    """Whether a validation error is only `_SDK_TYPE_GAP`."""
    if chat or last or not hasattr(e, "errors"):
        return False
    errs = e.errors()
    return bool(errs) and all(_is_gap(err) for err in errs)


def judge_stream(objs: list[dict[str, Any]], chat: bool, lean: dict[str, Any]) -> dict[str, Any]:
    """The SDK's verdict on a stream's decoded events OBJS against the lean reader's LEAN reading."""
    _, models, stream_state, completion, _, chunk_type = _sdk()
    kind = chunk_type if chat else completion
    error: str | None = None
    for i, obj in enumerate(objs):
        try:
            kind.model_validate(obj)
        except Exception as e:
            if _gap(e, i == len(objs) - 1, chat):
                continue
            error = _error(e, f"streamed event {i + 1} of {len(objs)}", skip_gap=not chat and i < len(objs) - 1)
            break
    try:
        reading = _accumulate_chat(objs, models, stream_state, chunk_type) if chat else \
            _accumulate_completion(objs, models, completion)
    except Exception as e:  # the SDK's helper raised (a tool-call delta without an index, ...)
        return _verdict(None, lean, error or _error(e, "the SDK's stream accumulation"), len(objs))
    return _verdict(reading, lean, error, len(objs))


def _accumulate_chat(objs: list[dict[str, Any]], models: Any, stream_state: Any, chunk_type: Any) -> dict[str, Any]:
    state = stream_state()
    fed = 0
    for obj in objs:
        chunk = models.construct_type(type_=chunk_type, value=_without_logprobs(obj))
        if getattr(chunk, "object", None) != "chat.completion.chunk":
            continue  # ChatCompletionStream.__stream__ drops such events (_is_valid_chat_completion_chunk_weak)
        state.handle_chunk(chunk)
        fed += 1
    if not fed:
        return _reading(None, None, None)
    # the accumulated snapshot: get_final_completion() adds only the structured-output parse, and raises
    # LengthFinishReasonError on every finish_reason "length" (openai/lib/_parsing/_completions.py)
    final = state.current_completion_snapshot
    if not final.choices:
        return _reading(None, None, None)
    choice = final.choices[0]
    calls = [c.model_dump() for c in choice.message.tool_calls] if choice.message.tool_calls else None
    return _reading(choice.message.content, calls, choice.finish_reason)


def _without_logprobs(obj: dict[str, Any]) -> Any:
    """OBJ with its choices' logprobs left out: validated already, never compared, and half the helper's cost."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not any(isinstance(c, dict) and "logprobs" in c for c in choices):
        return obj
    return {**obj, "choices": [{k: v for k, v in c.items() if k != "logprobs"} if isinstance(c, dict) else c
                               for c in choices]}


def _accumulate_completion(objs: list[dict[str, Any]], models: Any, completion: Any) -> dict[str, Any]:
    parts: list[str] = []
    finish = None
    seen = False
    for obj in objs:
        chunk = models.construct_type(type_=completion, value=obj)
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            seen = True
            parts.append(choice.text or "")
            if choice.finish_reason:
                finish = choice.finish_reason
    return _reading("".join(parts) if seen else None, None, finish)
