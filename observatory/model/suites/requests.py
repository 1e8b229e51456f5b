"""One OpenAI request body (chat or completions, as a gateway logs it) made into a `Probe`, or why not.

Every field of the body has one fate (docs/probes.md, "Requests from a log"):

- the prompt: ``messages`` (text, text parts, assistant tool calls, tool
  results) or ``prompt``, with ``tools`` and ``tool_choice``: the probe's;
- ``PARAMS`` (stop, penalties, response_format, logit_bias, ...): sent over
  the greedy defaults, and kept in ``original`` too;
- ``SAMPLING_FIELDS`` (temperature, top_p, top_k, seed, n, logprobs, stream,
  max_tokens as logged, ...): kept in ``original``, never sent: the
  correctness pass decodes greedily, and a replay that samples reads them;
- ``IGNORED`` (model, user, metadata, ...): dropped, they do not change the
  output;
- anything else (functions, audio, images, a Responses API ``input``, an
  unknown key): the record is dropped, naming the field, never sent without
  it.

``null`` is absent, as in the OpenAI API. The probe's ``max_tokens`` is the
logged one (``max_completion_tokens`` first) capped at the importer's cap
(`DEFAULT_MAX_TOKENS` when the request has none). Every string is masked
(`observatory.model.redact.redact_traffic`) and then checked: a NUL, a lone
surrogate or a control character other than tab, newline and carriage
return (terminal escapes) drops the record. The probe is last checked with
the suite's own JSON Schema, so whatever loads from a log could have been
written in a suite file.
"""

from __future__ import annotations

import re
from typing import Any

from observatory.model.probe_schema import MAX_TOKENS, MESSAGE_ROLES, PARAMS, SAMPLING_FIELDS, probe_schema
from observatory.model.probes import DEFAULT_GATES, Probe
from observatory.model.redact import redact_traffic
from observatory.model.schema_check import first_problem, validator
from observatory.model.suites.records import shown

DEFAULT_MAX_TOKENS = 256
IGNORED = frozenset({"model", "user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier",
                     "request_id", "priority", "cache_salt", "kv_transfer_params", "return_tokens_as_token_ids",
                     "return_token_ids", "vllm_xargs"})
_PROMPT_KEYS = ("messages", "prompt", "tools", "tool_choice")
_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content"})
# Control characters (terminal escapes among them), NUL and lone surrogates: never prompt text.
_HOSTILE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_LETTERS = re.compile(r"[^\W\d_]")
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_CODE = re.compile(r"```|\bdef \w+\(|\bclass \w+[:(]|\bfunction\s*\w*\(|#include\b|\bimport \w+|;\s*$", re.M)


class Drop(Exception):
    """A record that cannot be a probe: KIND (records.DROP_KINDS) and WHY (one line, shown as it is)."""

    def __init__(self, kind: str, why: str):
        super().__init__(why)
        self.kind = kind
        self.why = why


_probe_check: Any = None


def _check(probe: dict[str, Any]) -> str | None:
    global _probe_check
    if _probe_check is None:
        _probe_check = validator(probe_schema())
    problem = first_problem(_probe_check, probe, (), lambda at, extra, allowed: f"unknown key {extra[0]!r}")
    return None if problem is None else problem.message


