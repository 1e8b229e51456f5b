"""Issue 48 item 1: your requests as probes. Suites from request logs and datasets, read record by record.

The fixtures under tests/fixtures/suites are written here by hand, one per
format, as a gateway, vLLM's benchmark and AIPerf lay them out (the fields
from vLLM's benchmarks/datasets.py and AIPerf's dataset loader models); the
hostile records are made in the tests. Every bad record must be one line
naming it (FILE:LINE) while the rest load; the same seed must give the same
sample; what is imported is masked. The real-engine session over an imported
suite is tests/real_engine/test_engine_suites.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from observatory.cli import cli
from observatory.client.send import request_params
from observatory.model.errors import ProbeFileError
from observatory.model.probes import load_probe_file, resolve_suite
from observatory.model.suites import Limits, read_suite
from observatory.model.suites.importer import import_logs
from observatory.model.suites.write import suite_jsonl, suite_toml
from tests.support import paths

FIXTURES = paths.FIXTURES / "suites"
SUITES = {"gateway.jsonl": ("openai", 7), "sharegpt.json": ("sharegpt", 3), "vllm_custom.jsonl": ("vllm-custom", 3),
          "spec_bench.jsonl": ("spec-bench", 2), "aiperf_single_turn.jsonl": ("aiperf-single-turn", 3),
          "aiperf_multi_turn.jsonl": ("aiperf-multi-turn", 2), "aiperf_mooncake.jsonl": ("aiperf-mooncake", 3)}


def _by_name(path: Path, **kw: object) -> dict[str, object]:
    return {p.name: p for p in read_suite(path, **kw).probes}  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(SUITES))
def test_each_format_is_detected_and_said(name: str) -> None:
    fmt, count = SUITES[name]
    read = read_suite(FIXTURES / name)
    assert (read.format, len(read.probes)) == (fmt, count), read.headline()
    assert f"read as {fmt}" in read.headline() and "detected from" in read.headline()
    for p in read.probes:  # whatever loads passes the suite schema: it could have been written as TOML
        assert p.source.startswith(str(FIXTURES / name)) and p.gates


def test_openai_bodies_keep_every_field_in_its_place() -> None:
    """Sampling fields are kept, never sent; output-shaping fields are sent; tools, tool turns and parts stay."""
    got = _by_name(FIXTURES / "gateway.jsonl")
    first = got["gateway-1"]
    assert first.original == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 48, "stream": True,  # type: ignore[attr-defined]
                               "stream_options": {"include_usage": True}}
    assert first.sampling == {} and first.max_tokens == 48 and first.greedy  # type: ignore[attr-defined]
    sent = request_params(first)  # type: ignore[arg-type]
    assert sent["temperature"] == 0.0 and "top_p" not in sent  # greedy is the reference
    primes = got["gateway-3"]
    assert primes.sampling == {"stop": ["\n\n"], "presence_penalty": 0.0}  # type: ignore[attr-defined]
    assert request_params(primes)["stop"] == ["\n\n"]  # type: ignore[arg-type]
    assert primes.messages == [{"role": "user", "content": [{"type": "text", "text": "List the prime numbers below 30."}]}]  # type: ignore[attr-defined]
    oslo = got["weather-oslo"]  # a Batch API line: named by its custom_id
    assert oslo.category == "tool_call" and oslo.tools[0]["function"]["name"] == "get_weather"  # type: ignore[attr-defined]
    assert oslo.tool_choice == "auto"  # type: ignore[attr-defined]
    turns = got["gateway-5"].messages  # type: ignore[attr-defined]
    assert [m["role"] for m in turns] == ["user", "assistant", "tool", "user"]
    assert "content" not in turns[1] and turns[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Rome"}'
    completion = got["gateway-6"]
    assert completion.kind == "completion" and completion.original["n"] == 2 and completion.original["logprobs"] == 5  # type: ignore[attr-defined]
    assert got["gateway-7"].category == "prose_zh"  # type: ignore[attr-defined]


def test_an_email_and_a_key_in_a_prompt_are_masked() -> None:
    """The same rules as everything stored, plus the shapes only traffic carries (redact_traffic)."""
    masked = _by_name(FIXTURES / "gateway.jsonl")["gateway-2"].messages[0]["content"]  # type: ignore[attr-defined]
    assert masked == "Reply to ***; key ***"
    raw = (FIXTURES / "gateway.jsonl").read_text()
    assert "ops@example.com" in raw and "sk-proj-4f9c2e7a1b3d5f6e8a9c0b1d" in raw  # the control: the log holds them


def test_dataset_formats_become_the_requests_their_tools_send() -> None:
    sg = _by_name(FIXTURES / "sharegpt.json")["sg-2"].messages  # type: ignore[attr-defined]
    assert [m["role"] for m in sg] == ["system", "user", "assistant", "user"]  # up to the last human turn
    assert sg[-1]["content"] == "List the prime numbers below 25."
    vllm_first = _by_name(FIXTURES / "sharegpt.json", fmt="vllm-sharegpt")["sg-2"].messages  # type: ignore[attr-defined]
    assert vllm_first == [{"role": "user", "content": "You are a helpful assistant."}]  # vllm bench: turn 0 as is
    custom = _by_name(FIXTURES / "vllm_custom.jsonl")["vllm_custom-2"]
    assert custom.max_tokens == 24 and custom.messages == [{"role": "user", "content": "Repeat the word stone 5 times."}]  # type: ignore[attr-defined]
    bench = read_suite(FIXTURES / "spec_bench.jsonl")
    assert [p.name for p in bench.probes] == ["81", "82"] and "turn 2 is not sent" in bench.notes[0]
    single = _by_name(FIXTURES / "aiperf_single_turn.jsonl")
    assert single["aiperf_single_turn-2"].messages[0]["content"] == 'Say "cloud" 3 times.'  # type: ignore[attr-defined]
    zh = single["aiperf_single_turn-3"]
    assert zh.original == {"temperature": 0.6, "top_p": 0.9, "stop": ["。。"]} and zh.sampling == {"stop": ["。。"]}  # type: ignore[attr-defined]
    multi = read_suite(FIXTURES / "aiperf_multi_turn.jsonl")
    s2 = next(p for p in multi.probes if p.name == "s-2")
    assert [m["content"] for m in s2.messages or []] == ["Repeat the word tree 3 times.", "tree tree tree",
                                                         "Count from 30 to 38."]
    assert s2.max_tokens == 40 and "turn 4 is not kept" in multi.notes[0]
    moon = read_suite(FIXTURES / "aiperf_mooncake.jsonl")
    assert [d.kind for d in moon.dropped] == ["unsupported"] and "synthetic" in moon.dropped[0].why
    assert moon.dropped[0].where.endswith("aiperf_mooncake.jsonl:4")


HOSTILE = {  # line -> what makes it hostile; the kind of drop it must be
    2: (b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "hostile"),
    3: (b'{"messages": [{"role": "user", "content": "' + b"a" * (2 << 20) + b'"}]}', "oversized"),
    4: (b'{"messages": [{"role": "user", "content": "caf\xe9 \xff"}]}', "malformed"),
    5: (b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}', "malformed"),
    6: (b'{"messages": [{"role": "user", "content": "x"}], "temperature": 1e999}', "malformed"),
    7: (b'{"messages": [{"role": "user", "content": "red \\u001b[31m text"}]}', "hostile"),
    8: (b'{"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": '
        b'{"name": "evil\\u001b]0;pwned\\u0007"}}]}', "hostile"),
    9: (b'{"messages": [{"role": "user", "content": "nul \\u0000 here"}]}', "hostile"),
    10: (b'{"messages": [{"role": "user", "content": "half \\ud800"}]}', "hostile"),
    11: (b'{"messages": [{"role": "user", "content": "a"}], "messages": [{"role": "user", "content": "b"}]}',
         "malformed"),
    12: (b"this is not json", "malformed"),
    13: (b'{"messages": [{"role": "user", "content": "x"}], "seed": ' + b"9" * 100_000 + b"}", "malformed"),
    14: (b'{"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}', "unsupported"),
    15: (b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}',
         "unsupported"),
    16: (b'{"messages": "hello"}', "malformed"),
    17: (b'{"conversations": [{"from": "human", "value": "hi"}]}', "other-format"),
    18: (b'{"messages": [{"role": "wizard", "content": "x"}]}', "malformed"),
    19: (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -5}', "malformed"),
}
GOOD = (b'{"messages": [{"role": "user", "content": "Count from 1 to 9."}]}',
        b'{"custom_id": "\\u001b[2Jwiped\\u0007", "body": {"messages": [{"role": "user", "content": "Say hi."}]}}',
        b'{"prompt": "Count from 3 to 8.", "max_tokens": 32}')


def _hostile_log(tmp_path: Path) -> Path:
    lines = [GOOD[0], *(HOSTILE[i][0] for i in sorted(HOSTILE)), GOOD[1], GOOD[2]]
    f = tmp_path / "hostile.jsonl"
    f.write_bytes(b"\n".join(lines) + b"\n")
    return f


def test_each_hostile_record_is_one_line_and_the_rest_load(tmp_path: Path) -> None:
    f = _hostile_log(tmp_path)
    read = read_suite(f)
    assert read.format == "openai" and len(read.probes) == 3, read.headline()
    got = {int(d.where.rsplit(":", 1)[1]): d.kind for d in read.dropped}
    assert got == {line: kind for line, (_, kind) in HOSTILE.items()}, [d.line() for d in read.dropped]
    names = [p.name for p in read.probes]
    assert names[1] == "2Jwiped" and all("\x1b" not in n for n in names)  # an escape in an id: a safe name
    r = CliRunner().invoke(cli, ["suite", "check", str(f)])
    assert r.exit_code == 1, r.output  # a check fails on any record that does not load
    lines = r.output.strip().splitlines()
    assert len(lines) == 2 + len(HOSTILE) and "Traceback" not in r.output
    for line_no in HOSTILE:
        assert sum(f"hostile.jsonl:{line_no}: " in x for x in lines) == 1
    assert "\x1b" not in r.output and "\x00" not in r.output and "aaaaaaaaaa" not in r.output


def test_hostile_records_in_a_json_array_are_one_line_each(tmp_path: Path) -> None:
    """A ShareGPT file is one JSON array (vLLM's is 600 MB): its elements are found by a streaming scan, so a
    deep, oversized or broken element is dropped alone; a cut file keeps what came before the cut."""
    ok = {"id": "a", "conversations": [{"from": "human", "value": "Count from 1 to 4."}]}
    last = {"id": "z", "conversations": [{"from": "human", "value": "Count from 5 to 9."}]}
    deep = '{"conversations": ' + "[" * 5000 + "]" * 5000 + "}"
    big = json.dumps({"conversations": [{"from": "human", "value": "b" * (2 << 20)}]})
    text = "[" + ",".join([json.dumps(ok), deep, big, '{"conversations": [1,,2]}', json.dumps(last)]) + "]"
    f = tmp_path / "sharegpt.json"
    f.write_text(text)
    read = read_suite(f)
    assert [p.name for p in read.probes] == ["a", "z"]
    assert [(d.where.rsplit(" ", 1)[1], d.kind) for d in read.dropped] == [("2", "hostile"), ("3", "oversized"),
                                                                           ("4", "malformed")]
    f.write_text(text[: text.index('{"conversations": [1,,2]}')])  # cut mid-file
    read = read_suite(f)
    assert [p.name for p in read.probes] == ["a"] and "does not close" in read.notes[-1]
    f.write_text("[" + ",".join([json.dumps(ok), '{"conversations": [}', json.dumps(last)]) + "]")
    read = read_suite(f)  # a bracket closing what it did not open: nothing after it can be told apart, and said
    assert [p.name for p in read.probes] == ["a"] and read.dropped[0].kind == "malformed"
    assert "is broken at record 2" in read.notes[-1]


def test_the_bounds_hold(tmp_path: Path) -> None:
    """Records per file and bytes per record are bounded, and what the bound left unread is said."""
    f = tmp_path / "many.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"Count from {i} to {i + 3}.", "max_tokens": 8}) + "\n"
                         for i in range(50)))
    read = read_suite(f, limits=Limits(records=10))
    assert len(read.probes) == 10 and "stopped after line 10" in read.notes[0]
    f.write_text(json.dumps({"prompt": "Count from 1 to 4."}) + "\n" + json.dumps({"prompt": "x" * 100}) + "\n")
    read = read_suite(f, limits=Limits(record_bytes=60))
    assert len(read.probes) == 1 and [(d.where[-2:], d.kind) for d in read.dropped] == [(":2", "oversized")]


def test_a_file_that_is_no_suite_is_one_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "odd.jsonl"
    f.write_text('{"alpha": 1}\n{"beta": 2}\n')
    with pytest.raises(ProbeFileError, match="no record of a supported format"):
        read_suite(f)
    f.write_text('{"conversations": [{"from": "human", "value": "a"}]}\n{"text": "b"}\n')
    with pytest.raises(ProbeFileError, match="give --suite-format"):
        read_suite(f)  # a tie is never guessed
    f.write_text('{"messages": [1]}\n')
    with pytest.raises(ProbeFileError, match="no request loads .*the first: .*odd.jsonl:1"):
        read_suite(f)
    f.write_text('{"prompt": "Count from 1 to 3."}\n')
    assert read_suite(f).format == "vllm-custom"  # a bare prompt is vllm bench's custom format, and said
    assert read_suite(f, "openai").probes[0].kind == "completion"  # unless the user says it is a completion


def _records(n: int) -> str:
    return "".join(json.dumps({"messages": [{"role": "user", "content": f"Count from {i} to {i + 5}."}]}) + "\n"
                   for i in range(n))


def test_the_same_seed_gives_the_same_sample(tmp_path: Path) -> None:
    log = tmp_path / "big.jsonl"
    log.write_text(_records(300) + _records(40))  # 40 duplicates, kept once
    runs = {}
    for seed, out in ((3, "a.toml"), (3, "b.toml"), (4, "c.toml")):
        r = CliRunner().invoke(cli, ["suite", "import", str(log), "--out", str(tmp_path / out), "--sample", "25", "--name", "s",
                                     "--seed", str(seed), "--show", "0"])
        assert r.exit_code == 0, r.output
        assert "25 sampled of 300 distinct requests, seed" in r.output and "40 duplicate" in r.output
        runs[out] = (tmp_path / out).read_text()
    assert runs["a.toml"] == runs["b.toml"] and runs["a.toml"] != runs["c.toml"]
    lines = [int(x.rsplit(":", 1)[1]) for x in runs["a.toml"].splitlines() if x.startswith("# ")]
    assert len(lines) == 25 and lines == sorted(lines)  # the log's order kept


def test_import_deduplicates_across_files_and_names_each_drop(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(_records(5))
    b.write_text(_records(7))
    got = import_logs([a, b])
    assert got.loadable == 7 and len(got.probes) == 7
    assert next(d.line() for d in got.dropped) == f"{b}:1: the same request as {a}:1"


def test_a_written_suite_reads_back_as_the_same_probes(tmp_path: Path) -> None:
    """TOML written by `suite import` loads strictly and gives the probes the log gave; the JSONL form too.
    A value TOML cannot hold (a null in a tool schema) drops that probe from TOML, named, and JSONL keeps it."""
    probes = read_suite(FIXTURES / "gateway.jsonl").probes
    text, kept, dropped = suite_toml(probes, "rt", "round trip\nwith a newline")
    assert len(kept) == len(probes) and not dropped
    f = tmp_path / "rt.toml"
    f.write_text(text)
    again = load_probe_file(f)
    strip = [(p.name, p.category, p.messages, p.prompt, p.max_tokens, p.tools, p.tool_choice, p.sampling, p.original)
             for p in probes]
    assert [(p.name, p.category, p.messages, p.prompt, p.max_tokens, p.tools, p.tool_choice, p.sampling,
             p.original) for p in again] == strip
    j = tmp_path / "rt.jsonl"
    j.write_text(suite_jsonl(probes))
    back = read_suite(j).probes
    assert [(p.name, p.messages, p.prompt, p.max_tokens, p.tools, p.sampling) for p in back] == \
        [(p.name, p.messages, p.prompt, p.max_tokens, p.tools, p.sampling) for p in probes]
    with_null = tmp_path / "null.jsonl"
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "default": None}}}}}
    with_null.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": [tool]}) + "\n")
    _, kept, dropped = suite_toml(read_suite(with_null).probes, "n", "n")
    assert not kept and "null, which TOML cannot hold" in dropped[0].why and ".jsonl" in dropped[0].why


def test_tricky_strings_survive_the_toml_writer(tmp_path: Path) -> None:
    """Quotes, backslashes, triple quotes, tabs, CRLF, non-ASCII keys and a leading newline round-trip."""
    weird = '\n"""quoted""" \\back\\slash\ttab\r\nline 中文 \'single\' """'
    log = tmp_path / "w.jsonl"
    log.write_text(json.dumps({"messages": [{"role": "user", "content": weird}], "logit_bias": {"1 2": -1.5},
                               "stop": ["\t", '"""']}) + "\n")
    (p,) = read_suite(log).probes
    text, _, _ = suite_toml([p], "w", "w")
    (tmp_path / "w.toml").write_text(text)
    (q,) = load_probe_file(tmp_path / "w.toml")
    assert q.messages == p.messages and q.sampling == p.sampling


def test_generic_suite_is_what_an_unbundled_model_runs(tmp_path: Path) -> None:
    """Issue 48: `--model /models/m` without --suite ran the tiny model's ten toy prompts."""
    from observatory.session.options import SessionPlan
    from observatory.session.plan import FIELD, TINY, plan_suite

    generic = load_probe_file(resolve_suite("generic"))
    cats = {p.category for p in generic}
    assert {"recitation", "counting", "tool_call", "json", "code", "prose_en", "prose_zh"} <= cats
    assert all(set(p.expect) <= {"contains", "tool_names", "tool_count"} for p in generic)  # loose, never exact
    path, probes, notes = plan_suite(SessionPlan(arms="base"), None, "/models/m")
    assert path.stem == "generic" and [p.name for p in probes] == [p.name for p in generic]
    assert len(notes) == 1 and "/models/m is not a bundled model" in notes[0] and "generic" in notes[0]
    for bundled, stem in ((TINY, "default"), (FIELD, "field")):  # the control: a bundled model keeps its suite
        path, _, notes = plan_suite(SessionPlan(arms="base"), bundled, str(bundled.path))
        assert path.stem == stem and notes == []
    log = tmp_path / "t.jsonl"
    log.write_text(_records(2) + "garbage\n")
    path, probes, notes = plan_suite(SessionPlan(arms="base", suite=str(log)), None, "/models/m")
    assert len(probes) == 2 and "read as openai" in notes[0] and notes[1].endswith("t.jsonl:3: not JSON (Expecting "
                                                                                   "value: line 1 column 1 (char 0))")


def test_an_arms_file_may_name_the_suite(tmp_path: Path) -> None:
    from observatory.session.options import SessionPlan

    (tmp_path / "traffic.jsonl").write_text(_records(3))
    arms = tmp_path / "arms.toml"
    arms.write_text('suite = "traffic.jsonl"\nsuite_format = "openai"\n[arms.mine]\n'
                    'speculative_config = { method = "mtp", num_speculative_tokens = 1 }\n')
    plan = SessionPlan.from_options({"arms": "base,mine", "arms_file": str(arms)})
    assert plan.suite == str(tmp_path / "traffic.jsonl") and plan.suite_format == "openai"
    plan = SessionPlan.from_options({"arms": "base,mine", "arms_file": str(arms), "suite": "default"})
    assert plan.suite == "default" and plan.suite_format is None  # --suite wins, with its own format


def test_import_refuses_what_it_cannot_do_in_one_line(tmp_path: Path) -> None:
    for args, said in ((["--out", str(tmp_path / "x.txt")], "name a .toml suite"),
                       (["--out", str(tmp_path / "no" / "x.toml")], "does not exist"),
                       (["--out", str(tmp_path / "x.toml"), "--sample", "0"], "--sample 0: give 1 to")):
        r = CliRunner().invoke(cli, ["suite", "import", str(FIXTURES / "gateway.jsonl"), *args])
        assert r.exit_code == 3 and said in r.output and len(r.output.strip().splitlines()) == 1, r.output
    r = CliRunner().invoke(cli, ["suite", "import", str(resolve_suite("default")), "--out", str(tmp_path / "x.toml")])
    assert r.exit_code == 3 and "a TOML suite already" in r.output


def test_masking_is_linear_on_hostile_text() -> None:
    """A megabyte of key-like or address-like text is masked by one scan, never a backtracking regex."""
    import time

    from observatory.model.redact import redact_traffic

    for text in ("sk-" * 300_000, "eyJ" * 300_000, "a@" * 300_000, "api_key= " * 100_000, "@" * 500_000):
        t = time.perf_counter()
        redact_traffic(text)
        assert time.perf_counter() - t < 5, text[:10]
    rng = random.Random(0)
    text = "".join(rng.choice("ab@.-_ :=\n") for _ in range(200_000))
    t = time.perf_counter()
    redact_traffic(text)
    assert time.perf_counter() - t < 5


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                         st.sampled_from(["messages", "prompt", "role", "content", "tools", "body", "request",
                                          "custom_id", "conversations", "from", "value", "turns", "text", "texts",
                                          "text_input", "payload", "max_tokens", "temperature", "stop", "type",
                                          "function", "name", "tool_calls", "x"]), inner, max_size=5),
                     max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_JSON, min_size=1, max_size=6), st.sampled_from([None, "openai", "sharegpt", "aiperf-multi-turn"]))
def test_any_json_lines_load_or_fail_in_one_line(tmp_path: Path, records: list[object], fmt: str | None) -> None:
    """Whatever JSON a log holds, reading it gives probes and named drops, or one ProbeFileError: never a crash.
    Every record read is a probe or a named drop; a file whose first record is a list starts with ``[`` and is
    read as one JSON array (its elements are the records), so only otherwise is a record a line."""
    f = tmp_path / "fuzz.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records))
    try:
        read = read_suite(f, fmt)
    except ProbeFileError as e:
        assert str(f) in str(e) and "\n" not in str(e)
    else:
        assert len(read.probes) + len(read.dropped) == read.records
        if not isinstance(records[0], list):
            assert read.records == len(records)
        assert all(d.where.startswith(f"{f}:") and "\n" not in d.why for d in read.dropped)
