"""Tool-call gate: parsed, known, schema-valid calls, as many as the probe expects.

Issue 4 / docs/design.md section 1: under a broken spec backend, 0 of 3 tool calls
came out. Applies to chat probes that offer tools (SKIP otherwise, and SKIP
for ``tool_choice: "none"``). FAIL when:

- ``finish_reason`` is ``"length"`` (the call was cut off);
- a call was left as text in ``content`` (a ``<tool_call>`` tag or a JSON
  object with ``name`` and ``arguments``): the server's parser did not extract
  it (closed ``<think>`` blocks are not searched: drafting a call while
  thinking is not leaving one in the answer);
- a call names a tool that was not offered;
- ``arguments`` is not a string holding a JSON object that validates against
  the tool's ``parameters`` schema. A dict instead of a string FAILs: the
  OpenAI API specifies a JSON string, and a client written against the API
  would break on a dict;
- the names (in order) or the count differ from ``expect.tool_names`` /
  ``expect.tool_count``; ``tool_choice: "required"`` and no call; a named
  ``tool_choice`` and a call to any other function (or none).

``tool_calls`` null and ``[]`` both mean "no calls". A tool whose
``parameters`` schema is itself invalid is a probe error (ObservatoryError),
not a verdict.
"""

import functools
import json
import re
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, SKIP, GateResult, Output, gate, offline
from observatory.model.probes import Probe

_CALL_MARKERS = ("<tool_call", "[TOOL_CALLS]", "<function=")
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)


class _BadSchema(Exception):
    def __init__(self, name: str, msg: str):
        super().__init__(msg)
        self.name, self.msg = name, msg


@functools.lru_cache(maxsize=256)
def _validators(tools_json: str) -> dict[str, Any]:
    """Tool name -> a validator, for the tools in TOOLS_JSON; validated once per distinct tool list.

    Checking a schema costs milliseconds and a session judges each tool probe
    on every arm and pass, so validated schemas are cached (keyed on the
    tools' canonical JSON, so a changed probe is validated again).
    """
    import jsonschema  # imported here: it costs 0.1 s at start-up, and most commands never judge

    validators: dict[str, Any] = {}
    for tool in json.loads(tools_json) or []:
        fn: dict[str, Any] = (tool.get("function") if isinstance(tool, dict) else None) or {}
        name, schema = str(fn.get("name")), fn.get("parameters", {})
        try:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
        except (jsonschema.SchemaError, TypeError, AttributeError) as e:
            raise _BadSchema(name, getattr(e, "message", str(e))) from None
        validators[name] = cls(schema)
    return validators


def _schemas(probe: Probe) -> dict[str, Any]:
    """Tool name -> a validator for its parameters; raises on an invalid schema."""
    try:
        return _validators(json.dumps(probe.tools or [], sort_keys=True, default=str))
    except _BadSchema as e:
        raise ObservatoryError(
            f"Probe {probe.name!r}{' in ' + probe.source if probe.source else ''}: "
            f"tool {e.name!r} has an invalid parameters schema: {e.msg}"
        ) from None


