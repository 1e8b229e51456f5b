"""content and distinct_outputs gates (issue 4; docs/design.md mistake 5)."""

from __future__ import annotations

import pytest

from observatory.model.errors import ObservatoryError
from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe

CONTENT = default_registry().get("content")
DISTINCT = default_registry().get("distinct_outputs")
PROBE = Probe(name="capital", category="prose_en", prompt="The capital of France is")

THINK_LOOP = "<think> Here's a thinking process:\n\n1. **Analyze the request:** The user wants " * 6
CALL = {
    "id": "chatcmpl-tool-1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (Output(text=""), "empty output"),
        (Output(text="", content=None, tool_calls=[]), "empty output"),
        (Output(text="  \n\n\t"), "whitespace-only output (5 characters)"),
        (Output(text=THINK_LOOP), "only an unfinished thinking block"),
        (
            Output(text="<think>\nThe user asks for the capital"),
            "only an unfinished thinking block",
        ),
        (
            Output(text="<think>\nParis, obviously.\n</think>\n\n"),
            "a closed thinking block followed by an empty answer",
        ),
        # The chat template opened <think> in the prompt: only the closing tag is generated.
        (
            Output(text="Paris, obviously.\n</think>\n\n  "),
            "a closed thinking block followed by an empty answer",
        ),
    ],
    ids=[
        "empty",
        "no-text-no-calls",
        "whitespace-only",
        "unfinished-think-loop",
        "unfinished-think",
        "closed-think-empty-answer",
        "think-opened-in-prompt-empty-answer",
    ],
)
def test_bad_content_fails(output: Output, reason: str) -> None:
    res = CONTENT.check(output=output, probe=PROBE)
    assert res.verdict == "FAIL"
    assert res.reason == reason


@pytest.mark.parametrize(
    ("output", "thinking"),
    [
        (Output(text=" Paris."), "none"),
        (Output(text="<think>\nEasy.\n</think>\n\nParis."), "closed"),
        (Output(text="Easy.\n</think>\n\nParis."), "closed"),
        (Output(text="Paris. <think> now let me double-check"), "unclosed"),
        (Output(text="", content=None, tool_calls=[CALL]), "none"),
        (
            Output(
                text="<think>\nUse the tool.", content="<think>\nUse the tool.", tool_calls=[CALL]
            ),
            "unclosed",
        ),
    ],
    ids=[
        "plain",
        "closed-think-then-answer",
        "think-opened-in-prompt",
        "answer-then-unclosed-think",
        "pure-tool-call",
        "unfinished-think-plus-call",
    ],
)
def test_good_content_passes(output: Output, thinking: str) -> None:
    res = CONTENT.check(output=output, probe=PROBE)
    assert res.verdict == "PASS"
    assert res.details["thinking"] == thinking


def test_thinking_preamble_is_visible_in_the_preview() -> None:
    """docs/design.md mistake 5: the preview showed the same thinking preamble for unrelated prompts."""
    res = CONTENT.check(Output(text=THINK_LOOP), PROBE)
    assert res.details["preview"] == THINK_LOOP[:80]
    assert res.details["preview"].startswith("<think> Here's a thinking process:")


def test_preview_is_the_first_80_unicode_characters_raw() -> None:
    text = "<script>alert(1)</script> " + "巴黎是法国的首都。" * 20
    res = CONTENT.check(Output(text=text), PROBE)
    assert res.details["preview"] == text[:80]
    assert len(res.details["preview"]) == 80
    assert res.details["preview"].startswith("<script>")  # escaping is the report's job
    assert res.details["chars"] == len(text)


def test_preview_of_a_pure_tool_call() -> None:
    """Issue 14 item 9: the gate's preview of a tool call is the one rendering the matrix shows too."""
    from observatory.model.previews import tool_calls_text

    res = CONTENT.check(Output(text="", tool_calls=[CALL]), PROBE)
    assert res.details["preview"] == '→ get_weather({"city": "Paris"})' == tool_calls_text([CALL])
    assert res.details["tool_calls"] == 1


def test_content_offline_adapter() -> None:
    assert CONTENT.offline({"text": "Paris."})["verdict"] == "PASS"
    res = CONTENT.offline({"text": "<think> Here's a thinking process:"})
    assert (res["verdict"], res["reason"], res["preview"]) == (
        "FAIL",
        "only an unfinished thinking block",
        "<think> Here's a thinking process:",
    )
    assert CONTENT.offline({"text": "", "tool_calls": [CALL]})["verdict"] == "PASS"
    with pytest.raises(ObservatoryError, match='"tool_calls" must be a list'):
        CONTENT.offline({"text": "", "tool_calls": "get_weather"})


# --- distinct_outputs (arm gate) ---

LONG = "<think> Here's a thinking process:\n\n1. **Analyze the request:** The user"


def chat(name: str, prompt: str) -> Probe:
    return Probe(name=name, category="prose_en", messages=[{"role": "user", "content": prompt}])


