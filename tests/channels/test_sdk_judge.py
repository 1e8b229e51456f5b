"""The openai SDK as a conformance judge (issue 28 item 7): its reading of answers, and channel ``sdk``'s verdicts.

Pure Python: hand-made chunks read by the SDK's real types and stream helper
(`observatory.client.openai_sdk`), the client against a STUB server
(tests/support/stub_answers.py: a conformant answer), the fault's transform, and the
channel's judge on stored rows. The real engine, with the fault on a spec
arm, is tests/real_engine/test_engine_channel_sdk.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from observatory.channels import get
from observatory.channels.sdk import judge
from observatory.channels.view import ChannelView
from observatory.client import openai_sdk as sdk
from observatory.client.send import EngineClient
from observatory.faults.field_sdk import wrong_object
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ResultRow
from tests.support.stub_answers import AnswerStub, fixed


def chunk(delta: dict[str, Any], finish: str | None = None, obj: str = "chat.completion.chunk") -> dict[str, Any]:
    return {"id": "c", "object": obj, "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def text_chunk(text: str, finish: str | None = None, obj: str = "text_completion") -> dict[str, Any]:
    return {"id": "x", "object": obj, "created": 1, "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}


HELLO = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
         chunk({}, "stop")]


def call(i: int | None, **fn: str) -> dict[str, Any]:
    tc: dict[str, Any] = {"function": fn}
    if i is not None:
        tc["index"] = i
    return tc


def lean_calls(*calls: tuple[str | None, str, str]) -> list[dict[str, Any]]:
    return [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]


def test_a_conformant_chat_stream_is_accepted_and_read_as_the_lean_reader_read_it() -> None:
    v = sdk.judge_stream(HELLO, True, sdk.lean_reading("Hello", "Hello", None, "stop", True))
    assert v["error"] is None and v["differs"] == {} and v["events"] == 4
    assert v["sdk"] == sdk.version()


def test_a_chunk_with_a_wrong_object_is_rejected_and_the_sdk_stream_helper_drops_its_text() -> None:
    objs = [HELLO[0], chunk({"content": "Hel"}, obj="chat.completion"), *HELLO[2:]]
    v = sdk.judge_stream(objs, True, sdk.lean_reading("Hello", "Hello", None, "stop", True))
    assert v["error"].startswith("streamed event 2 of 4: ValidationError for ChatCompletionChunk: object: Input "
                                 "should be 'chat.completion.chunk' (input 'chat.completion')"), v["error"]
    assert "\n" not in v["error"] and "errors.pydantic.dev" not in v["error"]
    assert v["differs"] == {"content": "lo"}  # ChatCompletionStream.__stream__ skips the event


def test_tool_call_deltas_accumulate_by_index_and_a_delta_without_index_is_rejected() -> None:
    head = [chunk({"role": "assistant"}),
            chunk({"tool_calls": [{**call(0, name="f", arguments=""), "id": "a", "type": "function"}]}),
            chunk({"tool_calls": [call(0, arguments='{"x":')]})]
    lean = sdk.lean_reading(None, "", lean_calls(("a", "f", '{"x":1}')), "tool_calls", True)
    good = sdk.judge_stream([*head, chunk({"tool_calls": [call(0, arguments="1}")]}), chunk({}, "tool_calls")],
                            True, lean)
    assert good["error"] is None and good["differs"] == {}
    bad = sdk.judge_stream([*head, chunk({"tool_calls": [call(None, arguments="1}")]}), chunk({}, "tool_calls")],
                           True, lean)
    assert "streamed event 4 of 5" in bad["error"] and "tool_calls.0.index" in bad["error"]
    assert "Field required" in bad["error"]


def test_a_repeated_tool_call_index_makes_the_sdk_read_one_call_otherwise() -> None:
    # two calls sent under index 0: the SDK joins their ids (string deltas add up), the lean reader keeps the last
    objs = [chunk({"role": "assistant"}),
            chunk({"tool_calls": [{**call(0, name="f", arguments="{}"), "id": "a", "type": "function"}]}),
            chunk({"tool_calls": [{**call(0, name="g", arguments="{}"), "id": "b", "type": "function"}]}),
            chunk({}, "tool_calls")]
    v = sdk.judge_stream(objs, True, sdk.lean_reading(None, "", lean_calls(("b", "fg", "{}{}")), "tool_calls", True))
    assert v["error"] is None
    assert v["differs"]["tool_calls"][0]["id"] == "ab"


def test_completion_streams_null_finish_before_the_last_chunk_is_the_sdks_type_gap_not_a_rejection() -> None:
    usage = {"id": "x", "object": "text_completion", "created": 1, "model": "m", "choices": [],
             "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}}
    lean = sdk.lean_reading("ab", "ab", None, "length", False)
    v = sdk.judge_stream([text_chunk("a"), text_chunk("b"), text_chunk("", "length"), usage], False, lean)
    assert v["error"] is None and v["differs"] == {}
    # the last choice chunk without a finish reason is no gap: the stream never said why it ended
    cut = sdk.judge_stream([text_chunk("a"), text_chunk("b")], False, sdk.lean_reading("ab", "ab", None, None, False))
    assert cut["error"] and "finish_reason" in cut["error"]
    wrong = sdk.judge_stream([text_chunk("a", obj="text_completion.chunk"), text_chunk("b", "length")], False, lean)
    # the first chunk's null finish_reason (the SDK's gap) is left out of the error: only the wrong object is named
    assert wrong["error"].startswith("streamed event 1 of 2: ValidationError for Completion: object:"), wrong["error"]
    assert "finish_reason" not in wrong["error"]


def test_a_whole_answer_outside_the_sdks_finish_reason_enum_is_rejected() -> None:
    obj = {"id": "x", "object": "chat.completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "abort"}]}
    v = sdk.judge_whole(obj, True, sdk.lean_reading("hi", "hi", None, "abort", True))
    assert v["error"].startswith("the whole answer: ValidationError") and "'abort'" in v["error"]
    obj["choices"][0]["finish_reason"] = "stop"
    assert sdk.judge_whole(obj, True, sdk.lean_reading("hi", "hi", None, "stop", True)) == \
        {"sdk": sdk.version(), "error": None, "differs": {}}


def test_the_client_stores_the_sdks_verdict_on_correctness_answers_and_never_on_timed_ones() -> None:
    probe = Probe(name="p", category="prose_en", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    with AnswerStub(fixed("hello", [5, 6])) as stub:
        client = EngineClient(stub.url, timeout=10)
        try:
            streamed, whole, timed = client.run(probe), client.run(probe, stream=False), client.run_timed(probe)
        finally:
            client.close()
    assert streamed.ok and streamed.sdk is not None and streamed.sdk["error"] is None
    assert streamed.sdk["events"] == 3 and streamed.sdk["differs"] == {} and streamed.sdk["ms"] >= 0
    assert whole.ok and whole.sdk is not None and whole.sdk.pop("ms") >= 0
    assert whole.sdk == {"sdk": sdk.version(), "error": None, "differs": {}}
    assert timed.ok and timed.sdk is None


def test_the_fault_changes_only_chunks_of_a_multi_token_step() -> None:
    one = SimpleNamespace(logprobs=SimpleNamespace(content=[1]))
    two = SimpleNamespace(logprobs=SimpleNamespace(content=[1, 2]))
    data = '{"object":"chat.completion.chunk","choices":[]}'
    assert wrong_object(data, [one]) == data
    assert '"object":"chat.completion"' in wrong_object(data, [two])
    text = '{"object":"text_completion","choices":[]}'
    assert '"text_completion.chunk"' in wrong_object(text, [SimpleNamespace(logprobs=SimpleNamespace(
        content=None, tokens=["a", "b"]))])


# -- the channel's judge on stored rows ---------------------------------------------------------------------
OK = {"sdk": "9.9", "error": None, "differs": {}}


def row(rid: int, arm: int, mode: str, sdk_v: dict[str, Any] | None, text: str = "Hello", pid: int = 1) -> ResultRow:
    events = {"events": 4} if mode != "nonstream" and sdk_v else {}
    return ResultRow(id=rid, arm_id=arm, probe_id=pid, mode=mode, repeat=0, ok=True, error=None, text=text,
                     content=text, tool_calls=None, finish_reason="stop",
                     sdk=None if sdk_v is None else {**sdk_v, **events})


class FakeStore:
    def __init__(self, results: list[ResultRow]):
        self._results = results

    def probes(self, session_id: int) -> list[Any]:
        return [SimpleNamespace(id=1, name="count", definition={}), SimpleNamespace(id=2, name="soak:x",
                                                                                   definition={"channel": "soak"})]

    def results(self, arm_id: int, mode: str | None = None) -> list[ResultRow]:
        return [r for r in self._results if r.arm_id == arm_id and (mode is None or r.mode == mode)]


ARMS = [ArmRow(id=1, name="base", launch={}), ArmRow(id=2, name="mtp1", launch={"speculative_config": {"k": 1}})]
ROLES = {"base": "base", "mtp1": "spec"}


def verdicts(results: list[ResultRow]) -> dict[tuple[str, str], Any]:
    view = ChannelView(FakeStore(results), 1, "sdk", ARMS, ROLES, {}, default_registry())
    names = {1: "base", 2: "mtp1"}
    return {(names[v.arm_id], v.gate): v for v in judge(view)}


def clean(arm: int, first: int) -> list[ResultRow]:
    return [row(first, arm, "warmup", OK), row(first + 1, arm, "stream", OK), row(first + 2, arm, "nonstream", OK),
            row(first + 3, arm, "timed", None), row(first + 4, arm, "soak", OK, pid=2)]


def test_the_channel_passes_clean_arms_and_fails_a_rejection_only_the_spec_arm_has() -> None:
    v = verdicts(clean(1, 10) + clean(2, 20))
    assert {k: x.verdict for k, x in v.items()} == {("base", "sdk"): "PASS", ("base", "sdk:stream"): "PASS",
                                                   ("mtp1", "sdk"): "PASS", ("mtp1", "sdk:stream"): "PASS"}
    assert v[("mtp1", "sdk")].details["answers"] == 4  # warm-up, stream, whole, channel: the timed pass is not read
    bad = clean(2, 20)
    bad[4] = row(24, 2, "soak", {**OK, "error": "streamed event 2 of 4: ValidationError: <b>object</b>"}, pid=2)
    v = verdicts(clean(1, 10) + bad)
    assert v[("mtp1", "sdk")].verdict == "FAIL" and "<b>object</b>" in v[("mtp1", "sdk")].reason
    assert v[("mtp1", "sdk")].details["table"][0] | {} == {
        "probe": "soak:x", "request": "soak", "repeat": 0, "problem": "rejected",
        "sdk_says": "streamed event 2 of 4: ValidationError: <b>object</b>", "base": "clean"}
    assert v[("base", "sdk")].verdict == "PASS"


def test_a_problem_base_has_too_is_not_attributable_on_the_spec_arm_and_fails_base() -> None:
    rejected = {"sdk": "9.9", "error": "the whole answer: ValidationError: finish_reason 'abort'"}  # no reading
    base, spec = clean(1, 10), clean(2, 20)
    base[2], spec[2] = row(12, 1, "nonstream", rejected), row(22, 2, "nonstream", rejected)
    v = verdicts(base + spec)
    assert v[("base", "sdk")].verdict == "FAIL"
    assert v[("mtp1", "sdk")].verdict == "NOTE" and "not attributable" in v[("mtp1", "sdk")].reason  # within base
    # with the whole answer rejected there is nothing to accumulate the stream against
    assert v[("mtp1", "sdk:stream")].verdict == "SKIP"


def test_a_stream_the_sdk_accumulates_to_another_text_than_the_whole_answer_fails() -> None:
    spec = clean(2, 20)
    spec[1] = row(21, 2, "stream", {**OK, "differs": {"content": "lo"}})
    v = verdicts(clean(1, 10) + spec)
    assert v[("mtp1", "sdk")].verdict == "FAIL" and "reads differently" in v[("mtp1", "sdk")].reason
    assert v[("mtp1", "sdk:stream")].verdict == "FAIL"
    assert "content: stream 'lo', whole 'Hello'" in v[("mtp1", "sdk:stream")].reason
    # a stream the SDK rejects and still accumulates (its helper drops the bad chunks) is compared too
    spec[1] = row(21, 2, "stream", {**OK, "error": "streamed event 2 of 4: ...", "differs": {"content": "lo"}})
    v = verdicts(clean(1, 10) + spec)
    assert v[("mtp1", "sdk")].verdict == "FAIL" and v[("mtp1", "sdk:stream")].verdict == "FAIL"


def test_without_whole_answers_the_stream_comparison_is_not_exercised() -> None:
    v = verdicts([r for r in clean(1, 10) + clean(2, 20) if r.mode != "nonstream"])
    assert v[("mtp1", "sdk:stream")].verdict == "SKIP" and "--no-diffs" in v[("mtp1", "sdk:stream")].reason
    assert v[("mtp1", "sdk")].verdict == "PASS"


def test_answers_stored_without_an_sdk_verdict_are_not_exercised() -> None:
    v = verdicts([row(1, 1, "stream", None), row(2, 2, "stream", None)])
    assert v[("mtp1", "sdk")].verdict == "SKIP" and v[("mtp1", "sdk")].details["not_read"] == 1


@pytest.mark.parametrize("fault", ["sdk_object"])
def test_the_channel_names_its_fault(fault: str) -> None:
    from observatory.faults import FAULTS

    assert fault in get("sdk").faults and fault in FAULTS


def test_the_aa_copy_sharing_bases_problem_is_a_note_and_its_own_fails() -> None:
    """A clean CPU nightly: the A/A copy's volume answer read otherwise by the SDK, exactly as base's own was (the
    engine's, not a copy's): a NOTE, never counted; a problem only the copy has still FAILs (the control)."""
    arms = [*ARMS, ArmRow(id=3, name="base#2", launch={})]
    roles = {**ROLES, "base#2": "aa_copy"}
    differs = {**OK, "differs": {"content": "lo"}}

    def judged(results: list[ResultRow]) -> dict[str, Any]:
        view = ChannelView(FakeStore(results), 1, "sdk", arms, roles, {}, default_registry())
        return {v.gate: v for v in judge(view) if v.arm_id == 3}

    base, copy = clean(1, 10), clean(3, 30)
    base[2], copy[2] = row(12, 1, "nonstream", differs), row(32, 3, "nonstream", differs)
    shared = judged(base + clean(2, 20) + copy)["sdk"]
    assert shared.verdict == "NOTE" and "not attributable" in shared.reason, shared.reason
    only = judged(clean(1, 10) + clean(2, 20) + copy)["sdk"]
    assert only.verdict == "FAIL", only.reason


def test_volume_problems_are_a_rate_against_bases_own() -> None:
    """The volume replay's thousands of answers differ run to run even on base: an arm's SDK problems there are
    judged as a rate against base's (issue 46 item 2). Within it: a NOTE; far above it: a FAIL (the control)."""
    differs = {**OK, "differs": {"content": "lo"}}

    def volume(arm: int, first: int, n: int, bad: int) -> list[ResultRow]:
        return [row(first + i, arm, "volume", differs if i < bad else OK, pid=3 + i) for i in range(n)]

    within = verdicts(clean(1, 10) + volume(1, 100, 200, 2) + clean(2, 20) + volume(2, 400, 200, 3))
    assert within[("mtp1", "sdk")].verdict == "NOTE" and "within base's rate" in within[("mtp1", "sdk")].reason
    far = verdicts(clean(1, 10) + volume(1, 100, 200, 0) + clean(2, 20) + volume(2, 400, 200, 30))
    assert far[("mtp1", "sdk")].verdict == "FAIL", far[("mtp1", "sdk")].reason
