"""The formats a suite may come in, how a record's shape tells them apart, and each made into a request body.

`FORMATS` names them; `shape` says which one a record looks like (None: none
of them); `to_request` turns a record of a format into an OpenAI request body
(what `observatory.model.suites.requests.to_probe` reads) with a name hint
and a note when part of the record is not kept. The formats (docs/probes.md,
"Formats", gives the exact fields of each):

- openai: request bodies as a gateway logs them, bare or wrapped (``body``,
  ``request``, ``request_body``, ``payload``, ``json``), or OpenAI Batch
  API lines (``custom_id``, ``method``, ``url``, ``body``).
- sharegpt: ``conversations`` of ``{from, value}`` (human/user, gpt/assistant/
  chatgpt/bard/bing/model, system); the conversation up to its last human
  turn is the probe (the answer after it, as logged, is not sent).
- vllm-sharegpt: the same file as ``vllm bench serve --dataset-name sharegpt``
  reads it: the first turn alone, as a user message; entries with fewer than
  two turns skipped, as vLLM skips them.
- vllm-custom: ``vllm bench serve --dataset-name custom``: ``{"prompt": ...,
  "output_tokens": N}`` lines; the prompt is a user message (vLLM applies the
  chat template), ``output_tokens`` the max_tokens.
- spec-bench: ``vllm bench serve --dataset-name spec_bench`` (Spec-Bench's
  question.jsonl): ``{"question_id", "category", "turns": [...]}``, the first
  turn, as vLLM sends it.
- aiperf-single-turn, aiperf-multi-turn, aiperf-mooncake: AIPerf's
  ``--custom-dataset-type single_turn`` / ``multi_turn`` / ``mooncake_trace``
  files (``text``/``texts``, ``turns``, ``text_input``/``messages``/``payload``;
  ``output_length`` is max_tokens, ``extra`` merged into the body as AIPerf
  does; its random_pool files are single-turn records).
- toml: the documented suite (docs/probes.md).

Not read, being generators with no requests in them: vllm bench's random,
random-mm, sonnet, prefix_repetition and burstgpt (lengths, no text), AIPerf's
synthetic inputs and mooncake records with only ``input_length``/``hash_ids``.
Images, audio and video are not read (probes are text).
"""

from __future__ import annotations

from typing import Any

from observatory.model.suites.records import shown
from observatory.model.suites.requests import Drop

FORMATS: dict[str, str] = {
    "toml": "the documented probe-suite TOML (docs/probes.md)",
    "openai": "OpenAI chat/completions request bodies, one per line (bare, wrapped, or Batch API lines)",
    "sharegpt": "ShareGPT conversations (from/value turns), the conversation up to its last human turn",
    "vllm-sharegpt": "ShareGPT as vllm bench serve reads it: the first turn alone",
    "vllm-custom": "vllm bench serve's custom JSONL: a prompt field (and output_tokens) per line",
    "spec-bench": "vllm bench serve's spec_bench JSONL (Spec-Bench): the first of each record's turns",
    "aiperf-single-turn": "AIPerf single_turn (or random_pool) JSONL: text or texts per line",
    "aiperf-multi-turn": "AIPerf multi_turn JSONL: a session's turns per line",
    "aiperf-mooncake": "AIPerf mooncake_trace JSONL: text_input, messages or payload per line",
}
WRAPPERS = ("body", "request", "request_body", "payload", "json")
OPENAI_FIELDS = frozenset({"model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "stop",
                           "n", "stream", "logprobs", "seed", "echo", "suffix", "presence_penalty",
                           "frequency_penalty", "best_of", "logit_bias", "user", "min_tokens", "stream_options"})
_MOONCAKE = frozenset({"text_input", "input_length", "hash_ids", "message_mode"})
_AIPERF_TURN = frozenset({"text", "texts", "image", "images", "audio", "audios", "video", "videos"})
_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                   "chatgpt": "assistant", "bard": "assistant", "bing": "assistant", "model": "assistant",
                   "system": "system"}
NAME_KEYS = ("custom_id", "id", "request_id", "question_id", "session_id", "conversation_id")


def _is_request(v: Any) -> bool:
    return isinstance(v, dict) and ("messages" in v or "prompt" in v)


