"""tool_calls gate: parsed, offered, schema-valid calls as expected (issue 4)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from observatory.model.errors import ObservatoryError
from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe

GATE = default_registry().get("tool_calls")

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string"}},
            "required": ["timezone"],
        },
    },
}
PING = {"type": "function", "function": {"name": "ping"}}  # no parameters schema
TOOLS = [WEATHER, TIME, PING]


def call(name: str, arguments: Any, i: int = 0) -> dict[str, Any]:
    args = json.dumps(arguments) if isinstance(arguments, dict) else arguments
    return {
        "id": f"chatcmpl-tool-{i}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


def response(
    calls: list[dict[str, Any]] | None, content: str | None = None, finish: str = "tool_calls"
) -> dict[str, Any]:
    """A chat.completion object as vLLM's OpenAI server returns it."""
    return {
        "id": "chatcmpl-8f1e",
        "object": "chat.completion",
        "created": 1760000000,
        "model": "Qwen/Qwen3-0.6B",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "reasoning_content": None,
                    "tool_calls": calls,
                },
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        ],
        "usage": {"prompt_tokens": 312, "completion_tokens": 24, "total_tokens": 336},
    }


PARIS = call("get_weather", {"city": "Paris", "unit": "celsius"})
TOKYO_TIME = call("get_time", {"timezone": "Asia/Tokyo"}, 1)

