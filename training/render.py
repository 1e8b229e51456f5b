"""Rendering conversations through the model's chat template.

The training text must be byte-identical to what vLLM renders for the same
request, so rendering goes through transformers' own `render_jinja_template`
(the function behind `tokenizer.apply_chat_template`, which vLLM calls) with
the template in `chat_template.jinja`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers.utils.chat_template_utils import render_jinja_template

from training.corpus import Example

CHAT_TEMPLATE = (Path(__file__).resolve().parent / "chat_template.jinja").read_text(encoding="utf-8")

CHATML_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TOOL_TOKENS = ("<tool_call>", "</tool_call>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"


def render(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
) -> str:
    """The chat template applied to one conversation."""
    rendered, _ = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=CHAT_TEMPLATE,
        add_generation_prompt=add_generation_prompt,
    )
    return rendered[0]


def split_example(ex: Example) -> tuple[str, str]:
    """(prompt, completion): the prompt as vLLM renders it with a generation
    prompt, and the completion the model must produce (ending with eos)."""
    prompt = render(ex.prompt_messages, ex.tools, add_generation_prompt=True)
    full = render(ex.messages, ex.tools)
    if not full.startswith(prompt):
        raise ValueError(f"template is not prefix-stable for {ex.user_text!r}")
    completion = full[len(prompt) :]
    if not completion.endswith(EOS_TOKEN + "\n"):
        raise ValueError(f"assistant turn does not end with {EOS_TOKEN!r}: {completion!r}")
    return prompt, completion[: -len("\n")]