def shape(v: Any) -> str | None:
    """The format record V looks like (None: none of `FORMATS`)."""
    if not isinstance(v, dict):
        return None
    if "custom_id" in v and isinstance(v.get("body"), dict):
        return "openai"
    if isinstance(v.get("conversations"), list):
        return "sharegpt"
    turns = v.get("turns")
    if isinstance(turns, list) and turns:
        return "aiperf-multi-turn" if all(isinstance(t, dict) for t in turns) else \
            "spec-bench" if all(isinstance(t, str) for t in turns) else None
    if _MOONCAKE & set(v) or ("payload" in v and ("timestamp" in v or "session_id" in v or "delay" in v)) or \
            (isinstance(v.get("messages"), list) and "output_length" in v):
        return "aiperf-mooncake"
    if _AIPERF_TURN & set(v):
        return "aiperf-single-turn"
    if isinstance(v.get("messages"), list):
        return "openai"
    if "prompt" in v:
        return "openai" if OPENAI_FIELDS & set(v) else "vllm-custom"
    if any(_is_request(v.get(w)) for w in WRAPPERS):
        return "openai"
    return None


def name_hint(v: Any) -> str | None:
    """A record's own id (the first of `NAME_KEYS` it has, a string or a number), None without one."""
    if not isinstance(v, dict):
        return None
    for key in NAME_KEYS:
        value = v.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def to_request(fmt: str, v: Any) -> tuple[dict[str, Any], str | None, str | None]:
    """(the request body, the endpoint it was sent to when the record says, a note on what was not kept) of
    record V in format FMT; Drop when it has none."""
    if not isinstance(v, dict):
        raise Drop("malformed", f"a record must be a JSON object, not {type(v).__name__}")
    return _CONVERT[fmt](v)


