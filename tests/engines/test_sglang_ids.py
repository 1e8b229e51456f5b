"""SGLang token ids through the real client (issue 17 item 5): ``return_token_ids`` and ``choices[].token_ids``.

No SGLang runs here (no CPU build). The answers are reconstructed from SGLang's
source (tests/fixtures/engines/sglang_token_ids_reconstructed.json; layouts per
SOURCES.md, values made up) and served by the hand-made STUB of tests/support/sse_stub.py,
so the client's own request, wire reading and parsing run unchanged.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from observatory.client.answer import Response
from observatory.client.send import EngineClient, request_params, timed_params
from observatory.model.gates import FAIL, Output, default_registry
from observatory.model.probes import Probe
from tests.support.paths import FIXTURES
from tests.support.sse_stub import SseStub, chunked, sse, whole

FIXTURE = json.loads((FIXTURES / "engines/sglang_token_ids_reconstructed.json").read_text())
CHAT = Probe(name="c", category="prose_en", messages=[{"role": "user", "content": "Capital of France?"}],
             max_tokens=4)
TEXT = Probe(name="t", category="prose_en", prompt="Once", max_tokens=4)


def _serve(body: Any, streamed: bool) -> Any:
    """A stub script answering BODY whole, or the list of chunks BODY as an SSE stream."""
    return lambda req: chunked([sse(body)]) if streamed else whole(json.dumps(body).encode())


def _run(probe: Probe, path: str, body: Any, streamed: bool, stream: bool = True) -> tuple[Response, dict[str, Any]]:
    """PROBE sent once by an SGLang client to a stub serving BODY; the response and the request sent."""
    with SseStub({path: _serve(body, streamed)}) as stub:
        client = EngineClient(stub.url, timeout=10, engine="sglang")
        r = client.run(probe, stream=stream)
        client.close()
    assert len(stub.posts) == 1
    return r, stub.posts[0][1]


def _diff_at_first_token(base: Response) -> Any:
    """The token diff of a spec output that differs from BASE at its first token (BASE is the reference)."""
    compare = default_registry().get("token_diff").check.__globals__["compare_outputs"]
    ref = Output(text=base.text, token_ids=base.token_ids, top_logprobs=base.top_logprobs,
                 token_texts=base.token_texts)
    return compare(Output(text="x", token_ids=[base.token_ids[1]] + base.token_ids[1:]), ref)


def test_request_asks_sglang_for_its_ids_and_leaves_vllm_alone() -> None:
    """Issue 17 item 5: SGLang takes return_token_ids (protocol.py), not vLLM's return_tokens_as_token_ids;
    a chat (sent whole) asks for return_meta_info too, where SGLang 0.5.14 puts a chat's ids."""
    for probe, flags in ((CHAT, {"return_token_ids": True, "return_meta_info": True}),
                         (TEXT, {"return_token_ids": True})):
        vllm, sg = request_params(probe), request_params(probe, "sglang")
        assert vllm["extra_body"] == {"return_tokens_as_token_ids": True}
        assert sg["extra_body"] == flags
        assert {k: v for k, v in sg.items() if k != "extra_body"} == {k: v for k, v in vllm.items()
                                                                       if k != "extra_body"}
        assert request_params(probe, "llama.cpp") == vllm
        assert "extra_body" not in timed_params(probe)  # a timed pass asks for no ids on any engine


def test_chat_goes_whole_with_ids_texts_and_margins_not_measurable() -> None:
    """Issue 17 item 5: against SGLang every correctness pass failed with "Expected a token like
    'token_id:123'". Chat ids come whole (serving_chat.py refuses return_token_ids when streamed)."""
    body = FIXTURE["chat_whole"]
    r, sent = _run(CHAT, "/v1/chat/completions", body, streamed=False)
    assert r.ok, r.error
    assert sent["return_token_ids"] is True and "return_tokens_as_token_ids" not in sent
    assert not sent.get("stream")  # asked to stream, sent whole: SGLang's chat stream refuses the flag
    choice = body["choices"][0]
    assert r.token_ids == choice["token_ids"] == [785, 6722, 374, 12095]
    assert r.token_texts == [e["token"] for e in choice["logprobs"]["content"]] == ["The", " capital", " is", " Paris"]
    assert "".join(r.token_texts) == r.text == "The capital is Paris"
    assert r.top_logprobs == [[], [], [], []]  # alternatives come by text only: no ids, nothing invented
    assert r.ttft_ms is None and r.chunks == []  # not streamed: not measured
    assert r.completion_tokens == 4
    diff = _diff_at_first_token(r)
    assert diff.verdict == FAIL and diff.details["margin"] is None
    assert "margin unknown" in diff.reason


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_completion_ids_whole_and_streamed(streamed: bool) -> None:
    """Issue 17 item 5: completions carry token_ids whole and per streamed chunk (the ids new since
    the previous chunk, serving_completions.py); texts from logprobs.tokens, margins not measurable."""
    body = FIXTURE["completion_stream" if streamed else "completion_whole"]
    r, sent = _run(TEXT, "/v1/completions", body, streamed=streamed, stream=streamed)
    assert r.ok, r.error
    assert sent["return_token_ids"] is True and "return_tokens_as_token_ids" not in sent
    assert bool(sent.get("stream")) is streamed
    assert r.token_ids == FIXTURE["completion_whole"]["choices"][0]["token_ids"] == [5193, 264, 882, 11]
    assert r.token_texts == [" upon", " a", " time", ","] and r.text == " upon a time,"
    assert r.top_logprobs == [[], [], [], []]
    assert r.finish_reason == "length" and r.completion_tokens == 4
    if streamed:
        assert [n for _, n in r.chunks] == [1, 2, 1]  # as the chunks carried them
        assert r.ttft_ms is not None
    diff = _diff_at_first_token(r)
    assert diff.details["margin"] is None and "margin unknown" in diff.reason


