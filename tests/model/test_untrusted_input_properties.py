"""Property-based tests of every parser of untrusted input (issue 7 point 3).

Prometheus text, `token_id:N` strings, tool-call arguments, probe files, arm
files: each either parses or raises the project's own error, never anything
else. Server output with lone surrogates, NUL or 10 MB is stored whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observatory.client.answer import MAX_TOKEN_ID, parse_token_id
from observatory.engines.arm_engines import load_arms_file
from observatory.engines.metrics import SpecCounters, parse_spec_counters
from observatory.model.errors import ArmError, ObservatoryError, ProbeFileError
from observatory.model.gates import Output, default_registry
from observatory.model.previews import PREVIEW_CHARS
from observatory.model.probes import Probe, load_probe_file
from observatory.report.data import build
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store, storable

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(st.text())
def test_prometheus_parser_never_crashes(text: str) -> None:
    try:
        parse_spec_counters(text)
    except ObservatoryError:
        pass


@FAST
@given(
    st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**9),
    st.lists(st.integers(0, 10**6), min_size=1, max_size=6),
)
def test_prometheus_counters_round_trip(drafts: int, tokens: int, accepted: int, per_pos: list[int]) -> None:
    lines = [
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}.0',
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {tokens}.0',
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}.0',
    ]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} {v}.0'
              for i, v in enumerate(per_pos)]
    assert parse_spec_counters("\n".join(lines) + "\n") == SpecCounters(drafts, tokens, accepted, per_pos)


@FAST
@given(st.integers(0, 2**40))
def test_token_id_round_trip(n: int) -> None:
    """Every id a 32-bit column stores reads back; a larger one is refused (a malformed answer), never stored."""
    if n <= MAX_TOKEN_ID:
        assert parse_token_id(f"token_id:{n}") == n
    else:
        with pytest.raises(ObservatoryError, match="out of range"):
            parse_token_id(f"token_id:{n}")


@FAST
@given(st.text())
def test_token_id_garbage_is_a_clear_error(s: str) -> None:
    try:
        n = parse_token_id(s)
    except ObservatoryError as e:
        assert "token_id" in str(e)
    else:
        assert s == f"token_id:{n}" or s.startswith("token_id:")


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}]


@FAST
@given(st.text(), st.sampled_from(["get_weather", "nope", ""]))
def test_tool_call_arguments_never_crash_the_gate(arguments: str, name: str) -> None:
    probe = Probe(name="t", category="tool_call", messages=[{"role": "user", "content": "w"}], tools=TOOLS,
                  expect={"tool_names": ["get_weather"], "tool_count": 1})
    out = Output(text="", tool_calls=[{"id": "1", "type": "function", "function": {"name": name, "arguments": arguments}}],
                 finish_reason="tool_calls", content=None)
    res = default_registry().get("tool_calls").check(out, probe)
    assert res.verdict in ("PASS", "FAIL")
    if name != "get_weather":
        assert res.verdict == "FAIL"


_toml_value = st.one_of(
    st.integers(-5, 100000).map(str), st.text(max_size=20).map(lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'),
    st.sampled_from(['["content"]', "[]", "true", '{ role = "user", content = "x" }', '[{ role = "user", content = "x" }]']),
)
_probe_keys = st.sampled_from(["name", "category", "messages", "prompt", "max_tokens", "gates", "tools",
                               "tool_choice", "expect", "temperature", "suite"])


@FAST
@given(st.lists(st.tuples(_probe_keys, _toml_value), max_size=8), st.text(max_size=40))
def test_probe_files_parse_or_fail_cleanly(tmp_path: Path, pairs: list[tuple[str, str]], junk: str) -> None:
    body = "[[probe]]\n" + "\n".join(f"{k} = {v}" for k, v in dict(pairs).items())
    for text in (body, junk):
        f = tmp_path / "p.toml"
        f.write_bytes(text.encode("utf-8", "replace"))
        try:
            probes = load_probe_file(f)
        except ProbeFileError as e:
            assert str(f) in str(e)
        else:
            assert all(isinstance(p, Probe) for p in probes)


_arm_keys = st.sampled_from(["speculative_config", "engine_args", "env", "fault", "url", "flags"])
_arm_values = st.one_of(
    _toml_value, st.sampled_from(['{ method = "mtp", num_speculative_tokens = 2 }', '{ method = "mtp", num_speculative_tokens = 0 }',
                                  '"ghost"', '"http://127.0.0.1:1"', '{ A = "1" }', '["--x"]']),
)


@FAST
@given(st.lists(st.tuples(_arm_keys, _arm_values), max_size=6))
def test_arm_files_parse_or_fail_cleanly(tmp_path: Path, pairs: list[tuple[str, str]]) -> None:
    f = tmp_path / "a.toml"
    f.write_text("[arms.x]\n" + "\n".join(f"{k} = {v}" for k, v in dict(pairs).items()), encoding="utf-8")
    try:
        arms = load_arms_file(f)
    except ArmError as e:
        assert str(f) in str(e)
    else:
        assert set(arms) == {"x"}


@FAST
@given(st.text(alphabet=st.characters(blacklist_categories=()), max_size=200))
def test_storable_keeps_everything_recoverable(text: str) -> None:
    clean = storable(text)
    clean.encode("utf-8")  # never raises
    assert "\x00" not in clean and len(clean) == len(text)


def _store_one(store: Store, text: str) -> int:
    s = store.add(SessionRow(host="h", machine={}, command=[], options={}, suite="s"))
    a = store.add(ArmRow(session_id=s.id, position=0, name="base", launch={}, status="ok"))
    p = store.add(ProbeRow(session_id=s.id, position=0, name="p", category="prose_en", content_hash="x",
                           definition=Probe(name="p", category="prose_en", prompt="x").to_dict(), params={}))
    clean = storable(text)
    store.add(ResultRow(arm_id=a.id, probe_id=p.id, text=clean, content=clean,
                        text_raw=[ord(c) for c in text] if clean != text else None, finish_reason="stop"))
    return int(s.id)


@pytest.mark.parametrize(
    "text",
    ["lone \ud800 surrogate and \udfff", "nul \x00 inside", "invalid utf-8 decoded: \ufffd\ufffd", "x" * 10_000_000],
    ids=["surrogates", "nul", "replacement", "ten-megabytes"],
)
def test_hostile_outputs_are_stored_whole_and_shown_truncated(tmp_path: Path, text: str) -> None:
    store = Store(str(tmp_path / "s.db"))
    sid = _store_one(store, text)
    (r,) = store.results(store.arms(sid)[0].id)
    exact = "".join(map(chr, r.text_raw)) if r.text_raw is not None else r.text
    assert exact == text
    data = build(store, sid)
    assert len(data.arms[0].results[0].preview) <= PREVIEW_CHARS
