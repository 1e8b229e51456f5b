#!/usr/bin/env python
"""Received / offered tokens per second: does the client keep up with a paced server?

Starts `benchmarks/pacing_stub.py` in its own process (each stream offered
RATE tok/s on an absolute schedule), then sends STREAMS requests of TOKENS
tokens at once, as `ArmRun.throughput` does (a thread pool of STREAMS
workers), and reports received tok/s (tokens counted by the client over
the wall time of the batch) against offered (STREAMS x RATE x the ideal
duration). Clients compared:

- ``batch``: `observatory.client.batch.timed_batch`, what `compare`'s timed passes run (one select
  loop, connections opened before the clock; the wall is the batch's own);
- ``timed``: `EngineClient.run_timed` from a thread pool (how timed passes ran before);
- ``full``: `EngineClient.run`, a correctness pass (top-10 logprobs);
- ``raw``: a bare httpx reader with `json.loads` per event (vllm bench's way).

    python benchmarks/client_throughput.py [--streams 64] [--rate 100] [--tokens 300] [--clients batch,timed,full,raw]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from observatory.client.batch import timed_batch
from observatory.client.send import EngineClient
from observatory.model.probes import Probe

HERE = Path(__file__).resolve().parent


def start_stub(rate: float) -> tuple[subprocess.Popen[str], str]:
    """The pacing stub in a child process, and its URL."""
    proc = subprocess.Popen([sys.executable, str(HERE / "pacing_stub.py"), "--rate", str(rate)],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def stop_stub(proc: subprocess.Popen[str]) -> None:
    """Stop the stub and close its pipe."""
    proc.terminate()
    proc.wait(10)
    if proc.stdout is not None:
        proc.stdout.close()


def raw_tokens(http: httpx.Client, url: str, tokens: int) -> int:
    """One streamed request read the way vllm bench does: json.loads per SSE line; usage tokens."""
    body = {"model": "pacing-stub", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens,
            "stream": True, "stream_options": {"include_usage": True}}
    n = 0
    with http.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                d = json.loads(line[6:])
                if d.get("usage"):
                    n = d["usage"]["completion_tokens"]
    return n


def one_batch(kind: str, url: str, streams: int, tokens: int) -> tuple[int, float, int]:
    """(tokens received, wall seconds, failed requests) of STREAMS concurrent requests."""
    probe = Probe(name="p", category="prose_en", messages=[{"role": "user", "content": "hi"}], max_tokens=tokens)
    client = EngineClient(url, timeout=120.0)
    client.model()
    http = httpx.Client(timeout=120.0, limits=httpx.Limits(max_connections=None))
    if kind == "batch":
        timed_batch(client, [probe] * streams, streams)  # warm, as the pool below is warmed
        resps, wall = timed_batch(client, [probe] * streams, streams)
        client.close()
        http.close()
        return sum(r.completion_tokens or 0 for r in resps), wall, sum(1 for r in resps if not r.ok)
    fn: Any = {"timed": lambda _: client.run_timed(probe), "full": lambda _: client.run(probe),
               "raw": lambda _: raw_tokens(http, url, tokens)}[kind]
    with ThreadPoolExecutor(max_workers=streams) as ex:
        list(ex.map(fn, range(streams)))  # warm the connections
        t0 = time.perf_counter()
        got = list(ex.map(fn, range(streams)))
        wall = time.perf_counter() - t0
    client.close()
    http.close()
    if kind == "raw":
        return sum(got), wall, sum(1 for n in got if n != tokens)
    return sum(r.completion_tokens or 0 for r in got), wall, sum(1 for r in got if not r.ok)


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--rate", type=float, default=100.0, help="tok/s offered per stream")
    p.add_argument("--tokens", type=int, default=300, help="tokens per request")
    p.add_argument("--clients", default="batch,timed,full,raw")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    proc, url = start_stub(a.rate)
    try:
        offered = a.streams * a.rate
        print(f"{a.streams} streams x {a.rate:g} tok/s offered = {offered:g} tok/s; {a.tokens} tokens a request")
        for kind in a.clients.split(","):
            for _ in range(a.repeats):
                n, wall, failed = one_batch(kind, url, a.streams, a.tokens)
                # what the stub can offer in the ideal time; a client that lags makes the wall longer
                received = n / wall
                print(f"  {kind:5s} received {received:7.0f} tok/s = {received / offered:.1%} of offered"
                      f" (wall {wall:.2f} s, ideal {a.tokens / a.rate:.2f} s, {failed} failed)")
    finally:
        stop_stub(proc)


if __name__ == "__main__":
    main()
