"""Engine adapters on recorded real responses (issue 5 point 5); sources in tests/fixtures/engines/SOURCES.md."""

from __future__ import annotations

import json
from typing import Any

import pytest

from observatory.engines.adapter import adapter_for, counters_from_chunks, version_from
from observatory.engines.llamacpp import LlamaCppAdapter
from observatory.engines.sglang import SGLangAdapter
from observatory.engines.spec_counters import FIELDS, EngineCounters
from observatory.engines.vllm import VLLMAdapter
from observatory.judge.figures import acceptance
from observatory.model.errors import ObservatoryError
from tests.support import paths

FIXTURES = paths.FIXTURES / "engines"


def load(name: str) -> Any:
    text = (FIXTURES / name).read_text()
    return json.loads(text) if name.endswith(".json") else text


def rates(c: EngineCounters) -> dict[str, Any]:
    """figures.acceptance, the one formula (issue 14 item 6), with per_position None when unknown."""
    a = acceptance(c)
    return {**a, "per_position": a["per_position"] or None}


def assert_matches_figures(c: EngineCounters) -> None:
    """Fully known counters."""
    assert c.known == FIELDS


# ---------------------------------------------------------------- llama.cpp


def test_llamacpp_recorded_timings_pr12603() -> None:
    c = LlamaCppAdapter().counters_from_response({"timings": load("llamacpp_timings_pr12603.json")})
    assert c is not None
    assert (c.draft_tokens, c.accepted) == (347, 65)
    assert c.known == {"draft_tokens", "accepted"}  # drafts are not reported per request
    assert (c.drafts, c.accepted_per_pos) == (None, None)  # not reported, not zero
    r = rates(c)
    assert r["alpha"] == pytest.approx(65 / 347)
    assert r["tau"] is None and r["per_position"] is None and r["reported_tau"] is None
    assert acceptance(c)["histogram"] == []  # no P(n=0) = 1 made up from missing positions


def test_llamacpp_last_stream_chunk_carries_the_timings() -> None:
    # Chunk shapes from server-task.cpp to_json_oaicompat_chat_stream; timings recorded (PR #12603).
    timings = load("llamacpp_timings_pr12603.json")
    chunks = [
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Once"}}]},
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "finish_reason": "length", "delta": {}}],
         "timings": timings},
    ]
    c = counters_from_chunks(LlamaCppAdapter(), chunks)
    assert c is not None and (c.draft_tokens, c.accepted) == (347, 65)
    partial = dict(timings, draft_n=10, draft_n_accepted=2)  # timings_per_token: cumulative, last wins
    c = counters_from_chunks(LlamaCppAdapter(), [{"timings": partial}, {"choices": []}, {"timings": timings}])
    assert c is not None and c.accepted == 65


def test_llamacpp_recorded_response_without_speculation() -> None:
    c = LlamaCppAdapter().counters_from_response(load("llamacpp_chat_no_spec_netclaw614.json"))
    assert c is not None and (c.draft_tokens, c.accepted) == (0, 0)
    assert rates(c)["alpha"] is None


def test_llamacpp_metrics_reconstructed() -> None:
    c = LlamaCppAdapter().counters_from_metrics(load("llamacpp_metrics_reconstructed.txt"))
    assert c == EngineCounters(drafts=87, draft_tokens=259, accepted=167, accepted_per_pos=[70, 55, 42])
    r = rates(c)
    # The server log of PR #24536 printed: 0.64479, mean acceptance length 2.92, (0.805, 0.632, 0.483).
    assert round(r["alpha"], 5) == 0.64479 and round(r["tau"], 2) == 2.92
    assert [round(p, 3) for p in r["per_position"]] == [0.805, 0.632, 0.483]
    assert_matches_figures(c)


@pytest.mark.parametrize(
    "timings, match",
    [
        ({"draft_n": "347", "draft_n_accepted": 65}, "draft_n must be a non-negative integer"),
        ({"draft_n": 347.0, "draft_n_accepted": 65}, "draft_n must be"),
        ({"draft_n": 347, "draft_n_accepted": True}, "draft_n_accepted must be"),
        ({"draft_n": 347, "draft_n_accepted": -1}, "draft_n_accepted must be"),
        ({"draft_n": 347}, "come together"),
        ({"draft_n_accepted": 65}, "come together"),
        ({"draft_n": 5, "draft_n_accepted": 6}, "6 accepted of only 5"),
    ],
)
def test_llamacpp_malformed_timings(timings: dict[str, Any], match: str) -> None:
    with pytest.raises(ObservatoryError, match=match):
        LlamaCppAdapter().counters_from_response({"timings": timings})


