"""Channel stream_fields (issue 49 item 3): streamed against whole, field by field, with the chunked control."""

from __future__ import annotations

from typing import Any

from observatory.channels import stream_fields
from observatory.channels.view import ChannelView
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ResultRow
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

TOOLS = [{"type": "function", "function": {"name": "f"}}]
SUITE = [Probe("prose", "prose_en", messages=[{"role": "user", "content": "Write"}], max_tokens=8),
         Probe("call", "tool_call", messages=[{"role": "user", "content": "Call"}], tools=TOOLS, max_tokens=8)]
IDS = [10, 11, 12, 13]
TOP = [[[t, -0.1], [t + 100, -2.5], [t + 200, -3.0]] for t in IDS]
CALL = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]


def _judge(store: Store, arms: list[str], bad: dict[str, str] | None = None) -> dict[str, Any]:
    """Every arm answers every probe streamed and whole alike, except BAD: arm -> the field its stream breaks."""
    bad = bad or {}
    probes = stream_fields.plan(SUITE)
    sid, arm_rows, pids = session(store, probes, [a.split("@")[0] for a in arms],
                                  options={"channels": ["stream_fields"]})
    for spec in arms:
        name = spec.split("@")[0]
        arm = arm_rows[name]
        if "@" in spec:  # the chunked-stream control
            store.update(ArmRow, arm.id, launch={**arm.launch, "stream_interval": int(spec.split("@")[1])})
        for p in probes:
            for repeat in (stream_fields.STREAMED, stream_fields.WHOLE):
                top = [list(map(list, row)) for row in TOP]
                calls = CALL if p.tools else None
                if repeat == stream_fields.STREAMED and bad.get(name) == "top":
                    top = [top[0]] + [[[t, -0.1]] + top[0][1:] for t in IDS[1:]]
                if repeat == stream_fields.STREAMED and bad.get(name) == "args" and calls:
                    calls = [{**CALL[0], "function": {"name": "f", "arguments": ""}}]
                result(store, arm, pids[p.name], "stream_fields", IDS, [f" w{t}" for t in IDS], finish="length",
                       repeat=repeat, top_logprobs=top, logprobs=[-0.1] * len(IDS), tool_calls=calls)
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}
    view = ChannelView(store, sid, "stream_fields", all_arms, roles, {pids[p.name]: p for p in probes},
                       default_registry())
    names = {a.id: a.name for a in all_arms}
    return {names[v.arm_id]: v for v in stream_fields.judge(view)}


def test_plan_takes_chats_tools_and_completions() -> None:
    """Chat probes with and without tools, and the tool-less ones' user text as plain completions."""
    kinds = [p.meta["kind"] for p in stream_fields.plan(SUITE)]
    assert kinds == ["chat", "chat+tools", "completion"]


def test_clean_arms_pass(store: Store) -> None:
    """Clean control: streamed answers equal to the whole ones on every field PASS, the chunked control too."""
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"])
    assert {n: v.verdict for n, v in got.items()} == {"base": "PASS", "mtp2": "PASS", "base+stream_interval=3": "PASS"}


def test_top_logprobs_copied_in_chunks_fail_a_spec_arm(store: Store) -> None:
    """Negative control (stream_top_copy): each position's top_logprobs after the first copied from the first,
    only streamed: FAIL on the spec arm, speculation's (the chunked control is clean)."""
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"], bad={"mtp2": "top"})
    assert got["mtp2"].verdict == "FAIL" and "top_logprobs" in got["mtp2"].reason
    assert "speculation's" in got["mtp2"].reason
    assert got["base+stream_interval=3"].verdict == "PASS"


def test_tool_arguments_dropped_from_deltas_fail(store: Store) -> None:
    """Negative control (stream_args_drop): streamed tool arguments empty, whole ones right: FAIL."""
    got = _judge(store, ["base", "mtp2"], bad={"mtp2": "args"})
    assert got["mtp2"].verdict == "FAIL" and "tool_calls" in got["mtp2"].reason
    assert "no chunked-stream control" in got["mtp2"].reason


def test_a_bug_the_chunked_control_shares_is_the_stream_assembly_not_speculation(store: Store) -> None:
    """Where the chunked-stream control shows the same field wrong, the spec arm WARNs (not attributable to
    speculation) and the control FAILs: the engine's stream assembly, without speculation."""
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"],
                 bad={"mtp2": "top", "base+stream_interval=3": "top"})
    assert got["mtp2"].verdict == "WARN" and "chunked-stream control differs too" in got["mtp2"].reason
    assert got["base+stream_interval=3"].verdict == "FAIL"
    assert "without speculation" in got["base+stream_interval=3"].reason


def test_a_difference_base_shows_the_same_way_is_the_engines_own_noted_on_every_arm(store: Store) -> None:
    """vLLM 0.26's hermes parser on the H100 (2026-12-06): tool-call ids withheld from the stream on base, the
    spec arm and the control alike. Base shows it on the same probe and field: NOTE everywhere, not a WARN on a
    clean night; a field base does not share still FAILs the spec arm (negative control)."""
    got = _judge(store, ["base", "mtp2", "base+stream_interval=3@3"],
                 bad={"base": "top", "mtp2": "top", "base+stream_interval=3": "top"})
    assert {n: v.verdict for n, v in got.items()} == {"base": "NOTE", "mtp2": "NOTE", "base+stream_interval=3": "NOTE"}
    assert "as on base" in got["mtp2"].reason and "not speculation's" in got["mtp2"].reason
    got = _judge(store, ["base", "mtp2"], bad={"base": "top", "mtp2": "args"})
    assert got["mtp2"].verdict == "FAIL" and "tool_calls" in got["mtp2"].reason


def test_field_diffs_tolerates_logprob_noise_within_the_tolerance() -> None:
    """Logprobs within LOGPROB_TOL are equal; beyond it, or a top-k id set that differs, is a difference."""
    def row(lps: list[float], top: list[Any]) -> ResultRow:
        return ResultRow(token_ids=IDS, text="x", finish_reason="length", usage={}, logprobs=lps, top_logprobs=top)

    tol = stream_fields.LOGPROB_TOL
    a = row([-0.1] * 4, TOP)
    b = row([-0.1 + tol / 2] * 4, [[[t, lp + tol / 2] for t, lp in r] for r in TOP])
    assert stream_fields.field_diffs(a, b) == {}
    c = row([-0.1 - 2 * tol] * 4, TOP)
    assert set(stream_fields.field_diffs(a, c)) == {"logprobs"}
