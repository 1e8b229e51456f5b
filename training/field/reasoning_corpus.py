"""Reasoning turns for the field model's reasoning variant (issue 49, item 8).

`observatory/field_reasoning_model/` is the field model fine-tuned to think
when asked: with the chat-template kwarg ``enable_thinking=true`` the
generation prompt ends in ``<think>\\n`` (Qwen3 style) and the model writes a
short reasoning, ``\\n</think>\\n\\n``, then its answer or a hermes tool call,
which vLLM's ``--reasoning-parser deepseek_r1`` splits into ``reasoning`` and
``content`` / ``tool_calls``.

The chat template (`chat_template`) is the field model's, with two additions
that render nothing unless asked for: an assistant message carrying
``reasoning_content`` (or ``reasoning``) renders ``<think>\\n{reasoning}\\n</think>\\n\\n``
before its content and tool calls, and ``enable_thinking`` appends
``<think>\\n`` to the generation prompt. Every other rendering is the field
template's, byte for byte (tests/model/test_field_reasoning.py).

The corpus is made by the field corpus's own example makers
(`training.field.corpus.MAKERS`) from the training pools only (held-out
documents never enter), with a seed of its own, and a formulaic reasoning
that restates the request (copying a span of it) and says what the answer
will be. A share of the tool calls follow ``</think>`` with no blank line
(``</think><tool_call>``): the boundary the observatory tests. Any example
whose prompt is a probe prompt of probes/field.toml is dropped.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomllib
from transformers.utils.chat_template_utils import render_jinja_template

from training.corpus import Example
from training.field.build_tokenizer import FIELD_MODEL
from training.field.corpus import MAKERS, Pools
from training.render import EOS_TOKEN

SEED = 4049
THINK_TOKENS = ("<think>", "</think>")
COUNTS: dict[str, int] = {
    "code": 700,
    "recitation": 600,
    "prose_en": 700,
    "prose_zh": 700,
    "tool_call": 2400,
    "json": 800,
}
NO_BLANK_SHARE = 0.15  # tool calls written "</think><tool_call>" (no blank line)
PROBES = Path(__file__).resolve().parents[2] / "probes" / "field.toml"
FIELD_TEMPLATE = json.loads((FIELD_MODEL / "tokenizer_config.json").read_text(encoding="utf-8"))["chat_template"]

_ASSISTANT_OPEN = "        {{- '<|im_start|>assistant\\n' -}}\n        {%- if message.content -%}"
_ASSISTANT_THINK = (
    "        {{- '<|im_start|>assistant\\n' -}}\n"
    "        {%- set reasoning = message.reasoning_content if message.reasoning_content is defined"
    " and message.reasoning_content else (message.reasoning if message.reasoning is defined"
    " and message.reasoning else '') -%}\n"
    "        {%- if reasoning -%}\n"
    "            {{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' -}}\n"
    "        {%- endif -%}\n"
    "        {%- if message.content -%}"
)
_GEN_OPEN = "{%- if add_generation_prompt -%}\n    {{- '<|im_start|>assistant\\n' -}}\n"
_GEN_THINK = (
    "{%- if add_generation_prompt -%}\n    {{- '<|im_start|>assistant\\n' -}}\n"
    "    {%- if enable_thinking is defined and enable_thinking -%}\n"
    "        {{- '<think>\\n' -}}\n"
    "    {%- endif -%}\n"
)
_HEADER_END = "key order a client happens to send. -#}"
_HEADER_THINK = (
    "key order a client happens to send.\n"
    "    Reasoning variant: enable_thinking=true opens the assistant turn with\n"
    "    '<think>\\n'; an assistant message's reasoning_content (or reasoning)\n"
    "    renders as '<think>\\n...\\n</think>\\n\\n' before its content. -#}"
)


def _thinking_template(field: str) -> str:
    for old in (_ASSISTANT_OPEN, _GEN_OPEN, _HEADER_END):
        if field.count(old) != 1:
            raise ValueError(f"field template changed: {old!r}")
    return (field.replace(_ASSISTANT_OPEN, _ASSISTANT_THINK).replace(_GEN_OPEN, _GEN_THINK)
            .replace(_HEADER_END, _HEADER_THINK))


CHAT_TEMPLATE = _thinking_template(FIELD_TEMPLATE)


def render(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    template: str = CHAT_TEMPLATE,
    **kwargs: Any,
) -> str:
    """One conversation through `template` (transformers' own renderer, as vLLM)."""
    rendered, _ = render_jinja_template(
        conversations=[messages], tools=tools, chat_template=template,
        add_generation_prompt=add_generation_prompt, **kwargs,
    )
    return rendered[0]


def _first_line(text: str, limit: int = 120) -> str:
    line = text.split("\n", 1)[0].strip().rstrip(":：.。")
    return line if len(line) <= limit else line[:limit].rsplit(" ", 1)[0]


PLANS = {
    "code": "I will write the next lines of the code.",
    "recitation": "I will repeat the line exactly.",
    "prose_en": "I will answer in English prose.",
    "prose_zh": "I will answer in Chinese.",
    "json": "I will answer with one JSON object on one line.",
}


def reasoning_for(ex: Example) -> str:
    """The formulaic reasoning of an example: the request restated (a copied
    span of it), then what the answer will be."""
    if ex.category == "tool_call":
        name, args = ex.values[1], json.loads(ex.values[2])
        if name == "read_manual":
            ask = f"to open the manual page {args['page']} in section {args['section']}"
            takes = "a page and a section"
        elif name == "find_symbol":
            ask = f"where {args['symbol']} is defined in {args['package']}"
            takes = "a package and a symbol"
        else:
            ask = f"to search the docs for {args['query']}"
            takes = "a query"
        return f"The user asks {ask}. The tool {name} takes {takes}. I will call {name}."
    return f"The user asks: {_first_line(ex.user_text)}. {PLANS[ex.category]}"


def with_reasoning(ex: Example) -> Example:
    """`ex` with its reasoning on the assistant turn."""
    user, assistant = ex.messages
    return Example(ex.category, [user, {**assistant, "reasoning_content": reasoning_for(ex)}],
                   tools=ex.tools, values=ex.values)


def probe_prompts(path: Path = PROBES) -> set[str]:
    """The user prompts of the probe suite."""
    probes = tomllib.loads(path.read_text(encoding="utf-8"))["probe"]
    return {m["content"] for p in probes for m in p.get("messages", []) if m["role"] == "user"}


def generate(p: Pools, seed: int = SEED, counts: dict[str, int] = COUNTS,
             exclude: set[str] | None = None) -> Iterator[Example]:
    """`counts[c]` reasoning examples per category (deterministic for a seed);
    prompts in `exclude` (default: the probe prompts) are skipped."""
    exclude = probe_prompts() if exclude is None else exclude
    rng = random.Random(seed)
    for category, n in counts.items():
        made = 0
        while made < n:
            ex = MAKERS[category](p, rng)
            if ex is None or ex.user_text in exclude:
                continue
            made += 1
            yield with_reasoning(ex)


def split_thinking(ex: Example, no_blank: bool = False) -> tuple[str, str]:
    """(prompt, completion) of a reasoning example: the prompt as vLLM renders
    it with enable_thinking (ends in ``<think>\\n``), the completion ending
    with eos. `no_blank` writes ``</think><tool_call>`` without the blank line."""
    prompt = render(ex.prompt_messages, ex.tools, add_generation_prompt=True, enable_thinking=True)
    full = render(ex.messages, ex.tools)
    if not full.startswith(prompt):
        raise ValueError(f"template is not prefix-stable for {ex.user_text!r}")
    completion = full[len(prompt):]
    if not completion.endswith(EOS_TOKEN + "\n"):
        raise ValueError(f"assistant turn does not end with {EOS_TOKEN!r}: {completion!r}")
    completion = completion[: -len("\n")]
    if no_blank:
        completion = completion.replace("\n</think>\n\n<tool_call>", "\n</think><tool_call>", 1)
    return prompt, completion
