"""Launched SGLang arms (issue 31 item 2): presets, command lines, and SGLang 0.5.14's answers read.

The answers are real (tests/fixtures/engines/SOURCES.md): SGLang 0.5.14 on the H200 has no
``return_token_ids``; a whole chat completion's ``meta_info`` carries the ids, the top-k with ids
and the request's speculative counters (observatory.engines.sglang_ids)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from observatory.client.answer import Response, take_whole
from observatory.client.send import request_params, timed_params
from observatory.engines.arm_engines import parse_arms
from observatory.engines.server import engine_argv
from observatory.engines.settings import EngineSettings
from observatory.engines.sglang import ARGS_ENV, SGLangAdapter
from observatory.engines.sglang_ids import take_ids
from observatory.model.errors import ArmError, ObservatoryError
from observatory.model.probes import Probe
from tests.support import paths

FIXTURES = paths.FIXTURES / "engines"


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def settings(**kw: Any) -> EngineSettings:
    return EngineSettings(model="observatory/default_model", python="python3", dtype="float32",
                          max_model_len=1024, seed=0, tool_parser="hermes", **kw)


def test_sglang_presets_parse_with_their_prefix_and_unknown_names_are_refused() -> None:
    base, mtp2, url = parse_arms("sglang:base,sglang:mtp2,sglang:mtp1=http://10.0.0.5:30000")
    assert (base.name, base.engine, base.speculative_config) == ("sglang:base", "sglang", None)
    assert (mtp2.name, mtp2.speculative_config) == ("sglang:mtp2", {"method": "mtp", "num_speculative_tokens": 2})
    assert url.url == "http://10.0.0.5:30000" and url.engine == "sglang"
    for bad, said in (("sglang:draft2", "Unknown sglang arm 'draft2'"), ("sglang:mtp2+fault=ghost", "takes neither"),
                      ("sglang:mtp0", "Unknown sglang arm")):
        with pytest.raises(ArmError, match=said):
            parse_arms(bad)


def test_the_command_lines_are_sglangs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARGS_ENV, "--attention-backend triton --mem-fraction-static 0.3")
    base, mtp2 = parse_arms("sglang:base,sglang:mtp2")
    argv = engine_argv(base, settings(extra_args=["--enforce-eager"]), 30000)
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert "--enforce-eager" not in argv, "the session's --engine-arg flags are vLLM's"
    flags = " ".join(argv)
    for want in ("--model-path observatory/default_model", "--port 30000", "--random-seed 0", "--enable-metrics",
                 "--dtype float32", "--context-length 1024", "--tool-call-parser hermes",
                 "--attention-backend triton --mem-fraction-static 0.3"):
        assert want in flags, (want, argv)
    assert "--speculative" not in flags
    spec = " ".join(engine_argv(mtp2, settings(spec_extra={"attention_backend": "TRITON_ATTN"}), 30000))
    assert ("--speculative-algorithm EAGLE --speculative-draft-model-path observatory/default_model "
            "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3") in spec
    assert "TRITON_ATTN" not in spec, "the session's --spec-extra is vLLM's"
    off = engine_argv(base, settings(prefix_caching=False), 30000)
    assert "--disable-radix-cache" in off and "--disable-radix-cache" not in argv
    monkeypatch.setenv(ARGS_ENV, "--attention-backend 'triton")
    with pytest.raises(ObservatoryError, match=ARGS_ENV):
        engine_argv(base, settings(), 30000)


def test_a_chat_correctness_pass_asks_for_meta_info_and_a_timed_pass_does_not() -> None:
    chat = Probe(name="c", category="x", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    extra = request_params(chat, "sglang")["extra_body"]
    assert extra == {"return_token_ids": True, "return_meta_info": True}
    assert "return_meta_info" not in json.dumps(timed_params(chat)), "refused on a stream"
    assert "return_tokens_as_token_ids" in json.dumps(request_params(chat, "vllm"))


def test_ids_topk_and_counters_come_from_the_meta_info_of_sglang_0_5_14() -> None:
    base, spec = load("sglang_0.5.14_chat_meta_base.json"), load("sglang_0.5.14_chat_meta_mtp2.json")
    outs = []
    for body in (base, spec):
        out = Response()
        take_whole(out, body, True, take_ids)
        outs.append(out)
        meta = body["choices"][0]["meta_info"]
        assert out.token_ids == [e[1] for e in meta["output_token_logprobs"]]
        assert len(out.token_ids) == body["usage"]["completion_tokens"] == len(out.logprobs) == 48
        assert all(top and top[0][1] >= top[-1][1] for top in out.top_logprobs), "top-k with ids, best first"
        assert "".join(out.token_texts) == body["choices"][0]["message"]["content"]
        assert not out.bad_fields
    assert outs[0].token_ids == outs[1].token_ids, "greedy spec equals its base on the bundled model"
    c = SGLangAdapter().counters_from_response(spec)
    assert c is not None and (c.drafts, c.draft_tokens, c.accepted, c.accepted_per_pos) == (17, 34, 32, [16, 16])
    assert SGLangAdapter().counters_from_response(base) is None, "no speculation: no spec_* fields"


def test_an_answer_without_ids_either_way_is_malformed_not_empty() -> None:
    """Negative controls: 0.5.14's /v1/completions (no ids at all), and meta_info whose entries are not triples."""
    with pytest.raises(ObservatoryError, match="reports no token ids"):
        take_whole(Response(), load("sglang_0.5.14_cmpl.json"), False, take_ids)
    bad = load("sglang_0.5.14_chat_meta_base.json")
    bad["choices"][0]["meta_info"]["output_token_logprobs"][3] = [-0.1, "14"]
    with pytest.raises(ObservatoryError, match=r"\[logprob, token_id, text\]"):
        take_whole(Response(), bad, True, take_ids)
    short = load("sglang_0.5.14_chat_meta_base.json")
    short["choices"][0]["meta_info"]["output_top_logprobs"].pop()
    with pytest.raises(ObservatoryError, match="one list per token"):
        take_whole(Response(), short, True, take_ids)


def test_an_arm_whose_metrics_lack_accepted_tokens_takes_the_requests_own_counters() -> None:
    """SGLang's /metrics counts verify steps only (None accepted): the correctness pass's delta is the answer's
    meta_info counters; where /metrics reports accepted tokens (vLLM, llama.cpp) it stays as /metrics says."""
    from observatory.engines.metrics import SpecCounters
    from observatory.session.measure import with_request_counters

    own = SGLangAdapter().counters_from_response(load("sglang_0.5.14_chat_meta_mtp2.json"))
    assert own is not None
    resp = Response(request_counters=own.plain())
    metrics = SpecCounters(drafts=17, draft_tokens=None, accepted=None, accepted_per_pos=None)
    got = with_request_counters(metrics, resp)
    assert (got.drafts, got.draft_tokens, got.accepted, got.accepted_per_pos) == (17, 34, 32, [16, 16])
    full = SpecCounters(drafts=17, draft_tokens=34, accepted=30, accepted_per_pos=[16, 14])
    assert with_request_counters(full, resp) is full
    assert with_request_counters(metrics, Response()) is metrics, "no counters in the answer: not reported"