def test_llamacpp_absent_or_wrong_shapes() -> None:
    a = LlamaCppAdapter()
    assert a.counters_from_response({"choices": []}) is None
    with pytest.raises(ObservatoryError, match="must be a JSON object"):
        a.counters_from_response({"timings": [347, 65]})
    with pytest.raises(ObservatoryError, match="must be a JSON object"):
        a.counters_from_response([])  # type: ignore[arg-type]
    assert a.counters_from_metrics("llamacpp:n_decode_total 125\nllamacpp:requests_processing 1\n") is None
    bad = a.counters_from_metrics('llamacpp:spec_decode_num_drafts_total{position="0" 3\n')
    assert bad is not None and bad.problem is not None and "not valid Prometheus text" in bad.problem


def test_llamacpp_metrics_names_without_total_suffix() -> None:
    # PR #26389's description spells the names without _total; the parser treats both alike.
    text = load("llamacpp_metrics_reconstructed.txt").replace("_total", "")
    c = LlamaCppAdapter().counters_from_metrics(text)
    assert c is not None and (c.drafts, c.accepted, c.accepted_per_pos) == (87, 167, [70, 55, 42])


# ---------------------------------------------------------------- SGLang


def test_sglang_recorded_meta_info_spec_verify_ct_only() -> None:
    meta = load("sglang_meta_info_bench_eagle.json")
    c = SGLangAdapter().counters_from_response({"text": "...", "meta_info": meta})
    assert c is not None and c.drafts == 101 and c.known == {"drafts"}
    r = rates(c)
    assert r["alpha"] is None and r["tau"] is None and r["per_position"] is None
    assert r["reported_tau"] == pytest.approx(256 / 101)  # SGLang's own completion_tokens / spec_verify_ct


def test_sglang_recorded_spec_tokens_details_pr33518() -> None:
    details = load("sglang_spec_tokens_details_pr33518.json")
    c = SGLangAdapter().counters_from_response({"object": "chat.completion", "sglext": {"spec_tokens_details": details}})
    assert c is not None
    assert (c.drafts, c.draft_tokens, c.accepted) == (43, 215, 63)
    assert c.accepted_per_pos == [32, 18, 7, 3, 3]  # from the histogram [11, 14, 11, 4, 0, 3]
    r = rates(c)
    assert r["alpha"] == pytest.approx(details["spec_accept_rate"])
    assert r["tau"] == pytest.approx(details["spec_accept_length"]) == pytest.approx(106 / 43)
    assert r["reported_tau"] == details["spec_accept_length"]
    assert_matches_figures(c)


def test_sglang_meta_info_and_legacy_spellings_agree() -> None:
    """The recorded record under each meta_info spelling (keys renamed here, not a recording)."""
    details = load("sglang_spec_tokens_details_pr33518.json")
    expected = SGLangAdapter().counters_from_response({"sglext": {"spec_tokens_details": details}})
    renames = [
        {},
        {"spec_num_correct_drafts": "spec_accepted_drafts", "spec_num_proposed_drafts": "spec_proposed_drafts",
         "spec_correct_drafts_histogram": "spec_accept_histogram"},
        {"spec_num_correct_drafts": "spec_accept_token_num", "spec_num_proposed_drafts": "spec_draft_token_num",
         "spec_correct_drafts_histogram": "spec_accept_histogram"},
    ]
    for rename in renames:
        meta = {rename.get(k, k): v for k, v in details.items()} | {"completion_tokens": 106}
        assert SGLangAdapter().counters_from_response({"meta_info": meta}) == expected


def test_sglang_parallel_choices_are_summed() -> None:
    details = load("sglang_spec_tokens_details_pr33518.json")
    c = SGLangAdapter().counters_from_response({"sglext": {"spec_tokens_details": [details, details]}})
    assert c is not None and (c.drafts, c.accepted, c.accepted_per_pos) == (86, 126, [64, 36, 14, 6, 6])
    assert c.known == FIELDS and c.reported_tau is None


