"""Answers gate: a deployment that returns blank outputs on most probes does not answer.

An output is blank when it has no non-whitespace text, no tool call and no
reasoning text. One blank output is the content gate's business (a FAIL of
that probe, or NOT_DISCRIMINATING when base is blank too). An arm that is
blank on more than ``MAX_BLANK_SHARE`` of its probes is not a deployment
whose outputs can be judged at all, whatever the reason (a broken chat
template, a tokenizer mismatch, random weights, a stop token hit at once):
its measurements are INVALID, and so is any comparison made against it.
Seen on an H200 session of a randomly initialised hybrid model: every arm
returned only newlines on every probe, and the session was called WARN.
"""

from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, SKIP, GateResult, Output, gate, offline
from observatory.model.probes import Probe

MAX_BLANK_SHARE = 0.5


def is_blank(output: Output) -> bool:
    """No non-whitespace text, no tool call and no reasoning."""
    texts = (output.text, output.content, output.reasoning)
    return not any((t or "").strip() for t in texts) and not output.tool_calls


@gate(
    "answers",
    "The arm answers: blank (whitespace-only, no tool call) on at most half of its probes, else INVALID.",
    kind="arm",
    invalidates=True,
)
def check(outputs: list[tuple[Probe, Output]]) -> GateResult:
    """FAIL (the arm is INVALID) when more than half of the outputs are blank."""
    if not outputs:
        return GateResult(SKIP, "no outputs")
    blank = [p.name for p, o in outputs if is_blank(o)]
    share = len(blank) / len(outputs)
    details = {"blank": len(blank), "outputs": len(outputs), "share": round(share, 4), "blank_probes": blank,
               "max_share": MAX_BLANK_SHARE}
    if share > MAX_BLANK_SHARE:
        return GateResult(
            FAIL,
            f"blank output on {len(blank)} of {len(outputs)} probes: the deployment does not answer",
            details,
        )
    return GateResult(PASS, f"{len(outputs) - len(blank)} of {len(outputs)} outputs are not blank", details)


@offline("answers")
def check_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"outputs": [{"probe": name, "text": ..., "tool_calls"?: [...], "reasoning"?: ...}, ...]}`` -> verdict."""
    items = obj.get("outputs")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ObservatoryError('expected {"outputs": [{"probe", "text"}, ...]}')
    pairs = []
    for n, item in enumerate(items):
        text, calls, reasoning = item.get("text", ""), item.get("tool_calls"), item.get("reasoning")
        if not isinstance(text, str) or (calls is not None and not isinstance(calls, list)) or (
                reasoning is not None and not isinstance(reasoning, str)):
            raise ObservatoryError(f'outputs[{n}]: "text" (and "reasoning") must be strings, "tool_calls" a list')
        probe = Probe(name=str(item.get("probe", f"output-{n}")), category="prose_en", prompt="")
        pairs.append((probe, Output(text=text, content=text, tool_calls=calls, reasoning=reasoning)))
    result = check(pairs)
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
