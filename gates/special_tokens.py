"""Leaked special tokens: the spec arm's output shows special tokens where base's does not.

A batch-composition bug seen in the field (a DeepSeek MTP thread in vLLM
#41834) injected special tokens into 25 of 100 outputs under speculation;
role markers or an end-of-text marker in the text mean the engine emitted a
token the chat template reserves. Base is the reference: a marker that base
prints too (a probe about chat templates, say) is not a leak, so the gate
FAILs only on markers that occur more often in the spec arm's text than in
base's. Markers are recognised by their shapes, the ones the common
tokenizers use: ``<|...|>`` (ChatML, Llama 3, Qwen), ``<s>``/``</s>``,
``<unk>``/``<pad>``/``<bos>``/``<eos>``, ``[INST]``/``[/INST]``,
``<start_of_turn>``/``<end_of_turn>`` and ``<｜...｜>`` (DeepSeek's
full-width bars). Tool-call tags (``<tool_call>``) are not special: tool
parsers consume them.
"""

import re
from collections import Counter
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, GateResult, Output, gate, offline
from observatory.model.probes import Probe

MARKER = re.compile(
    r"<\|[^|<>\s]{1,40}\|>|<｜[^｜<>\s]{1,40}｜>|</?s>|<(?:unk|pad|bos|eos|mask)>|\[/?INST\]"
    r"|<(?:start|end)_of_turn>"
)


def markers(text: str) -> Counter[str]:
    """How often each special-token marker occurs in TEXT."""
    return Counter(MARKER.findall(text))


def _text(output: Output) -> str:
    return "\n".join(t for t in (output.reasoning, output.text or output.content) if t)


@gate(
    "special_tokens",
    "Special tokens (role markers, end-of-text, BOS) in the spec output that base's output does not have.",
    kind="pair",
)
def check(spec: Output, base: Output, probe: Probe) -> GateResult:
    """FAIL on markers that occur more often in SPEC's text than in BASE's."""
    mine, ref = markers(_text(spec)), markers(_text(base))
    leaked = {m: n - ref.get(m, 0) for m, n in mine.items() if n > ref.get(m, 0)}
    details: dict[str, Any] = {"leaked": leaked, "spec_markers": dict(mine), "base_markers": dict(ref)}
    if leaked:
        shown = ", ".join(f"{m} x{n}" for m, n in sorted(leaked.items()))
        return GateResult(FAIL, f"special tokens in the output that base's does not have: {shown}", details)
    return GateResult(PASS, "no special token beyond base's" if mine else "no special token", details)


@offline("special_tokens")
def check_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"spec": {"text": ...}, "base": {"text": ...}}`` -> verdict, leaked markers."""
    sides = []
    for key in ("spec", "base"):
        side = obj.get(key)
        if not isinstance(side, dict) or not isinstance(side.get("text"), str):
            raise ObservatoryError(f'expected "{key}": {{"text": "..."}}')
        sides.append(Output(text=side["text"]))
    result = check(sides[0], sides[1], Probe(name="offline", category="prose_en", prompt=""))
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