def test_sglang_no_verify_step_is_all_zero() -> None:
    zero = {"spec_accept_rate": 0.0, "spec_accept_length": 0.0, "spec_num_correct_drafts": 0,
            "spec_num_proposed_drafts": 0, "spec_verify_ct": 0, "spec_correct_drafts_histogram": []}
    assert SGLangAdapter().counters_from_response({"sglext": {"spec_tokens_details": zero}}) == EngineCounters()


def test_sglang_metrics_reconstructed() -> None:
    c = SGLangAdapter().counters_from_metrics(load("sglang_metrics_reconstructed.txt"))
    assert c is not None and c.drafts == 43 and c.known == {"drafts"}
    assert rates(c)["tau"] is None  # the accept-length gauge is an interval value, not a counter
    gauges_only = "\n".join(line for line in load("sglang_metrics_reconstructed.txt").splitlines()
                            if "spec_verify_calls" not in line)
    assert SGLangAdapter().counters_from_metrics(gauges_only) is None


def test_sglang_absent_and_malformed() -> None:
    a = SGLangAdapter()
    assert a.counters_from_response({"text": "hi", "meta_info": {"completion_tokens": 3}}) is None
    assert a.counters_from_response({"choices": [], "sglext": {"spec_tokens_details": None}}) is None
    details = load("sglang_spec_tokens_details_pr33518.json")
    bad = [
        ({"spec_tokens_details": "43"}, "must be a JSON object"),
        ({"spec_tokens_details": details | {"spec_verify_ct": "43"}}, "spec_verify_ct must be"),
        ({"spec_tokens_details": details | {"spec_num_correct_drafts": 64}}, "disagrees"),
        ({"spec_tokens_details": details | {"spec_correct_drafts_histogram": [11, 14, 11, 4, 0, 4]}}, "disagrees"),
        ({"spec_tokens_details": details | {"spec_correct_drafts_histogram": "11,14"}}, "list of counts"),
        ({"spec_tokens_details": details | {"spec_num_proposed_drafts": 62}}, "63 accepted of only 62"),
    ]
    for sglext, match in bad:
        with pytest.raises(ObservatoryError, match=match):
            a.counters_from_response({"sglext": sglext})
    bad = a.counters_from_metrics("sglang:spec_verify_calls_total{model_name=\"m\" 43\n")
    assert bad is not None and bad.problem is not None and "not valid Prometheus text" in bad.problem


# ---------------------------------------------------------------- vLLM


def test_vllm_per_request_metrics_pr48915() -> None:
    body = load("vllm_per_request_spec_pr48915.json")
    sd = body["metrics"]["speculative_decoding"]
    c = VLLMAdapter().counters_from_response(body)
    assert c is not None and (c.drafts, c.draft_tokens, c.accepted) == (43, 129, 10)
    assert c.accepted_per_pos == [4, 3, 3]
    r = rates(c)
    assert r["alpha"] == pytest.approx(sd["draft_acceptance_rate"])
    assert r["tau"] == pytest.approx(sd["mean_acceptance_length"]) == pytest.approx(r["reported_tau"])
    assert_matches_figures(c)
    summary = {"speculative_decoding": {k: sd[k] for k in ("num_accepted_draft_tokens", "num_draft_tokens")}}
    c = VLLMAdapter().counters_from_response({"metrics": summary})
    assert c is not None and c.known == {"draft_tokens", "accepted"} and rates(c)["tau"] is None
    assert VLLMAdapter().counters_from_response({"metrics": {"tokens_per_second": 103.2}}) is None
    assert VLLMAdapter().counters_from_response({"choices": []}) is None
    with pytest.raises(ObservatoryError, match="num_spec_steps must be"):
        VLLMAdapter().counters_from_response({"metrics": {"speculative_decoding": {"num_spec_steps": -1}}})


