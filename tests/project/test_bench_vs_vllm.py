"""benchmarks/bench_vs_vllm.py without an engine: its arguments, prompts and result reading.

Speed targets are never asserted here; the benchmark is run by hand (benchmarks/README.md).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("bench_vs_vllm", REPO / "benchmarks" / "bench_vs_vllm.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_vs_vllm"] = mod
    spec.loader.exec_module(mod)
    return mod


bvv = _load()

# What `vllm bench serve --save-result --save-detailed` writes (trimmed): two requests.
CANNED = {
    "backend": "openai-chat", "completed": 2, "failed": 0, "total_output_tokens": 30,
    "output_throughput": 120.0, "median_ttft_ms": 15.0, "mean_ttft_ms": 15.0,
    "median_tpot_ms": 5.5, "mean_tpot_ms": 5.5, "median_itl_ms": 5.0, "median_e2el_ms": 80.0,
    "output_lens": [10, 20],
    "ttfts": [0.010, 0.020],
    "latencies": [0.055, 0.130],       # decode: 45 ms over 9 tokens, 110 ms over 19
    "generated_texts": ["a b c", "d e f"],
    "errors": ["", ""],
}


def test_no_vllm_import_at_module_level() -> None:
    src = (REPO / "benchmarks" / "bench_vs_vllm.py").read_text()
    top = [ln for ln in src.splitlines() if ln.startswith(("import ", "from "))]
    assert not [ln for ln in top if "vllm" in ln]


def test_parse_args_defaults_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    a = bvv.parse_args([])
    assert a.url is None and a.model is None and a.repeats == 5 and a.spec_config is None and a.out is None
    assert a.dtype == "float32" and a.max_model_len == 1024
    a = bvv.parse_args(["--url", "http://x:1", "--repeats", "3", "--out", "r.json"])
    assert (a.url, a.repeats, a.out) == ("http://x:1", 3, "r.json")
    for bad in (["--url", "u", "--model", "m"], ["--repeats", "0"], ["--max-tokens", "1"]):
        with pytest.raises(SystemExit):
            bvv.parse_args(bad)
    capsys.readouterr()


def test_spec_config_presets_and_json() -> None:
    assert bvv.spec_config_from(None) is None
    assert bvv.spec_config_from("base") is None
    assert bvv.spec_config_from("mtp1") == {"method": "mtp", "num_speculative_tokens": 1}
    assert bvv.spec_config_from('{"method": "mtp", "num_speculative_tokens": 2}')["num_speculative_tokens"] == 2


def test_prompts_are_the_non_tool_default_probes(tmp_path: Path) -> None:
    from observatory.model.probes import load_probe_file, resolve_suite

    all_probes = load_probe_file(resolve_suite(None))
    probes = bvv.bench_probes(all_probes)
    assert probes and all(p.tools is None and p.kind == "chat" for p in probes)
    assert len(probes) == len([p for p in all_probes if p.tools is None])
    capped = bvv.bench_probes(all_probes, max_tokens=32)
    assert {p.max_tokens for p in capped} == {32}
    path = bvv.write_dataset(probes, tmp_path / "d.jsonl")
    rows = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines()]
    assert [r["prompt"] for r in rows] == [p.messages[0]["content"] for p in probes]
    assert [r["output_tokens"] for r in rows] == [p.max_tokens for p in probes]
    # the JSONL reader used in place of pandas reads it back
    frame = bvv._MiniPandas.read_json(str(path), lines=True)
    assert "prompt" in frame.columns
    assert [row.to_dict() for _, row in frame.iterrows()] == rows


def test_bench_sends_the_observatory_sampling_parameters(tmp_path: Path) -> None:
    from observatory.model.probes import load_probe_file, resolve_suite

    probe = bvv.bench_probes(load_probe_file(resolve_suite(None)))[0]
    extra = bvv.bench_extra_body(probe)  # the timed path's: what `vllm bench serve` asks, plus the seed
    assert extra == {"seed": 0}
    full = bvv.bench_extra_body(probe, full=True)
    assert full == {"seed": 0, "logprobs": True, "top_logprobs": 10, "return_tokens_as_token_ids": True}
    assert bvv.bench_extra_body(probe, plain=True) == {}
    assert bvv.parse_args([]).full is False and bvv.parse_args(["--full"]).full is True
    argv = bvv.vllm_bench_args(base_url="http://h:1", dataset=tmp_path / "d.jsonl", num_prompts=7,
                               result_dir=tmp_path, result_filename="r.json", extra_body=extra)
    flags = dict(itertools.pairwise(argv))
    assert flags["--backend"] == "openai-chat" and flags["--endpoint"] == "/v1/chat/completions"
    assert flags["--max-concurrency"] == "1" and flags["--temperature"] == "0"
    assert flags["--custom-output-len"] == "-1" and flags["--num-prompts"] == "7"
    assert json.loads(flags["--extra-body"]) == extra
    assert "--skip-chat-template" in argv and "--save-detailed" in argv



def test_ignore_eos_goes_to_both_sides() -> None:
    """--ignore-eos (random-weights models end their greedy answers at once): the observatory's timed pass
    and vllm bench (through --extra-body) both ask the server to ignore EOS."""
    from observatory.client.send import request_body, timed_params
    from observatory.model.probes import load_probe_file, resolve_suite

    probe = bvv.bench_probes(load_probe_file(resolve_suite(None)), max_tokens=128, ignore_eos=True)[0]
    assert bvv.bench_extra_body(probe) == {"seed": 0, "ignore_eos": True}
    body = request_body(probe, "m", timed_params(probe), stream=True)
    assert body["ignore_eos"] is True and body["max_tokens"] == 128 and "logprobs" not in body
    assert bvv.parse_args(["--ignore-eos"]).ignore_eos is True and bvv.parse_args([]).ignore_eos is False

def test_summarize_canned_bench_result() -> None:
    s = bvv.summarize_bench(CANNED)
    assert s["tokens"] == [10, 20] and s["ok"] == 2
    assert s["decode_tok_s"] == pytest.approx(28 / 0.155)
    assert s["ttft_ms_median"] == pytest.approx(15.0)
    assert s["tpot_ms_median"] == pytest.approx((5.0 + 110 / 19) / 2)
    assert s["vllm"]["output_throughput"] == 120.0
    assert (s["delivered_at_once"], s["delivered_at_once_of"]) == (0, 2)
    burst = dict(CANNED, ttfts=[0.054, 0.020])  # 9 of 10 tokens in the last ms of 55
    assert bvv.summarize_bench(burst)["delivered_at_once"] == 1
    failed = dict(CANNED, errors=["", "boom"], output_lens=[10, 0])
    assert bvv.summarize_bench(failed)["ok"] == 1


def test_summarize_result_without_latencies() -> None:
    """vLLM 0.26 (the GPU bundle) saves TTFTs and ITLs but no "latencies":
    latency is rebuilt as TTFT + sum(ITLs), giving the same figures."""
    old = {k: v for k, v in CANNED.items() if k != "latencies"}
    old["itls"] = [[0.005] * 9, [110 / 19 / 1000] * 19]
    s, ref = bvv.summarize_bench(old), bvv.summarize_bench(CANNED)
    assert s["tokens"] == ref["tokens"] and s["ok"] == 2
    for key in ("decode_tok_s", "ttft_ms_median", "tpot_ms_median"):
        assert s[key] == pytest.approx(ref[key])


def _repeat(obs_ttft: float, bench_ttft: float, tokens: list[int]) -> dict[str, Any]:
    def side(ttft: float) -> dict[str, Any]:
        reqs = [{"tokens": n, "ttft_ms": ttft, "duration_ms": ttft + 5.0 * (n - 1)} for n in tokens]
        fig = bvv._figures(reqs)
        return {"figures": fig, "metrics": bvv.side_metrics(fig), "texts": ["t"] * len(tokens)}

    return {"observatory": side(obs_ttft), "vllm_bench": side(bench_ttft)}


def test_compare_and_token_match() -> None:
    reps = [_repeat(10.0, 10.0, [5, 9]), _repeat(12.0, 10.0, [5, 9]), _repeat(9.0, 10.0, [5, 9])]
    cmp = bvv.compare(reps)
    assert cmp["decode_tok_s"]["ratio_median"] == pytest.approx(1.0)
    assert cmp["decode_tok_s"]["observatory_median"] == pytest.approx(200.0)
    assert cmp["ttft_ms_median"]["ratio_median"] == pytest.approx(1.0)
    assert cmp["ttft_ms_median"]["ratio_min"] == pytest.approx(0.9)
    assert cmp["ttft_ms_median"]["ratio_max"] == pytest.approx(1.2)
    assert cmp["ttft_ms_median"]["ratio_pooled"] == pytest.approx(1.0)
    tm = bvv.token_match(["a", "b"], reps)
    assert tm["all_match"] and tm["texts_match"]
    reps[1]["vllm_bench"]["figures"]["tokens"] = [5, 8]
    tm = bvv.token_match(["a", "b"], reps)
    assert not tm["all_match"] and tm["per_prompt"][1]["vllm_bench_tokens"] == [8, 9]
    text = bvv.table({"comparison": cmp, "token_match": tm,
                      "client_cpu": {"cpu_ms_per_request": 1.0, "cpu_ms_per_token": 0.1,
                                     "cpu_fraction_of_wall": 0.1, "wall_ms_per_request": 10.0}})
    assert "decode tok/s" in text and "NO" in text


def test_tau_of_unreported_counters_is_unknown_not_zero() -> None:
    """Issue 14 item 6: a request whose counters were not reported made its drafts 0, and tau came from the
    others (a made-up figure); it is unknown now, through figures.acceptance (the one formula)."""
    rec = [{"tokens": 10, "ttft_ms": 10.0, "duration_ms": 55.0, "text": "x", "cpu_s": 0.002, "wall_s": 0.055,
            "drafts": 4, "accepted": 2},
           {"tokens": 20, "ttft_ms": 20.0, "duration_ms": 130.0, "text": "y", "cpu_s": 0.004, "wall_s": 0.13,
            "drafts": None, "accepted": None}]
    assert bvv.observatory_side(rec)["tau"] is None
    rec[1].update(drafts=0, accepted=0)
    assert bvv.observatory_side(rec)["tau"] == pytest.approx(1.5)


def test_sides_from_records_and_per_prompt_runs() -> None:
    rec = [{"tokens": 10, "ttft_ms": 10.0, "duration_ms": 55.0, "text": "x", "cpu_s": 0.002, "wall_s": 0.055,
            "drafts": 4, "accepted": 2},
           {"tokens": 20, "ttft_ms": 20.0, "duration_ms": 130.0, "text": "y", "cpu_s": 0.004, "wall_s": 0.13,
            "drafts": 6, "accepted": 3}]
    obs = bvv.observatory_side(rec)
    assert obs["texts"] == ["x", "y"] and obs["n"] == 2 and obs["tau"] == pytest.approx(1.5)
    assert obs["cpu_s"] == pytest.approx(0.006)
    # vllm bench run once per prompt (--interleave prompt): two results of one request each
    one = {k: v[:1] if isinstance(v, list) else v for k, v in CANNED.items()}
    two = {k: v[1:] if isinstance(v, list) else v for k, v in CANNED.items()}
    one["_client_cpu"] = {"cpu_s": 0.01, "requests": 2}
    two["_client_cpu"] = {"cpu_s": 0.03, "requests": 2}
    ben = bvv.bench_side([one, two])
    assert ben["figures"]["tokens"] == [10, 20] and ben["texts"] == ["a b c", "d e f"]
    assert ben["metrics"]["decode_tok_s"] == pytest.approx(obs["metrics"]["decode_tok_s"])
    assert ben["metrics"]["ttft_ms_median"] == pytest.approx(15.0)
    assert len(ben["vllm"]) == 2
    assert bvv._bench_cpu_ms([{"vllm_bench": ben}]) == pytest.approx(10.0)
    assert bvv.parse_args(["--interleave", "suite"]).interleave == "suite"


def test_streamed_pairs_skip_requests_delivered_at_once() -> None:
    reps = [_repeat(10.0, 10.0, [5, 9, 20]), _repeat(12.0, 10.0, [5, 9, 20])]
    # the 9-token request of repeat 2 arrived at once on the bench side
    reps[1]["vllm_bench"]["figures"]["per_request"][1] = {"tokens": 9, "ttft_ms": 50.0, "duration_ms": 50.5}
    sp = bvv.streamed_pairs(reps)
    assert sp["pairs"] == 3  # the 5-token requests are too short to say
    assert sp["decode_ratio_median"] == pytest.approx(1.0)
    assert sp["ttft_ratio_median"] == pytest.approx(1.0)


def test_client_overhead_mock_stream_is_parsed_like_a_server_stream() -> None:
    spec = importlib.util.spec_from_file_location("client_overhead", REPO / "benchmarks" / "client_overhead.py")
    assert spec and spec.loader
    co = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(co)
    from observatory.model.probes import Probe

    client = co.mocked_client(co.stream_body(8))
    try:
        r = client.run(Probe(name="p", category="prose_en", messages=[{"role": "user", "content": "hi"}], max_tokens=8))
    finally:
        client.close()
    assert r.ok and len(r.token_ids) == 8 and r.finish_reason == "length"
    assert r.ttft_ms is not None and r.usage["completion_tokens"] == 8