def _openai(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    if "custom_id" in v and "body" in v:  # the Batch API
        if v.get("method", "POST") != "POST":
            raise Drop("unsupported", f"a Batch API line with method {shown(v.get('method'))!r}")
        batch_url = v.get("url")
        return _body(v["body"]), batch_url if isinstance(batch_url, str) else None, None
    url: str | None = None
    for _ in range(3):  # a wrapper inside a wrapper: {"request": {"body": {...}}}
        if _is_request(v):
            return v, url, None
        wrapper = next((w for w in WRAPPERS if isinstance(v.get(w), dict)), None)
        if wrapper is None:
            break
        url = next((v[k] for k in ("url", "path", "endpoint") if isinstance(v.get(k), str)), url)
        v = v[wrapper]
    if _is_request(v):
        return v, url, None
    raise Drop("malformed", f"no request body: no 'messages' or 'prompt' (bare or under {', '.join(WRAPPERS)})")


def _body(v: Any) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise Drop("malformed", "the request body is not a JSON object")
    return v


def _user(text: Any, what: str) -> dict[str, Any]:
    if not isinstance(text, str) or not text:
        raise Drop("malformed", f"{what} must be a non-empty string")
    return {"role": "user", "content": text}


def _list(v: dict[str, Any], key: str) -> list[Any]:
    value = v.get(key)
    if not isinstance(value, list) or not value:
        raise Drop("malformed", f"needs a non-empty list {key!r}")
    return value


def _sharegpt_turns(v: dict[str, Any]) -> list[dict[str, Any]]:
    turns = _list(v, "conversations")
    out = []
    if isinstance(v.get("system"), str) and v["system"]:
        out.append({"role": "system", "content": v["system"]})
    for i, t in enumerate(turns):
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            raise Drop("malformed", f"conversations[{i}] needs a string 'value'")
        role = _SHAREGPT_ROLES.get(str(t.get("from", "")).lower())
        if role is None:
            raise Drop("unsupported", f"conversations[{i}] is from {shown(t.get('from'))!r}: the roles read are "
                                      f"{', '.join(_SHAREGPT_ROLES)}")
        out.append({"role": role, "content": t["value"]})
    return out


def _sharegpt(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    messages = _sharegpt_turns(v)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is None:
        raise Drop("malformed", "no human turn to answer")
    dropped = len(messages) - last_user - 1
    note = f"the {dropped} turn(s) after the last human one (the logged answer) are not sent" if dropped > 1 else None
    return {"messages": messages[:last_user + 1]}, None, note


def _vllm_sharegpt(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    turns = _list(v, "conversations")
    if len(turns) < 2:
        raise Drop("unsupported", "fewer than two turns (vllm bench serve skips such entries too)")
    first = turns[0]
    return {"messages": [_user(first.get("value") if isinstance(first, dict) else None, "conversations[0].value")]}, \
        None, None


def _vllm_custom(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    body: dict[str, Any] = {"messages": [_user(v.get("prompt"), "'prompt'")]}
    if "output_tokens" in v:
        body["max_tokens"] = v["output_tokens"]
    return body, None, None


def _spec_bench(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    turns = _list(v, "turns")
    note = f"{_turns(2, len(turns))} not sent (vllm bench serve sends the first)" if len(turns) > 1 else None
    return {"messages": [_user(turns[0], "turns[0]")]}, None, note


def _aiperf_turn(t: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the message, the body fields) of one AIPerf turn."""
    media = sorted(k for k in _AIPERF_TURN - {"text", "texts"} if t.get(k))
    if media:
        raise Drop("unsupported", f"{where}{media[0]} content: probes are text")
    text = t.get("text")
    texts = t.get("texts")
    if text is not None and texts is not None:
        raise Drop("malformed", f"{where}text and texts together (AIPerf refuses them too)")
    if texts is not None:
        flat = [x for item in texts for x in (item.get("contents", []) if isinstance(item, dict) else [item])] \
            if isinstance(texts, list) else None
        if not flat or len(flat) != 1:
            raise Drop("unsupported", f"{where}texts holds {len(flat or [])} texts (AIPerf batches them): give one")
        text = flat[0]
    role = t.get("role") or "user"
    if role not in ("user", "assistant", "system"):
        raise Drop("malformed", f"{where}role {shown(role)!r}")
    message = {"role": role, "content": text} if isinstance(text, str) and text else None
    if message is None:
        raise Drop("malformed", f"{where}needs a non-empty text")
    fields: dict[str, Any] = {}
    if t.get("output_length") is not None:
        fields["max_tokens"] = t["output_length"]
    extra = t.get("extra")
    if extra is not None:
        if not isinstance(extra, dict):
            raise Drop("malformed", f"{where}extra must be an object")
        fields.update(extra)
    return message, fields


def _aiperf_single(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    message, fields = _aiperf_turn(v, "")
    return {**fields, "messages": [message]}, None, None


def _aiperf_multi(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    """The turns up to the first user turn whose answer the file does not hold (AIPerf threads the server's live
    answers in; a probe's history is fixed), ending on a user turn."""
    turns = _list(v, "turns")
    kept: list[dict[str, Any]] = []
    fields: dict[str, Any] = {}
    cut = None
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise Drop("malformed", f"turns[{i}] is not an object")
        message, turn_fields = _aiperf_turn(t, f"turns[{i}].")
        if message["role"] == "user" and kept and kept[-1]["role"] == "user":
            cut = i  # this turn follows a live answer the file does not hold
            break
        kept.append(message)
        if message["role"] == "user":
            fields = turn_fields
    while kept and kept[-1]["role"] != "user":
        kept.pop()
    if not kept:
        raise Drop("malformed", "no user turn")
    note = (f"{_turns(cut + 1, len(turns))} not kept: AIPerf sends them after the server's live answers, which the "
            f"file does not hold; the probe is the conversation up to turn {cut}") if cut is not None else None
    return {**fields, "messages": kept}, None, note


def _turns(first: int, last: int) -> str:
    return f"turn {first} is" if first == last else f"turns {first}-{last} are"


def _aiperf_mooncake(v: dict[str, Any]) -> tuple[dict[str, Any], str | None, str | None]:
    if v.get("message_mode") == "delta":
        raise Drop("unsupported", "delta messages: AIPerf threads the live answers in; a probe's history is fixed")
    modes = [k for k in ("input_length", "text_input", "messages", "payload") if v.get(k) is not None]
    if len(modes) != 1:
        raise Drop("malformed", "needs exactly one of input_length, text_input, messages or payload "
                                f"(has {', '.join(modes) or 'none'})")
    body: dict[str, Any]
    if modes == ["input_length"]:
        raise Drop("unsupported", "synthetic (input_length and hash_ids: a length, no text)")
    if modes == ["payload"]:
        return _body(v["payload"]), None, None
    if modes == ["text_input"]:
        body = {"messages": [_user(v["text_input"], "text_input")]}
    else:
        body = {"messages": v["messages"]}
        if v.get("tools") is not None:
            body["tools"] = v["tools"]
    if v.get("output_length") is not None:
        body["max_tokens"] = v["output_length"]
    if isinstance(v.get("extra"), dict):
        body = {**v["extra"], **body}
    return body, None, None


_CONVERT = {
    "openai": _openai, "sharegpt": _sharegpt, "vllm-sharegpt": _vllm_sharegpt, "vllm-custom": _vllm_custom,
    "spec-bench": _spec_bench, "aiperf-single-turn": _aiperf_single, "aiperf-multi-turn": _aiperf_multi,
    "aiperf-mooncake": _aiperf_mooncake,
}