def test_vllm_metrics_delegate_to_parse_spec_counters() -> None:
    text = (  # the vLLM 0.32 shape of tests/engines/test_metrics.py
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="/m"} 30.0\n'
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="/m"} 60.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="/m"} 41.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="/m",position="0"} 25.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="/m",position="1"} 16.0\n'
    )
    c = VLLMAdapter().counters_from_metrics(text)
    assert c == EngineCounters(30, 60, 41, [25, 16])
    assert_matches_figures(c)
    bad = VLLMAdapter().counters_from_metrics('vllm:spec_decode_num_drafts_total{engine="0" 3\n')
    assert bad.problem is not None and "not valid Prometheus text" in bad.problem


# ---------------------------------------------------------------- common


def test_adapter_for_and_versions() -> None:
    assert isinstance(adapter_for("vLLM"), VLLMAdapter)
    assert isinstance(adapter_for("sglang"), SGLangAdapter)
    assert isinstance(adapter_for("llama.cpp"), LlamaCppAdapter)
    assert isinstance(adapter_for(" llama-server "), LlamaCppAdapter)
    with pytest.raises(ObservatoryError, match="Unknown engine 'tgi'"):
        adapter_for("tgi")
    paths = {n: adapter_for(n).version_path() for n in ("vllm", "sglang", "llama.cpp")}
    assert paths == {"vllm": "/version", "sglang": "/get_server_info", "llama.cpp": "/props"}
    assert version_from(adapter_for("vllm"), {"version": "0.32.0"}) == "0.32.0"
    assert version_from(adapter_for("sglang"), {"tp_size": 1, "version": "0.5.9"}) == "0.5.9"
    assert version_from(adapter_for("llama.cpp"), {"build_info": "b5142-80f19b41"}) == "b5142-80f19b41"
    assert version_from(adapter_for("llama.cpp"), {"total_slots": 1}) is None
    assert version_from(adapter_for("vllm"), "0.32.0") is None


def test_deltas_keep_only_fields_known_on_both_sides() -> None:
    full = EngineCounters(10, 20, 5, [4, 1])
    partial = EngineCounters(drafts=3, draft_tokens=None, accepted=None, accepted_per_pos=None)
    d = EngineCounters(30, 60, 41, [25, 16]) - full
    assert d == EngineCounters(20, 40, 36, [21, 15]) and d.known == FIELDS
    assert (full - partial).known == {"drafts"} and (partial + full).known == {"drafts"}
    assert (full + partial).to_dict()["known"] == ["drafts"]


def test_sglang_counts_are_not_reported_rather_than_zero() -> None:
    """Issue 13 item 8 / issue 14 item 6: SGLang's /metrics has the verify-call count only; the accepted
    count was stored as 0 and the report printed tau = 1.0 and P(n=0) = 1."""
    c = SGLangAdapter().counters_from_metrics(load("sglang_metrics_reconstructed.txt"))
    assert c is not None and (c.accepted, c.draft_tokens, c.accepted_per_pos) == (None, None, None)
    a = acceptance(c)
    assert a["tau"] is None and a["alpha"] is None and a["histogram"] == [] and a["per_position"] == []
    assert a["not_reported"] == "draft_tokens, accepted, accepted_per_pos: not reported by this engine"


def test_sglang_sglext_defaults_are_not_zero_acceptance() -> None:
    """Issue 14 item 6: spec_tokens_details_from_meta_info fills absent fields with 0 / [] (PR #33518);
    a verify count with 0 proposed drafts is that default, not a measured zero acceptance."""
    defaults = {"spec_verify_ct": 43, "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 0,
                "spec_correct_drafts_histogram": [], "spec_accept_rate": 0.0, "spec_accept_length": 0.0}
    c = SGLangAdapter().counters_from_response({"sglext": {"spec_tokens_details": defaults}})
    assert c is not None and c.drafts == 43 and c.known == {"drafts"}
    assert acceptance(c)["tau"] is None


def test_sglang_metrics_ignore_its_gauges_but_not_a_nan_counter() -> None:
    """Issue 19 item 1 through the SGLang adapter: the one reader flags a NaN verify counter."""
    text = load("sglang_metrics_reconstructed.txt").replace('spec_verify_calls_total{model_name="default"} 43.0',
                                                            'spec_verify_calls_total{model_name="default"} NaN')
    c = SGLangAdapter().counters_from_metrics(text)
    assert c is not None and c.problem is not None and "not a count" in c.problem