def to_probe(body: Any, name: str, max_tokens: int = DEFAULT_MAX_TOKENS, endpoint: str | None = None) -> Probe:
    """The probe BODY asks for, named NAME (already made safe); Drop when it cannot be one."""
    if not isinstance(body, dict):
        raise Drop("malformed", f"a request body must be a JSON object, not {type(body).__name__}")
    body = {k: v for k, v in body.items() if v is not None}
    extra = body.pop("extra_body", None)
    if isinstance(extra, dict):  # the openai SDK's extra_body, logged before the SDK merged it
        body.update({k: v for k, v in extra.items() if v is not None})
    if endpoint is not None and not endpoint.rstrip("/").endswith(("/chat/completions", "/completions")):
        raise Drop("unsupported", f"a {shown(endpoint)} request: only chat and completions generate text here")
    if "input" in body and "messages" not in body and "prompt" not in body:
        raise Drop("unsupported", "a Responses API request ('input'): only chat and completions are read")
    chat = "messages" in body
    if chat == ("prompt" in body):
        raise Drop("malformed", "needs exactly one of 'messages' (chat) or 'prompt' (completions)")
    if endpoint is not None and chat != endpoint.rstrip("/").endswith("/chat/completions"):
        raise Drop("malformed", f"a {'chat' if chat else 'completions'} body sent to {shown(endpoint)}")
    original: dict[str, Any] = {}
    params: dict[str, Any] = {}
    for key, value in body.items():
        if key in _PROMPT_KEYS or key in IGNORED:
            continue
        if key in PARAMS:
            params[key] = original[key] = value
        elif key in SAMPLING_FIELDS:
            original[key] = value
        else:
            raise Drop("unsupported", f"unsupported field {shown(key)!r}: the request is not sent without it")
    probe: dict[str, Any] = {"name": name, "max_tokens": _max_tokens(original, max_tokens)}
    if chat:
        probe["messages"] = [_message(m, i) for i, m in enumerate(_list(body["messages"], "messages"))]
        if not any(m["role"] in ("user", "tool") or m["role"] == "system" for m in probe["messages"]):
            raise Drop("malformed", "no user, system or tool message to answer")
    else:
        probe["prompt"] = _prompt(body["prompt"])
    if "tools" in body:
        if not chat:
            raise Drop("malformed", "'tools' on a completions request")
        probe["tools"] = [_tool(t, i) for i, t in enumerate(_list(body["tools"], "tools"))]
    if "tool_choice" in body:
        probe["tool_choice"] = body["tool_choice"]
    if params:
        probe["params"] = params
    if original:
        probe["original"] = original
    probe = redact_traffic(probe)
    _refuse_hostile(probe)
    category = category_of(probe)
    problem = _check({**probe, "category": category})
    if problem is not None:
        raise Drop("malformed", problem)
    return Probe(name=probe["name"], category=category, messages=probe.get("messages"), prompt=probe.get("prompt"),
                 max_tokens=probe["max_tokens"], gates=list(DEFAULT_GATES[category]), tools=probe.get("tools"),
                 tool_choice=probe.get("tool_choice"), sampling=dict(probe.get("params", {})),
                 original=dict(probe.get("original", {})))


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise Drop("malformed", f"'{what}' must be a non-empty list")
    return value


def _max_tokens(original: dict[str, Any], cap: int) -> int:
    logged = original.get("max_completion_tokens", original.get("max_tokens"))
    if logged is None:
        return min(DEFAULT_MAX_TOKENS, cap)
    if not isinstance(logged, int) or isinstance(logged, bool) or logged < 1:
        raise Drop("malformed", f"max_tokens must be a positive integer, not {shown(logged, 20)}")
    return min(logged, cap, MAX_TOKENS)


def _message(m: Any, i: int) -> dict[str, Any]:
    """Message I as a probe holds it (null fields dropped), or Drop naming what it carries that a probe cannot."""
    where = f"messages[{i}]"
    if not isinstance(m, dict):
        raise Drop("malformed", f"{where} is not an object")
    m = {k: v for k, v in m.items() if v is not None}
    if m.get("role") not in MESSAGE_ROLES:
        kind = "unsupported" if m.get("role") == "function" else "malformed"
        raise Drop(kind, f"{where} has role {shown(m.get('role'))!r}; a probe's roles are {', '.join(MESSAGE_ROLES)}")
    for key in m:
        if key not in _MESSAGE_KEYS:
            raise Drop("unsupported", f"{where} carries {shown(key)!r}: a probe's messages hold "
                                      f"{', '.join(sorted(_MESSAGE_KEYS))}")
    content = m.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            part_type = part.get("type") if isinstance(part, dict) else None
            if part_type != "text":
                raise Drop("unsupported", f"{where}.content[{j}] is {shown(part_type)!r} content: probes are text")
    for j, call in enumerate(m.get("tool_calls") or []):
        args = call.get("function", {}).get("arguments") if isinstance(call, dict) and \
            isinstance(call.get("function"), dict) else None
        if args is not None and not isinstance(args, str):
            raise Drop("malformed", f"{where}.tool_calls[{j}].function.arguments is not a string of JSON")
    if "content" not in m and not (m["role"] == "assistant" and m.get("tool_calls")):
        raise Drop("malformed", f"{where} has no content")
    return dict(m)