def test_identical_outputs_for_different_prompts_fail() -> None:
    """docs/design.md mistake 5: two unrelated prompts, the same 200-token thinking preamble."""
    outputs = [
        (chat("recite-cat", "Recite 'The cat sat on the mat' four times."), Output(text=LONG)),
        (chat("primes-10", "List the first ten primes."), Output(text=LONG)),
        (
            chat("capital", "What is the capital of France?"),
            Output(text="The capital of France is Paris."),
        ),
    ]
    res = DISTINCT.check(outputs=outputs)
    assert res.verdict == "FAIL"
    assert res.details["groups"] == [{"probes": ["recite-cat", "primes-10"], "preview": LONG[:80]}]
    assert res.reason == (
        "identical outputs for different prompts (recite-cat, primes-10): the prompt did not take effect"
    )


def test_identical_tool_calls_for_different_prompts_fail() -> None:
    other_id = {**CALL, "id": "chatcmpl-tool-2"}
    outputs = [
        (chat("weather", "Weather in Paris?"), Output(text="", tool_calls=[CALL])),
        (chat("time", "What time is it in Tokyo?"), Output(text="", tool_calls=[other_id])),
    ]
    res = DISTINCT.check(outputs)
    assert res.verdict == "FAIL"
    assert res.details["groups"][0]["probes"] == ["weather", "time"]


@pytest.mark.parametrize(
    "outputs",
    [
        [
            (chat("a", "Describe Paris in one sentence."), Output(text=LONG)),
            (chat("a-again", "Describe Paris in one sentence."), Output(text=LONG)),
        ],
        [
            (chat("two-plus-two", "2+2="), Output(text="4")),
            (chat("sqrt-16", "sqrt(16)="), Output(text="4")),
            (chat("paris", "Describe Paris."), Output(text="Paris is the capital of France.")),
            (chat("rome", "Describe Rome."), Output(text="Rome is the capital of Italy.")),
        ],
        [
            (chat("x", "Describe Paris."), Output(text=LONG)),
            (chat("y", "Describe Rome."), Output(text=LONG + " wants Rome.")),
        ],
    ],
    ids=["same-prompt-exempt", "short-answers-coincide", "different-outputs"],
)
def test_distinct_outputs_pass(outputs) -> None:
    res = DISTINCT.check(outputs)
    assert res.verdict == "PASS"
    assert res.details["groups"] == []


@pytest.mark.parametrize(
    "outputs",
    [
        [],
        [(chat("a", "x"), Output(text=LONG))],
        [(chat("a", "x"), Output(text="")), (chat("b", "y"), Output(text=""))],
    ],
    ids=["no-outputs", "one-output", "only-empty-outputs"],
)
def test_distinct_outputs_skip_with_nothing_to_compare(outputs) -> None:
    assert DISTINCT.check(outputs).verdict == "SKIP"


def test_distinct_offline_adapter() -> None:
    res = DISTINCT.offline(
        {
            "outputs": [
                {"probe": "p1", "prompt": "Count to five.", "text": LONG},
                {
                    "probe": "p2",
                    "prompt": [{"role": "user", "content": "Name a colour."}],
                    "text": LONG,
                },
            ]
        }
    )
    assert (res["verdict"], res["groups"][0]["probes"]) == ("FAIL", ["p1", "p2"])
    with pytest.raises(ObservatoryError, match=r'outputs\[0\]: "prompt" must be'):
        DISTINCT.offline({"outputs": [{"probe": "p1", "text": LONG}]})


# --- reasoning split off by a reasoning parser (issue item 14) ---

REASONING = "Here's a thinking process:\n\n1. **Analyze the request:** The user wants the capital of France."


@pytest.mark.parametrize("answer", ["", "  \n", None], ids=["empty", "whitespace", "content-null"])
def test_reasoning_without_answer_fails(answer: str | None) -> None:
    """Issue item 14: vLLM's --reasoning-parser moves thinking into reasoning_content; thinking
    with no answer was judged only on the (empty) content."""
    res = CONTENT.check(output=Output(text=answer or "", content=answer, reasoning=REASONING), probe=PROBE)
    assert res.verdict == "FAIL"
    assert res.reason == f"thinking only, no answer ({len(REASONING)} characters of reasoning)"
    assert res.details["reasoning_preview"] == REASONING[:80]
    assert res.details["preview"] == ("[thinking] " + REASONING)[:80]


def test_reasoning_with_answer_or_tool_call_passes() -> None:
    """Issue item 14 (control): reasoning followed by an answer, or by a tool call, is fine."""
    ok = CONTENT.check(output=Output(text="Paris.", content="Paris.", reasoning=REASONING), probe=PROBE)
    assert ok.verdict == "PASS" and ok.details["reasoning_chars"] == len(REASONING)
    assert ok.details["preview"] == "Paris."
    call = CONTENT.check(output=Output(text="", content=None, tool_calls=[CALL], reasoning=REASONING), probe=PROBE)
    assert call.verdict == "PASS"
    plain = CONTENT.check(output=Output(text="Paris."), probe=PROBE)
    assert plain.details["reasoning_chars"] is None


def test_offline_adapter_takes_reasoning() -> None:
    """Issue item 14: `gates check content` judges the reasoning field too."""
    res = CONTENT.offline({"text": "", "reasoning": REASONING})
    assert (res["verdict"], res["reason"]) == ("FAIL", f"thinking only, no answer ({len(REASONING)} characters of reasoning)")
    with pytest.raises(ObservatoryError, match='"reasoning" must be a string'):
        CONTENT.offline({"text": "x", "reasoning": 3})
