"""Issue 48 item 1 on the real engine: a gateway's request log run as the suite of a session.

One session, ``compare --arms base,mtp1 --suite gateway.jsonl --no-diffs --timing sequential``
on vLLM's CPU build and the bundled model, run once for the module (about
two and a half minutes on two idle cores): the log holds OpenAI bodies in
the forms a gateway writes (bare, wrapped in ``body`` and ``request``, a
Batch API line, a completions body), a sampled request, an e-mail address
and a key in a prompt, a retry logged twice and three bad records. The
session must say which format it read and name each bad record in one
line, run every good record on both arms, send the sampled request
greedily and the stop string as logged, store the prompt masked, and pass
(the speed verdict aside: tests/support/sessions.py `passed_but_for_speed`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.engine import requires_engine
from tests.support.sessions import passed_but_for_speed

pytestmark = requires_engine

EMAIL, KEY = "ops@example.com", "sk-proj-4f9c2e7a1b3d5f6e8a9c0b1d"
GOOD = [
    {"model": "m", "messages": [{"role": "user", "content": "Count from 4 to 15."}], "temperature": 0.8, "top_p": 0.9,
     "max_tokens": 48, "stream": True, "stream_options": {"include_usage": True}},
    {"ts": "2026-12-01T10:00:00Z", "body": {"model": "m", "messages": [
        {"role": "system", "content": f"Reply to {EMAIL}; key {KEY}"},
        {"role": "user", "content": "Repeat the word river 4 times."}], "max_completion_tokens": 24}},
    {"custom_id": "weather-oslo", "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": "m", "messages": [{"role": "user", "content": "What is the weather in Oslo in celsius?"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "required": ["city"], "properties": {"city": {"type": "string"},
                                                                   "unit": {"type": "string"}}}}}],
        "tool_choice": "auto", "max_tokens": 48}},
    {"request": {"messages": [{"role": "user", "content": "List the prime numbers below 30."}], "max_tokens": 64,
                 "stop": ["\n\n"], "presence_penalty": 0.0}, "response": {"choices": []}},
    {"model": "m", "prompt": "Count from 40 to 52.", "max_tokens": 48, "logprobs": 5},
    {"messages": [{"role": "user", "content": "请用两句话介绍一下火车。"}], "max_tokens": 64},
    {"messages": [{"role": "user", "content": "Write two sentences about coffee."}], "max_tokens": 64},
]
BAD = ['{"messages": [{"role": "user", "content": "red \\u001b[31m text"}]}',  # line 9: a terminal escape
       '{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',  # line 10
       "not json at all"]  # line 11
NAMES = ["log-1", "log-2", "weather-oslo", "log-4", "log-5", "log-6", "log-7"]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("engine-suites")
    log = d / "log.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in GOOD] + [json.dumps(GOOD[0])] + BAD  # line 8: the retry
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = d / "runs.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "base,mtp1", "--suite", str(log), "--no-diffs", "--db", str(db),
                                 "--timing", "sequential",  # one engine at a time: what is tested is the suite
                                 "--log-dir", str(d / "logs"), "--quiet"], catch_exceptions=False)
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    return {"exit": r.exit_code, "output": r.output, "db": db, "show": json.loads(shown.output)}


def test_the_session_passes_on_every_good_record(session: dict[str, Any]) -> None:
    assert passed_but_for_speed(session["exit"], session["db"]), session["output"]
    show = session["show"]
    assert [p["name"] for p in show["probes"]] == NAMES
    for arm in show["arms"]:
        assert arm["status"] == "ok" and [r["probe"] for r in arm["results"]] == NAMES
        assert all(r["ok"] and r["token_ids"] for r in arm["results"]), arm["name"]


def test_it_says_what_it_read_and_names_each_bad_record(session: dict[str, Any]) -> None:
    out = session["output"]
    head = [x for x in out.splitlines() if x.startswith("suite: ")]
    assert len(head) == 1 and "read as openai" in head[0] and "7 probe(s) from 11 record(s)" in head[0]
    for line, why in ((8, "the same request as"), (9, "a control character U+001B"), (10, "holds NaN"),
                      (11, "not JSON")):
        assert sum(f"log.jsonl:{line}: {why}" in x for x in out.splitlines()) == 1, (line, out)
    assert "\x1b" not in out and "Traceback" not in out


def test_sampled_requests_go_greedy_and_logged_stops_are_sent(session: dict[str, Any]) -> None:
    results = {r["probe"]: r for r in session["show"]["arms"][0]["results"]}
    sampled = results["log-1"]["params"]
    assert sampled["temperature"] == 0.0 and "top_p" not in sampled  # greedy is the reference
    assert results["log-4"]["params"]["stop"] == ["\n\n"]
    assert results["log-5"]["prompt"] == "Count from 40 to 52."  # a completions body stays a completion


def test_the_prompt_is_stored_masked(session: dict[str, Any]) -> None:
    prompt = {r["probe"]: r for r in session["show"]["arms"][0]["results"]}["log-2"]["prompt"]
    assert prompt[0]["content"] == "Reply to ***; key ***"
    raw = Path(session["db"]).read_bytes()
    assert EMAIL.encode() not in raw and KEY.encode() not in raw