def call_left_in_text(content: str | None) -> str | None:
    """A snippet of a tool call written as text in CONTENT, or None."""
    if not content:
        return None
    answer = _THINK_BLOCK.sub("", content)
    for marker in _CALL_MARKERS:
        at = answer.find(marker)
        if at >= 0:
            return answer[at : at + 60]
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", answer):
        try:
            obj, end = decoder.raw_decode(answer, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "name" in obj and ("arguments" in obj or "parameters" in obj):
            return answer[m.start() : min(end, m.start() + 60)]
    return None


def _check_call(i: int, call: Any, validators: dict[str, Any]) -> tuple[str | None, str | None]:
    """(name, problem) of the I-th call."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return None, f"call {i} has no 'function' object"
    name = fn.get("name")
    if name not in validators:
        return (
            name,
            f"call {i} names {name!r}, which was not offered (offered: {sorted(validators)})",
        )
    args = fn.get("arguments")
    if not isinstance(args, str):
        return name, (
            f"call {i} ({name}): arguments is a {type(args).__name__}, "
            "not the JSON string the OpenAI API specifies"
        )
    try:
        parsed = json.loads(args)
    except json.JSONDecodeError as e:
        return name, f"call {i} ({name}): arguments are not valid JSON ({e.msg} at char {e.pos})"
    if not isinstance(parsed, dict):
        return name, f"call {i} ({name}): arguments are JSON but not an object"
    from jsonschema.exceptions import best_match

    error = best_match(validators[name].iter_errors(parsed))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return name, f"call {i} ({name}): arguments violate the schema at {where}: {error.message}"
    return name, None


def _forced_name(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    return None


@gate(
    "tool_calls",
    "Tool calls parsed (not left in text), offered, schema-valid, as named and counted as expected.",
    kind="result",
    correctness=True,
    applies="named",
)
def check(output: Output, probe: Probe) -> GateResult:
    """Judge OUTPUT's tool calls against PROBE's tools, tool_choice and expectations."""
    if probe.kind != "chat" or not probe.tools:
        return GateResult(SKIP, "not a chat probe with tools")
    if probe.tool_choice == "none":
        return GateResult(SKIP, "tool_choice is 'none': no call is asked for")
    validators = _schemas(probe)
    calls = output.tool_calls or []
    problems: list[str] = []
    if not isinstance(calls, list):
        problems.append(f"tool_calls is a {type(calls).__name__}, not a list")
        calls = []
    if output.finish_reason == "length":
        problems.append("finish_reason is 'length': the output was cut off at max_tokens")
    left = call_left_in_text(output.content)
    if left is not None:
        problems.append(f"a tool call was left as text in content (not parsed): {left!r}")
    names: list[str | None] = []
    for i, call in enumerate(calls):
        name, problem = _check_call(i, call, validators)
        names.append(name)
        if problem:
            problems.append(problem)
    want_names, want_count = probe.expect.get("tool_names"), probe.expect.get("tool_count")
    if want_names is not None and names != list(want_names):
        problems.append(f"expected calls {list(want_names)}, got {names}")
    if want_count is not None and len(calls) != want_count:
        problems.append(f"expected {want_count} call(s), got {len(calls)}")
    forced = _forced_name(probe.tool_choice)
    if forced is not None and (not calls or any(n != forced for n in names)):
        problems.append(f"tool_choice names {forced!r}, but the calls are {names}")
    if probe.tool_choice == "required" and not calls:
        problems.append("tool_choice is 'required', but there is no tool call")
    details = {"names": names, "count": len(calls), "problems": problems}
    if problems:
        return GateResult(FAIL, "; ".join(problems), details)
    if not calls:
        return GateResult(PASS, "no tool call, and none was required or expected", details)
    return GateResult(PASS, f"{len(calls)} valid tool call(s): {names}", details)


def _output_from_response(response: dict[str, Any]) -> Output | None:
    """The Output of choices[0] of a chat.completion object; None when it has no message."""
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else None
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return None
    message = choice["message"]
    content = message.get("content")
    content = content if isinstance(content, str) else None
    return Output(
        text=content or "",
        content=content,
        tool_calls=message.get("tool_calls"),
        finish_reason=choice.get("finish_reason"),
    )


@offline("tool_calls")
def check_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"response", "tools", "expect": {"names", "count"}, "tool_choice"}`` -> verdict, reason."""
    response, tools = obj.get("response"), obj.get("tools")
    if not isinstance(response, dict):
        raise ObservatoryError('"response" must be a chat.completion object')
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) and "name" in t["function"]
        for t in tools
    ):
        raise ObservatoryError(
            '"tools" must be a list of OpenAI tool definitions with function.name'
        )
    expect = obj.get("expect") or {}
    if not isinstance(expect, dict):
        raise ObservatoryError('"expect" must be an object with optional "names" and "count"')
    probe = Probe(
        name="offline",
        category="tool_call",
        messages=[{"role": "user", "content": ""}],
        tools=tools,
        tool_choice=obj.get("tool_choice"),
        expect={
            k: v
            for k, v in (("tool_names", expect.get("names")), ("tool_count", expect.get("count")))
            if v is not None
        },
    )
    output = _output_from_response(response)
    if output is None:
        return {"verdict": FAIL, "reason": "the response has no choices[0].message"}
    result = check(output, probe)
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
