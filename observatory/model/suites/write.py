"""Suites written out: the documented TOML (`suite_toml`), or OpenAI Batch API lines (`suite_jsonl`).

Python reads TOML but does not write it; this writes the small part a suite
uses: strings (multi-line where they hold newlines, every control character
escaped), integers, floats, booleans, arrays and inline tables, each probe a
``[[probe]]`` table with its messages and tools as ``[[probe.messages]]`` and
``[[probe.tools]]`` tables. TOML has no null and no integer beyond 64 bits:
a probe holding either (a tool schema's ``"default": null``) cannot be
written as TOML and is dropped, named, with the advice to write JSONL, which
holds it (tests/model/test_suites.py reads every written suite back and compares).
"""

from __future__ import annotations

import json
import re
from typing import Any

from observatory.model.probes import DEFAULT_GATES, Probe
from observatory.model.suites.records import Dropped

_BARE_KEY = re.compile(r"[A-Za-z0-9_\-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')
_NEEDS_ESCAPE_MULTILINE = re.compile(r'["\\\x00-\x08\x0b-\x1f\x7f]')


class Unwritable(ValueError):
    """A value TOML cannot hold, at a dotted path."""


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return _ESCAPES.get(c) or f"\\u{ord(c):04X}"


def _string(s: str, multiline: bool = False) -> str:
    if multiline and "\n" in s:
        return '"""\n' + _NEEDS_ESCAPE_MULTILINE.sub(_escape, s) + '"""'
    return '"' + _NEEDS_ESCAPE.sub(_escape, s) + '"'


def _key(k: str) -> str:
    return k if _BARE_KEY.fullmatch(k) else _string(k)


def value(v: Any, at: str = "") -> str:
    """V as a TOML value (inline); Unwritable naming AT for what TOML cannot hold."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if not -(2**63) <= v < 2**63:
            raise Unwritable(f"{at}: the integer {v} is beyond TOML's 64 bits")
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        return _string(v)
    if isinstance(v, list):
        return "[" + ", ".join(value(x, f"{at}[{i}]") for i, x in enumerate(v)) + "]"
    if isinstance(v, dict):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{_key(k)} = {value(x, f'{at}.{k}')}" for k, x in v.items()) + " }"
    if v is None:
        raise Unwritable(f"{at}: null, which TOML cannot hold")
    raise Unwritable(f"{at}: a {type(v).__name__}")


def _probe(p: Probe, comment: str | None) -> str:
    lines = [f"# {json.dumps(comment, ensure_ascii=False)[1:-1]}"] if comment else []
    lines += ["[[probe]]", f"name = {_string(p.name)}", f"category = {_string(p.category)}",
              f"max_tokens = {p.max_tokens}"]
    if p.gates != DEFAULT_GATES.get(p.category):
        lines.append(f"gates = {value(p.gates, 'gates')}")
    if p.prompt is not None:
        lines.append(f"prompt = {_string(p.prompt, True) if isinstance(p.prompt, str) else value(p.prompt)}")
    if p.tool_choice is not None:
        lines.append(f"tool_choice = {value(p.tool_choice, 'tool_choice')}")
    for key, table in (("params", p.sampling), ("original", p.original)):
        if table:
            lines.append(f"{key} = {value(table, key)}")
    if p.expect:
        lines.append(f"expect = {value(p.expect, 'expect')}")
    for i, m in enumerate(p.messages or []):
        lines.append("[[probe.messages]]")
        for k, x in m.items():
            text = _string(x, True) if isinstance(x, str) and k == "content" else value(x, f"messages[{i}].{k}")
            lines.append(f"{_key(k)} = {text}")
    for i, t in enumerate(p.tools or []):
        lines.append("[[probe.tools]]")
        lines += [f"{_key(k)} = {value(x, f'tools[{i}].{k}')}" for k, x in t.items()]
    return "\n".join(lines) + "\n"


def suite_toml(probes: list[Probe], suite: str, description: str,
               origins: dict[str, str] | None = None) -> tuple[str, list[Probe], list[Dropped]]:
    """(the TOML text, the probes written, those dropped because TOML cannot hold them); ORIGINS: name -> the
    record it came from (FILE:LINE), written as a comment above each probe."""
    origins = origins or {}
    parts = [f"suite = {_string(suite)}\n", f"description = {_string(description, True)}\n"]
    kept: list[Probe] = []
    dropped: list[Dropped] = []
    for p in probes:
        try:
            parts.append("\n" + _probe(p, origins.get(p.name)))
        except Unwritable as e:
            dropped.append(Dropped(origins.get(p.name, p.name), "unsupported",
                                   f"holds {e}: write the suite as .jsonl to keep it"))
        else:
            kept.append(p)
    return "".join(parts), kept, dropped


def request_body(p: Probe) -> dict[str, Any]:
    """P as the OpenAI request body it stands for: its prompt, tools, the logged fields and those it sends."""
    body: dict[str, Any] = {**p.original, **p.sampling}
    if "max_tokens" not in body and "max_completion_tokens" not in body:  # the logged one stays (the cap reapplies)
        body["max_tokens"] = p.max_tokens
    if p.messages is not None:
        body["messages"] = p.messages
    else:
        body["prompt"] = p.prompt
    if p.tools is not None:
        body["tools"] = p.tools
    if p.tool_choice is not None:
        body["tool_choice"] = p.tool_choice
    return body


def suite_jsonl(probes: list[Probe]) -> str:
    """PROBES as OpenAI Batch API lines (custom_id the probe's name): the openai format reads them back."""
    return "".join(json.dumps({"custom_id": p.name, "method": "POST",
                               "url": "/v1/chat/completions" if p.messages is not None else "/v1/completions",
                               "body": request_body(p)}, ensure_ascii=False) + "\n" for p in probes)
