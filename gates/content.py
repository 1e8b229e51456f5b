"""Content gates: non-empty output with a preview, and distinct outputs across prompts.

docs/design.md section 2, mistake 5: a reasoning model spent its whole budget on the
same ``<think> Here's a thinking process:`` preamble for two unrelated prompts
and a hash check called it coincidence; an 80-character preview shows it at
once.

``content`` (one output) FAILs an empty or whitespace-only output (no text and
no tool calls), an output that is only an unfinished thinking block, and a
closed thinking block followed by an empty answer. Everything up to the last
``</think>`` counts as thinking (chat templates often open ``<think>`` in the
prompt, so the output may hold only the closing tag). ``details.preview`` is
the first 80 Unicode characters of the text, raw (the report escapes it);
for a pure tool call, its one-line rendering ``→ name(arguments)`` instead.

With a reasoning parser (vLLM's ``--reasoning-parser``) the thinking arrives
apart, as ``Output.reasoning``: reasoning present with an empty or
whitespace-only answer and no tool calls FAILs "thinking only, no answer";
``details.reasoning_preview`` holds its first 80 characters, and the preview
of an output with no answer shows the reasoning, marked ``[thinking]``.

``distinct_outputs`` (one arm) FAILs when probes with different prompts got the
same output (same stripped text and the same tool names and arguments): the
prompt did not take effect, and the arm's results cannot be trusted. Probes
with identical prompts (prompt or messages, tools and tool_choice) are exempt.
Empty outputs are the content gate's; text-only outputs shorter than
``DISTINCT_MIN_CHARS`` non-whitespace characters are ignored too, since short
correct answers ("4", "Paris.") coincide for different prompts legitimately.
"""

import json
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, SKIP, GateResult, Output, gate, offline
from observatory.model.previews import PREVIEW_CHARS, tool_calls_text
from observatory.model.probes import Probe

DISTINCT_MIN_CHARS = 20


def split_thinking(text: str) -> tuple[str, str]:
    """(state, answer): state is "none", "closed" or "unclosed"; answer is the text outside thinking."""
    state, answer = "none", text
    close = answer.rfind("</think>")
    if close >= 0:
        state, answer = "closed", answer[close + len("</think>") :]
    at = answer.find("<think>")
    if at >= 0:
        state, answer = "unclosed", answer[:at]
    return state, answer


def preview(output: Output) -> str:
    """First PREVIEW_CHARS characters of OUTPUT's text, else of its tool calls, else of its reasoning."""
    text = output.text or output.content or ""
    if not text.strip() and output.tool_calls:
        text = tool_calls_text(output.tool_calls)
    elif not text.strip() and (output.reasoning or "").strip():
        text = "[thinking] " + (output.reasoning or "").strip()
    return text[:PREVIEW_CHARS]


@gate(
    "content",
    "Non-empty output, not only thinking; stores an 80-character preview of every output.",
    kind="result",
    correctness=True,
    applies="named",
)
def check(output: Output, probe: Probe) -> GateResult:
    """FAIL empty, whitespace-only and thinking-only outputs; always record the preview."""
    text = output.text or output.content or ""
    calls = output.tool_calls or []
    state, answer = split_thinking(text)
    reasoning = output.reasoning or ""
    details = {
        "preview": preview(output),
        "chars": len(text),
        "thinking": state,
        "tool_calls": len(calls),
        "reasoning_chars": len(reasoning) if output.reasoning is not None else None,
        "reasoning_preview": reasoning[:PREVIEW_CHARS] if output.reasoning is not None else None,
    }
    if not calls:
        if reasoning.strip() and not answer.strip():
            return GateResult(FAIL, f"thinking only, no answer ({len(reasoning)} characters of reasoning)", details)
        if not text:
            return GateResult(FAIL, "empty output", details)
        if not text.strip():
            return GateResult(FAIL, f"whitespace-only output ({len(text)} characters)", details)
        if not answer.strip() and state == "unclosed":
            return GateResult(FAIL, "only an unfinished thinking block", details)
        if not answer.strip():
            return GateResult(FAIL, "a closed thinking block followed by an empty answer", details)
    return GateResult(PASS, f"{len(text)} characters, {len(calls)} tool call(s)", details)