def _prompt(value: Any) -> str | list[int]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # one prompt in a list (the completions API allows a batch)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return value
    if isinstance(value, list) and len(value) > 1:
        raise Drop("unsupported", f"a batch of {len(value)} prompts in one request: give one per record")
    raise Drop("malformed", "'prompt' must be a non-empty string or list of token ids")


def _tool(t: Any, i: int) -> dict[str, Any]:
    if not isinstance(t, dict) or t.get("type", "function") != "function":
        kind = t.get("type") if isinstance(t, dict) else type(t).__name__
        raise Drop("unsupported", f"tools[{i}] is a {shown(kind)!r} tool: function tools only")
    return t


def _refuse_hostile(value: Any) -> None:
    """Drop a record any of whose strings (keys too) holds a control character, a NUL or a lone surrogate."""
    todo: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while todo:
        v, at = todo.pop()
        if isinstance(v, str):
            m = _HOSTILE.search(v)
            if m is not None:
                c = ord(m.group())
                what = "a lone surrogate" if 0xD800 <= c <= 0xDFFF else "NUL" if c == 0 else "a control character"
                raise Drop("hostile", f"{what} U+{c:04X} in {_where(at)}: refused (terminal escapes and NULs are "
                                      "not prompt text)")
        elif isinstance(v, dict):
            for k, x in v.items():
                todo.append((k, (*at, k, "(a key)")))
                todo.append((x, (*at, k)))
        elif isinstance(v, list):
            todo.extend((x, (*at, i)) for i, x in enumerate(v))


def _where(at: tuple[Any, ...]) -> str:
    """A path into the request as a user reads it (messages[0].content), its keys shown safely."""
    out = ""
    for part in at:
        if part == "(a key)":
            out += " (a key)"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{shown(part, 30)}" if out else shown(part, 30)
    return out or "the request"


def _texts(probe: dict[str, Any]) -> str:
    if "prompt" in probe:
        return probe["prompt"] if isinstance(probe["prompt"], str) else ""
    users = [m.get("content") for m in probe["messages"] if m.get("role") in ("user", "tool")]
    last = users[-1] if users else probe["messages"][-1].get("content")
    if isinstance(last, list):
        return " ".join(p.get("text", "") for p in last if isinstance(p, dict))
    return last if isinstance(last, str) else ""


def category_of(probe: dict[str, Any]) -> str:
    """The category an imported request is filed under (it picks the default gates and groups results):
    tool_call with tools, json when it asks for JSON, prose_zh when its last user text is mostly CJK, code when
    that text looks like code, else prose_en."""
    if probe.get("tools"):
        return "tool_call"
    params = probe.get("params", {})
    fmt = params.get("response_format", {})
    if (isinstance(fmt, dict) and fmt.get("type") in ("json_object", "json_schema")) or "guided_json" in params:
        return "json"
    text = _texts(probe)[:4000]
    letters = len(_LETTERS.findall(text))
    if letters and len(_CJK.findall(text)) / letters > 0.3:
        return "prose_zh"
    if _CODE.search(text[:20000]):
        return "code"
    return "prose_en"