# (response, expect, tool_choice, verdict, reason fragment)
CASES = [
    (
        response([PARIS]),
        {"names": ["get_weather"], "count": 1},
        "auto",
        "PASS",
        "1 valid tool call",
    ),
    (
        response([PARIS, TOKYO_TIME]),
        {"names": ["get_weather", "get_time"], "count": 2},
        None,
        "PASS",
        "2 valid",
    ),
    (response([call("ping", {})]), {}, "required", "PASS", "1 valid"),
    (
        response(
            [PARIS],
            content="<think>\nThe user wants weather; I will use <tool_call>.\n</think>\n\n",
        ),
        {"count": 1},
        "auto",
        "PASS",
        "1 valid",
    ),
    (
        response([PARIS]),
        {},
        {"type": "function", "function": {"name": "get_weather"}},
        "PASS",
        "1 valid",
    ),
    (
        response(None, content="It is sunny in Paris today.", finish="stop"),
        {},
        "auto",
        "PASS",
        "no tool call",
    ),
    # --- negative controls ---
    (
        response(
            [],
            content='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            finish="stop",
        ),
        {"count": 1},
        "auto",
        "FAIL",
        "left as text in content",
    ),
    (
        response(
            None, content='{"name": "get_weather", "arguments": {"city": "Paris"}}', finish="stop"
        ),
        {},
        "auto",
        "FAIL",
        "left as text in content",
    ),
    (
        response(None, content='Sure! [TOOL_CALLS] get_weather {"city": "Paris"}', finish="stop"),
        {},
        "auto",
        "FAIL",
        "left as text in content",
    ),
    (
        response([call("get_forecast", {"city": "Paris"})]),
        {},
        "auto",
        "FAIL",
        "'get_forecast', which was not offered",
    ),
    (response([call("get_weather", '{"city": "Paris"')]), {}, "auto", "FAIL", "not valid JSON"),
    (response([call("get_weather", '["Paris"]')]), {}, "auto", "FAIL", "JSON but not an object"),
    (
        response([call("get_weather", {"city": 42})]),
        {},
        "auto",
        "FAIL",
        "at city: 42 is not of type 'string'",
    ),
    (
        response([call("get_weather", {"unit": "celsius"})]),
        {},
        "auto",
        "FAIL",
        "'city' is a required property",
    ),
    (
        response([call("get_weather", {"city": "Paris", "unit": "kelvin"})]),
        {},
        "auto",
        "FAIL",
        "'kelvin' is not one of",
    ),
    (
        response([call("get_weather", {"city": "Paris", "country": "FR"})]),
        {},
        "auto",
        "FAIL",
        "violate the schema",
    ),
    (response([PARIS]), {"count": 2}, "auto", "FAIL", "expected 2 call(s), got 1"),
    (
        response([TOKYO_TIME, PARIS]),
        {"names": ["get_weather", "get_time"]},
        "auto",
        "FAIL",
        "expected calls",
    ),
    (response([PARIS], finish="length"), {}, "auto", "FAIL", "finish_reason is 'length'"),
    (
        response(None, content="Let me check the weather.", finish="stop"),
        {},
        "required",
        "FAIL",
        "'required'",
    ),
    (
        response([], content="", finish="stop"),
        {"count": 1},
        "auto",
        "FAIL",
        "expected 1 call(s), got 0",
    ),
    (
        response([TOKYO_TIME]),
        {},
        {"type": "function", "function": {"name": "get_weather"}},
        "FAIL",
        "tool_choice names 'get_weather'",
    ),
    (
        response(
            [
                {
                    "id": "c",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ]
        ),
        {},
        "auto",
        "FAIL",
        "arguments is a dict, not the JSON string",
    ),
    (response([{"id": "c", "type": "function"}]), {}, "auto", "FAIL", "no 'function' object"),
]
IDS = [
    "valid-one-call",
    "valid-two-calls",
    "required-no-params-tool",
    "closed-think-mentions-tag",
    "named-right-function",
    "auto-no-call-no-expectation",
    "call-left-in-tool_call-tags",
    "call-left-as-bare-json",
    "call-left-after-mistral-marker",
    "unknown-tool",
    "arguments-not-json",
    "arguments-json-array",
    "schema-wrong-type",
    "schema-missing-required",
    "schema-enum-violation",
    "schema-additional-property",
    "wrong-count",
    "wrong-order",
    "finish-length",
    "required-no-call",
    "empty-list-but-one-expected",
    "named-wrong-function",
    "arguments-as-dict",
    "call-without-function",
]


@pytest.mark.parametrize(("resp", "expect", "tool_choice", "verdict", "fragment"), CASES, ids=IDS)
def test_offline_verdicts(resp, expect, tool_choice, verdict, fragment) -> None:
    obj = {"response": resp, "tools": TOOLS, "expect": expect}
    if tool_choice is not None:
        obj["tool_choice"] = tool_choice
    res = GATE.offline(obj)
    assert res["verdict"] == verdict, res["reason"]
    assert fragment in res["reason"]
    assert "\n" not in res["reason"]


def test_spec_arm_emitting_no_calls_fails() -> None:
    """Issue 4 / docs/design.md section 1: with k>=2 the broken backend made 0 of 3 tool calls."""
    probe = Probe(
        name="weather-and-time",
        category="tool_call",
        messages=[{"role": "user", "content": "Weather in Paris and time in Tokyo?"}],
        tools=TOOLS,
        tool_choice="auto",
        expect={"tool_names": ["get_weather", "get_time"], "tool_count": 2},
    )
    good = Output(text="", content=None, tool_calls=[PARIS, TOKYO_TIME], finish_reason="tool_calls")
    bad = Output(
        text="5, 5, 5, 5, 5", content="5, 5, 5, 5, 5", tool_calls=None, finish_reason="stop"
    )
    assert GATE.check(output=good, probe=probe).verdict == "PASS"
    res = GATE.check(output=bad, probe=probe)
    assert res.verdict == "FAIL"
    assert res.details["count"] == 0
    assert res.details["problems"] == [
        "expected calls ['get_weather', 'get_time'], got []",
        "expected 2 call(s), got 0",
    ]


def test_multiple_choices_use_the_first() -> None:
    resp = response([PARIS])
    resp["choices"].append(
        {**resp["choices"][0], "index": 1, "message": {"role": "assistant", "content": "x"}}
    )
    assert (
        GATE.offline({"response": resp, "tools": TOOLS, "expect": {"count": 1}})["verdict"]
        == "PASS"
    )


@pytest.mark.parametrize(
    "resp",
    [{"id": "x", "choices": []}, {"id": "x"}, {"choices": [{"index": 0, "finish_reason": "stop"}]}],
    ids=["no-choices", "choices-missing", "message-missing"],
)
def test_response_without_message_fails(resp) -> None:
    res = GATE.offline({"response": resp, "tools": TOOLS})
    assert res == {"verdict": "FAIL", "reason": "the response has no choices[0].message"}


@pytest.mark.parametrize(
    ("probe", "why"),
    [
        (
            Probe(name="c", category="tool_call", prompt="call a tool"),
            "not a chat probe with tools",
        ),
        (
            Probe(name="c", category="tool_call", messages=[{"role": "user", "content": "hi"}]),
            "not a chat probe",
        ),
        (
            Probe(
                name="c",
                category="tool_call",
                messages=[{"role": "user", "content": "hi"}],
                tools=TOOLS,
                tool_choice="none",
            ),
            "'none'",
        ),
    ],
    ids=["completion-probe", "chat-without-tools", "tool-choice-none"],
)
def test_skips(probe: Probe, why: str) -> None:
    res = GATE.check(output=Output(text="hi", content="hi"), probe=probe)
    assert res.verdict == "SKIP"
    assert why in res.reason


def test_invalid_schema_in_the_probe_is_an_error() -> None:
    bad_tool = {
        "type": "function",
        "function": {"name": "broken", "parameters": {"type": "objekt"}},
    }
    probe = Probe(
        name="bad-schema",
        category="tool_call",
        messages=[{"role": "user", "content": "hi"}],
        tools=[bad_tool],
        source="probes/custom.toml",
    )
    with pytest.raises(
        ObservatoryError, match=r"Probe 'bad-schema' in probes/custom.toml: tool 'broken'"
    ):
        GATE.check(output=Output(text="", tool_calls=[]), probe=probe)


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"tools": TOOLS}, '"response" must be'),
        ({"response": response([PARIS]), "tools": [{"name": "get_weather"}]}, '"tools" must be'),
        (
            {"response": response([PARIS]), "tools": TOOLS, "expect": ["get_weather"]},
            '"expect" must be',
        ),
    ],
    ids=["no-response", "tools-not-openai-shape", "expect-not-object"],
)
def test_offline_rejects_bad_input(obj, message) -> None:
    with pytest.raises(ObservatoryError, match=message):
        GATE.offline(obj)


def test_tool_schemas_are_validated_once_per_tool_list(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue "A fast instrument" (smaller costs): tool schemas were re-validated on every check."""
    import jsonschema

    checked: list[Any] = []
    real = jsonschema.validators.validator_for
    monkeypatch.setattr(jsonschema.validators, "validator_for",
                        lambda schema, *a, **k: checked.append(schema) or real(schema, *a, **k))
    GATE.check.__globals__["_validators"].cache_clear()
    probe = Probe(name="w", category="tool_call", messages=[{"role": "user", "content": "weather?"}],
                  tools=[WEATHER], expect={"tool_count": 1})
    out = Output(text="", content=None, tool_calls=[call("get_weather", {"city": "Paris"})])
    verdicts = [GATE.check(out, probe).verdict for _ in range(5)]
    params = WEATHER["function"]["parameters"]  # type: ignore[index]
    assert verdicts == ["PASS"] * 5 and checked.count(params) == 1
    changed = Probe(name="w", category="tool_call", messages=[{"role": "user", "content": "weather?"}],
                    tools=[WEATHER, TIME], expect={"tool_count": 1})
    assert GATE.check(out, changed).verdict == "PASS" and checked.count(params) == 2