def _output_key(output: Output) -> str | None:
    """What makes two outputs "the same"; None for outputs too short or empty to tell."""
    text = (output.text or output.content or "").strip()
    calls = [
        [c.get("function", {}).get("name"), c.get("function", {}).get("arguments")]
        for c in output.tool_calls or []
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    if not calls and len("".join(text.split())) < DISTINCT_MIN_CHARS:
        return None
    return json.dumps([text, calls], ensure_ascii=False)


def _prompt_key(probe: Probe) -> str:
    return json.dumps(
        [probe.prompt, probe.messages, probe.tools, probe.tool_choice], sort_keys=True
    )


@gate(
    "distinct_outputs",
    "Within one arm, different prompts must not give identical outputs (else the prompt had no effect).",
    kind="arm",
    invalidates=True,
)
def check_distinct(outputs: list[tuple[Probe, Output]]) -> GateResult:
    """FAIL when probes with different prompts share one output; names the probes."""
    groups: dict[str, list[tuple[Probe, Output]]] = {}
    for probe, output in outputs:
        key = _output_key(output)
        if key is not None:
            groups.setdefault(key, []).append((probe, output))
    if sum(len(g) for g in groups.values()) < 2:
        return GateResult(SKIP, "fewer than two outputs long enough to compare")
    same = [g for g in groups.values() if len({_prompt_key(p) for p, _ in g}) > 1]
    details = {
        "groups": [{"probes": [p.name for p, _ in g], "preview": preview(g[0][1])} for g in same]
    }
    if same:
        listed = "; ".join(", ".join(grp["probes"]) for grp in details["groups"])
        return GateResult(
            FAIL,
            f"identical outputs for different prompts ({listed}): the prompt did not take effect",
            details,
        )
    return GateResult(
        PASS, f"{len(outputs)} outputs, none shared across different prompts", details
    )


def _output_arg(obj: dict[str, Any], where: str) -> Output:
    text, calls, reasoning = obj.get("text", ""), obj.get("tool_calls"), obj.get("reasoning")
    if not isinstance(text, str):
        raise ObservatoryError(f'{where}"text" must be a string')
    if calls is not None and not isinstance(calls, list):
        raise ObservatoryError(f'{where}"tool_calls" must be a list of OpenAI tool calls or null')
    if reasoning is not None and not isinstance(reasoning, str):
        raise ObservatoryError(f'{where}"reasoning" must be a string or null')
    return Output(text=text, content=text, tool_calls=calls, reasoning=reasoning)


@offline("content")
def check_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"text": "...", "tool_calls": [...]?, "reasoning": "..."?}`` -> verdict, reason, preview."""
    result = check(_output_arg(obj, ""), Probe(name="offline", category="prose_en", prompt=""))
    return {"verdict": result.verdict, "reason": result.reason, **result.details}


@offline("distinct_outputs")
def check_distinct_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"outputs": [{"probe": name, "prompt": str | messages, "text": ...}, ...]}`` -> verdict."""
    items = obj.get("outputs")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ObservatoryError('expected {"outputs": [{"probe", "prompt", "text"}, ...]}')
    pairs = []
    for n, item in enumerate(items):
        prompt, name = item.get("prompt"), item.get("probe", f"output-{n}")
        if not isinstance(prompt, (str, list)):
            raise ObservatoryError(f'outputs[{n}]: "prompt" must be a string or a messages list')
        probe = Probe(
            name=str(name),
            category="prose_en",
            prompt=prompt if isinstance(prompt, str) else None,
            messages=prompt if isinstance(prompt, list) else None,
        )
        pairs.append((probe, _output_arg(item, f"outputs[{n}]: ")))
    result = check_distinct(pairs)
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
