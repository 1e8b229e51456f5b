"""Stream integrity (issue 15 item 6): streamed deltas against the streamed ids, tool calls as data."""

from __future__ import annotations

from observatory.judge.apply_gates import judge_session, stream_text_mismatch, stream_text_unmeasurable
from observatory.model.probes import Probe
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

IDS = [11, 12, 13, 14]
TEXTS = [" one", " two", " three", " four"]


def _verdicts(store: Store, sid: int, arm: str) -> dict[str, str]:
    rows = [v for a in store.arms(sid) if a.name == arm for v in store.verdicts(a.id)]
    return {v.gate: v.verdict for v in rows if v.gate == "token_diff:stream_text"}


def _two_arms(store: Store, spec_text: str | None, base_text: str | None = None) -> int:
    sid, arms, pids = session(store, [Probe("p", "prose_en", prompt="count")], ["base", "mtp2"])
    result(store, arms["base"], pids["p"], "stream", IDS, TEXTS, text=base_text)
    result(store, arms["mtp2"], pids["p"], "stream", IDS, TEXTS, text=spec_text)
    judge_session(store, sid)
    return sid


def test_a_token_dropped_from_the_streamed_text_fails_the_spec_arm(store: Store) -> None:
    """Issue 15 item 6: deltas that lost a token's text (ids intact) are caught on the stream alone."""
    sid = _two_arms(store, spec_text=" one two four")
    assert _verdicts(store, sid, "mtp2") == {"token_diff:stream_text": "FAIL"}
    assert _verdicts(store, sid, "base") == {"token_diff:stream_text": "PASS"}


def test_a_clean_stream_passes(store: Store) -> None:
    """Issue 15 item 6, clean control: deltas equal to the ids' texts pass on every arm."""
    sid = _two_arms(store, spec_text=None)
    assert _verdicts(store, sid, "mtp2") == {"token_diff:stream_text": "PASS"}


def test_base_showing_the_same_mismatch_makes_it_a_warn(store: Store) -> None:
    """Issue 15 item 6: where base's stream departs from its ids too, the spec arm's is not attributable."""
    sid = _two_arms(store, spec_text=" one two", base_text=" one two")
    assert _verdicts(store, sid, "mtp2") == {"token_diff:stream_text": "WARN"}
    assert _verdicts(store, sid, "base") == {"token_diff:stream_text": "WARN"}


def test_the_eos_token_kept_among_the_ids_is_not_a_mismatch(store: Store) -> None:
    """vLLM keeps EOS (<|im_end|>) among the streamed ids but not in the text."""
    sid, arms, pids = session(store, [Probe("p", "prose_en", prompt="count")], ["base", "mtp2"])
    for name in ("base", "mtp2"):
        result(store, arms[name], pids["p"], "stream", [*IDS, 2], [*TEXTS, "<|im_end|>"], text="".join(TEXTS),
               finish="stop")
    judge_session(store, sid)
    assert _verdicts(store, sid, "mtp2") == {"token_diff:stream_text": "PASS"}


def test_results_whose_ids_carry_markup_are_not_measurable() -> None:
    """Tool calls, reasoning and split characters are SKIPped with the reason, never passed."""
    from observatory.store.db import ResultRow

    tool = ResultRow(token_ids=[1], token_texts=["<tool_call>"], text="", tool_calls=[{"function": {}}],
                     usage={"completion_tokens": 1})
    split = ResultRow(token_ids=[1, 2], token_texts=["\ufffd", "\ufffd"], text="月", usage={"completion_tokens": 2})
    short = ResultRow(token_ids=[1], token_texts=["a"], text="a", usage={"completion_tokens": 3})
    assert "tool calls" in (stream_text_unmeasurable(tool) or "")
    assert "split" in (stream_text_unmeasurable(split) or "")
    assert "every token id" in (stream_text_unmeasurable(short) or "")
    assert stream_text_mismatch(ResultRow(token_ids=[1, 2], token_texts=["ab", "cd"], text="abXd")) == 2


def test_tool_call_deltas_reassembled_wrong_fail_against_the_nonstreamed_calls(store: Store) -> None:
    """Issue 15 item 6: tool-call deltas must reassemble to the non-streamed calls (names and arguments as data).

    Covered by ``token_diff:nonstream`` (the same ids must read as the same calls); this pins it.
    """
    sid, arms, pids = session(store, [Probe("t", "tool_call", messages=[{"role": "user", "content": "w"}])],
                              ["base", "mtp2"])
    good = [{"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]
    spaced = [{"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}]
    lost = [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Olo"}'}}]
    for name, streamed in (("base", spaced), ("mtp2", lost)):
        result(store, arms[name], pids["t"], "stream", IDS, TEXTS, text="", tool_calls=streamed, finish="tool_calls")
        result(store, arms[name], pids["t"], "nonstream", IDS, TEXTS, text="", tool_calls=good, finish="tool_calls")
    judge_session(store, sid)
    got = {(a.name, v.gate): v.verdict for a in store.arms(sid) for v in store.verdicts(a.id)}
    assert got[("base", "token_diff:nonstream")] == "PASS"  # the same JSON spaced differently is the same call
    assert got[("mtp2", "token_diff:nonstream")] == "FAIL"
    assert got[("mtp2", "token_diff:stream_text")] == "SKIP"
