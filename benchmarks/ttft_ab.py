#!/usr/bin/env python
"""What moves the observatory's TTFT on a server: a /metrics read just before the request, a gap, or the client.

`bench_vs_vllm.py` reads the spec counters (GET /metrics) right before each
of its observatory requests, as the runner's correctness pass does; vllm
bench sends its measured request right after its warm-up. On the H200's
5.7B dense model the observatory's TTFT came out 26-34% above vllm bench's
(`examples/h200/bench-decode-dense.json`) while decode tok/s agreed. This
takes the difference apart on one running server. Every trial is a warm-up
request (the same prompt, not counted) and then one measured request, with
one of these in between:

- ``plain``: nothing (vllm bench's order);
- ``metrics``: `EngineClient.counters()` (GET /metrics and its parse);
- ``gap``: a sleep as long as the last metrics read took;
- ``raw``: nothing, and the measured request is sent and timed by a bare
  httpx stream as vllm bench times it (its first chunk with a choice: vLLM
  sends the role there, with the first token).

All but ``raw`` send the observatory's timed pass (`timed_batch` of one).
Variants rotate from trial to trial so drift hits all alike. Prints each
variant's TTFT median and mean (ms) and writes every trial to --out.

    python benchmarks/ttft_ab.py --url http://127.0.0.1:8000 [--rounds 4] [--max-tokens 32] [--out ab.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

VARIANTS = ("plain", "metrics", "gap", "raw")


def raw_ttft(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[float, int]:
    """(TTFT ms, content chunks) of one streamed chat request timed as vllm bench times it (its session kept):
    TTFT at the first chunk with a choice, whether or not it holds text
    (vllm/benchmarks/lib/endpoint_request_func.py, async_request_openai_chat_completions)."""
    t0 = time.perf_counter()
    ttft = None
    n = 0
    with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            for ch in d.get("choices") or []:
                if ttft is None:
                    ttft = (time.perf_counter() - t0) * 1000.0
                if (ch.get("delta") or {}).get("content"):
                    n += 1
    if ttft is None:
        raise RuntimeError("no choice in the raw stream")
    return ttft, n


def main(argv: list[str] | None = None) -> int:
    """Command line."""
    from bench_vs_vllm import bench_probes

    from observatory.client.batch import timed_batch
    from observatory.client.send import EngineClient, request_body, timed_params
    from observatory.model.probes import load_probe_file, resolve_suite

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--suite", default="default")
    p.add_argument("--rounds", type=int, default=4, help="each variant runs once per prompt per round")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    url = a.url.rstrip("/")
    probes = bench_probes(load_probe_file(resolve_suite(a.suite)), a.max_tokens, ignore_eos=True)
    client = EngineClient(url)
    http = httpx.Client(timeout=600.0)
    model = client.model()
    metrics_s = 0.005
    trials: list[dict[str, Any]] = []
    k = 0
    for rnd in range(a.rounds):
        for probe in probes:
            for j in range(len(VARIANTS)):
                variant = VARIANTS[(j + k) % len(VARIANTS)]
                warm = timed_batch(client, [probe], 1)[0][0]
                if not warm.ok:
                    raise RuntimeError(f"warm-up failed: {warm.error}")
                if variant == "metrics":
                    t = time.perf_counter()
                    client.counters()
                    metrics_s = time.perf_counter() - t
                elif variant == "gap":
                    time.sleep(metrics_s)
                if variant == "raw":
                    body = request_body(probe, model, timed_params(probe), True)
                    ttft, _ = raw_ttft(http, url, body)
                else:
                    resp = timed_batch(client, [probe], 1)[0][0]
                    if not resp.ok or resp.ttft_ms is None:
                        raise RuntimeError(f"{probe.name}: {resp.error}")
                    ttft = resp.ttft_ms
                trials.append({"round": rnd, "probe": probe.name, "variant": variant, "ttft_ms": ttft,
                               "metrics_read_ms": metrics_s * 1000.0 if variant in ("metrics", "gap") else None})
            k += 1
        print(f"round {rnd + 1}/{a.rounds} done", flush=True)
    client.close()
    http.close()
    summary = {}
    for v in VARIANTS:
        xs = [t["ttft_ms"] for t in trials if t["variant"] == v]
        summary[v] = {"n": len(xs), "median_ms": statistics.median(xs), "mean_ms": statistics.fmean(xs)}
        print(f"{v:8s} n={len(xs):3d}  TTFT median {summary[v]['median_ms']:7.2f} ms  mean {summary[v]['mean_ms']:7.2f} ms")
    reads = [t["metrics_read_ms"] for t in trials if t["variant"] == "metrics"]
    print(f"metrics read: median {statistics.median(reads):.2f} ms")
    if a.out:
        Path(a.out).write_text(json.dumps({"url": url, "model": model, "max_tokens": a.max_tokens,
                                           "summary": summary, "trials": trials}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