def _without_ids(body: Any) -> Any:
    """BODY as a server that ignored return_token_ids answers it: no token_ids, no prompt_token_ids."""
    body = copy.deepcopy(body)
    for obj in body if isinstance(body, list) else [body]:
        for choice in obj["choices"]:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
    return body


@pytest.mark.parametrize(
    "probe, path, key, streamed",
    [(CHAT, "/v1/chat/completions", "chat_whole", False),
     (TEXT, "/v1/completions", "completion_whole", False),
     (TEXT, "/v1/completions", "completion_stream", True)],
    ids=["chat", "completion-whole", "completion-streamed"],
)
def test_answer_without_token_ids_is_not_reported_naming_the_flag(probe: Probe, path: str, key: str,
                                                                  streamed: bool) -> None:
    """Negative control: an SGLang that ignores return_token_ids answers without choices[].token_ids;
    that is a failure naming the flag ("not reported by this engine", tests/channels/test_not_reported.py), not a
    crash and not an empty sequence judged."""
    r, _ = _run(probe, path, _without_ids(FIXTURE[key]), streamed=streamed, stream=streamed)
    assert not r.ok and r.error_kind == "not_reported"
    assert "return_token_ids" in (r.error or "") and "\n" not in (r.error or "")
    assert r.token_ids == []


@pytest.mark.parametrize("bad", [[1, -2], [1, "2"], "12", [True]], ids=["negative", "text", "string", "bool"])
def test_bad_token_ids_are_malformed(bad: Any) -> None:
    """SGLang's token_ids are List[int] (protocol.py); anything else is malformed, never read as ids."""
    body = copy.deepcopy(FIXTURE["completion_whole"])
    body["choices"][0]["token_ids"] = bad
    r, _ = _run(TEXT, "/v1/completions", body, streamed=False, stream=False)
    assert not r.ok and r.error_kind == "malformed" and "token_ids" in (r.error or "")


def test_texts_that_do_not_count_as_the_ids_are_unknown() -> None:
    """Texts are taken from logprobs only where they count as many as the ids; else none (not detokenised)."""
    body = copy.deepcopy(FIXTURE["completion_stream"])
    lp = body[1]["choices"][0]["logprobs"]
    for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        lp[k] = lp[k][:1]  # the chunk carrying 2 ids has 1 logprob entry
    with SseStub({"/v1/completions": _serve(body, True)}) as stub:
        client = EngineClient(stub.url, timeout=10, engine="sglang")
        r = client.run(TEXT, stream=True)
        client.close()
    assert r.ok and r.token_ids == [5193, 264, 882, 11]
    assert r.token_texts == []
    assert [p for p, _ in stub.posts] == ["/v1/completions"]  # no /detokenize guessed


def test_an_sglang_url_arm_reaches_the_sglang_path(tmp_path: Path) -> None:
    """Issue 17 item 5: `--engine sglang` URL arms get SGLang's client; the probes' stored params are what
    was sent (return_token_ids), and the stored results carry the ids with empty top-k (margins not measurable)."""
    from click.testing import CliRunner

    from observatory.cli import cli
    from observatory.store.session_store import Store
    from tests.support.stub_server import StubServer
    from tests.support.stub_sessions import tiny_suite

    db = tmp_path / "s.db"
    with StubServer("ok", token=5) as base:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={base.url}", "--engine", "sglang",
                                     "--suite", tiny_suite(tmp_path), "--db", str(db), "--no-diffs", "--quiet"])
    assert r.exit_code == 0, r.output
    store = Store(str(db))
    sid = store.sessions()[0].id
    probes = store.probes(sid)
    assert probes and all(p.params["extra_body"] == {"return_token_ids": True, "return_meta_info": True}
                          if p.definition["messages"] is not None else p.params["extra_body"] == {"return_token_ids": True}
                          for p in probes)
    arm = store.arms(sid)[0]
    assert arm.launch["engine"] == "sglang"
    stream = store.results(arm.id, "stream")
    assert stream and all(x.ok and x.token_ids == [5] and x.top_logprobs == [[]] and x.ttft_ms is None
                          for x in stream)
    store.close()


def test_an_sglang_answer_read_as_vllm_says_which_engine_to_name() -> None:
    """Issue 17 item 5: an SGLang URL arm run without --engine sglang failed with a hint naming vLLM only;
    the one-line error now says to pass --engine sglang."""
    with SseStub({"/v1/completions": _serve(FIXTURE["completion_stream"], True)}) as stub:
        client = EngineClient(stub.url, timeout=10)  # vLLM, the default
        r = client.run(TEXT, stream=True)
        client.close()
    assert not r.ok and r.error_kind == "malformed"
    assert "--engine sglang" in (r.error or "") and "\n" not in (r.error or "")
