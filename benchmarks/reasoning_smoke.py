"""Smoke test of the reasoning variant (observatory/field_reasoning_model) on a
running vLLM server: what lands in reasoning / content / tool_calls.

Serve it first, e.g. (CPU build; one server at a time):

    VLLM_CPU_KVCACHE_SPACE=1 vllm serve observatory/field_reasoning_model --dtype bfloat16 \\
        --max-model-len 1024 --port 8011 --reasoning-parser deepseek_r1 \\
        --enable-auto-tool-choice --tool-call-parser hermes \\
        [--speculative-config '{"method":"mtp","num_speculative_tokens":2}']

then ``python benchmarks/reasoning_smoke.py http://127.0.0.1:8011/v1 [--json OUT]``.
Requests (temperature 0): tool prompts of probes/field.toml with their tools
and prose/JSON prompts, each with ``chat_template_kwargs.enable_thinking=true``,
streamed and not streamed, and the same prompts without enable_thinking.
Prints one line per request (reasoning field name, reasoning, content, tool
calls) and, with --json, writes every response so two servers (base, mtp2)
can be compared with --compare A.json B.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import tomllib

PROBES = Path(__file__).resolve().parents[1] / "probes" / "field.toml"
EXTRA_PROMPTS = (
    "Tell me about chmod.",
    "Give the NAME line of the ls(1) manual page as JSON with keys name, section, summary.",
)
MAX_TOKENS = 160


def requests_to_send() -> list[dict[str, Any]]:
    """(name, messages, tools) of every request: the tool probes and a few prose ones."""
    probes = tomllib.loads(PROBES.read_text(encoding="utf-8"))["probe"]
    out = [{"name": p["name"], "messages": p["messages"], "tools": p.get("tools")}
           for p in probes if p["category"] in ("tool_call", "json")][:7]
    out += [{"name": f"extra-{i}", "messages": [{"role": "user", "content": c}], "tools": None}
            for i, c in enumerate(EXTRA_PROMPTS, 1)]
    return out


def _reasoning(obj: Any) -> tuple[str | None, str | None]:
    """(field name, text) of the reasoning in a message or delta (vLLM names it
    `reasoning` or `reasoning_content` depending on the version)."""
    extra = getattr(obj, "model_extra", None) or {}
    for key in ("reasoning", "reasoning_content"):
        value = getattr(obj, key, None) or extra.get(key)
        if value:
            return key, value
    return None, None


def send(client: Any, model: str, req: dict[str, Any], think: bool, stream: bool) -> dict[str, Any]:
    """One chat request; the parts of its answer."""
    kwargs: dict[str, Any] = {"model": model, "messages": req["messages"], "temperature": 0,
                              "max_tokens": MAX_TOKENS}
    if req["tools"]:
        kwargs["tools"] = req["tools"]
    if think:
        kwargs["extra_body"] = {"chat_template_kwargs": {"enable_thinking": True}}
    row: dict[str, Any] = {"name": req["name"], "think": think, "stream": stream}
    if not stream:
        resp = client.chat.completions.create(**kwargs)
        msg = resp.choices[0].message
        field, reasoning = _reasoning(msg)
        row |= {"reasoning_field": field, "reasoning": reasoning, "content": msg.content,
                "tool_calls": [{"name": c.function.name, "arguments": c.function.arguments}
                               for c in msg.tool_calls or []],
                "finish_reason": resp.choices[0].finish_reason, "raw": resp.model_dump(mode="json")}
        return row
    parts: dict[str, Any] = {"reasoning_field": None, "reasoning": "", "content": "", "finish_reason": None}
    calls: dict[int, dict[str, str]] = {}
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        field, text = _reasoning(delta)
        if text:
            parts["reasoning_field"] = field
            parts["reasoning"] += text
        parts["content"] += delta.content or ""
        for tc in delta.tool_calls or []:
            slot = calls.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function and tc.function.name:
                slot["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                slot["arguments"] += tc.function.arguments
        parts["finish_reason"] = choice.finish_reason or parts["finish_reason"]
    row |= parts | {"reasoning": parts["reasoning"] or None, "content": parts["content"] or None,
                    "tool_calls": [calls[i] for i in sorted(calls)]}
    return row


def _args_equal(a: str, b: str) -> bool:
    try:
        return json.loads(a) == json.loads(b)
    except (TypeError, json.JSONDecodeError):
        return a == b


def summary_line(r: dict[str, Any]) -> str:
    calls = "; ".join(f"{c['name']}({c['arguments']})" for c in r["tool_calls"]) or "-"
    return (f"{r['name']:12s} think={int(r['think'])} stream={int(r['stream'])} finish={r['finish_reason']}  "
            f"[{r['reasoning_field']}] {json.dumps(r['reasoning'], ensure_ascii=False)[:110]}  "
            f"content={json.dumps(r['content'], ensure_ascii=False)[:90]}  tool_calls={calls}")


def compare(a_path: Path, b_path: Path) -> int:
    """Requests whose reasoning, content and tool calls differ between two runs."""
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (a_path, b_path))
    differ = 0
    for x, y in zip(a, b):
        same = (x["reasoning"] == y["reasoning"] and x["content"] == y["content"]
                and len(x["tool_calls"]) == len(y["tool_calls"])
                and all(c["name"] == d["name"] and _args_equal(c["arguments"], d["arguments"])
                        for c, d in zip(x["tool_calls"], y["tool_calls"])))
        differ += not same
        if not same:
            print(f"DIFFER {x['name']} think={x['think']} stream={x['stream']}\n  A: {summary_line(x)}\n"
                  f"  B: {summary_line(y)}")
    print(f"{len(a) - differ} of {len(a)} responses agree")
    return differ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base_url", nargs="?", help="e.g. http://127.0.0.1:8011/v1")
    ap.add_argument("--json", type=Path, help="write every response here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two --json files")
    args = ap.parse_args(argv)
    if args.compare:
        return 1 if compare(*args.compare) else 0
    if not args.base_url:
        ap.error("base_url is required")
    from openai import OpenAI

    client = OpenAI(base_url=args.base_url, api_key="unused")
    model = client.models.list().data[0].id
    rows = []
    for think in (True, False):
        for req in requests_to_send():
            for stream in (False, True):
                row = send(client, model, req, think, stream)
                rows.append(row)
                print(summary_line(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    ok = [r for r in rows if r["think"] and (r["reasoning"] and (r["content"] or r["tool_calls"]))]
    print(f"{len(ok)} of {sum(r['think'] for r in rows)} thinking requests have reasoning and content/tool calls")
    return 0


if __name__ == "__main__":
    sys.exit(main())
