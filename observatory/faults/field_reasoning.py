"""A fault at the end of reasoning (issue 49 item 8): an accepted run of drafts that crosses ``</think>``.

``think_leak`` -> ``vllm.reasoning.deepseek_r1_reasoning_parser`` (API server), caught by channel ``reasoning``
    In a streamed chunk of more than one token that carries the end of
    reasoning, the text after ``</think>`` in that chunk is put into the
    reasoning channel instead of the content (and the tool parser never
    sees it): the tool call's opening markup is left inside the reasoning
    text and the call comes out broken, with HTTP 200 (BUGZOO 2026-H2,
    "reasoning / answer / tool channel boundary": bjk110/spark_vllm_docker
    #16). A chunk of one token (base) and non-streamed answers are intact.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

FAULTS = {
    "think_leak": "in a streamed chunk of more than one token that ends the reasoning, the text after </think> put "
                  "into the reasoning channel (DeepSeek-R1 parser; non-streamed intact)",
}
R1_PARSER = "vllm.reasoning.deepseek_r1_reasoning_parser"

_MARK = "__observatory_reasoning_fault__"


def leak(delta: Any) -> Any:
    """think_leak: a delta's content moved to the end of its reasoning text (vLLM's DeltaMessage names that
    field ``reasoning`` from 0.3x, ``reasoning_content`` before)."""
    content = getattr(delta, "content", None)
    if not content:
        return delta
    field = "reasoning" if hasattr(delta, "reasoning") else "reasoning_content"
    setattr(delta, field, (getattr(delta, field, None) or "") + content)
    delta.content = None
    return delta


def _patch_r1(module: ModuleType, faults: frozenset[str]) -> None:
    cls = module.DeepSeekR1ReasoningParser
    orig = cls.extract_reasoning_streaming
    if getattr(orig, _MARK, False):
        return

    def extract_reasoning_streaming(self: Any, previous_text: str, current_text: str, delta_text: str,
                                    previous_token_ids: Any, current_token_ids: Any, delta_token_ids: Any,
                                    *args: Any, **kwargs: Any) -> Any:
        result = orig(self, previous_text, current_text, delta_text, previous_token_ids, current_token_ids,
                      delta_token_ids, *args, **kwargs)
        ids = list(delta_token_ids or ())
        if result is None or len(ids) <= 1 or getattr(self, "end_token_id", None) not in ids:
            return result
        return leak(result)

    setattr(extract_reasoning_streaming, _MARK, True)
    cls.extract_reasoning_streaming = extract_reasoning_streaming


TARGETS: dict[str, tuple[frozenset[str], Callable[[ModuleType, frozenset[str]], None]]] = {
    R1_PARSER: (frozenset({"think_leak"}), _patch_r1),
}
