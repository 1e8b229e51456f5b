#!/usr/bin/env python
"""The smaller per-row costs: token-diff input check vs the diff, packed logprobs, tool schemas, detokenising.

    python benchmarks/small_costs.py [--tokens 32768] [--runs 5]

- token_diff offline input check (`_arm`) against the diff itself
  (`compare_outputs`) on TOKENS tokens with top-10 logprobs;
- reading one TOKENS-token row's packed top logprobs (`observatory.store.packed.unpack`)
  against decoding the same rows stored as JSON;
- the tool_calls gate on one tool probe, 100 checks, schemas cached vs
  re-validated each time (the cache cleared);
- /detokenize requests for one 200-token completion output (the pacing stub).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any


def _ms(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=32768)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    from observatory.model.gates import Output, default_registry
    from observatory.model.probes import Probe
    from observatory.model.vocabulary import TOKEN_DIFF
    from observatory.store.packed import pack, unpack

    rnd = random.Random(0)
    ids = [rnd.randrange(150000) for _ in range(a.tokens)]
    top = [[[t, 0.0]] + [[rnd.randrange(150000), -rnd.random() * 9] for _ in range(9)] for t in ids]
    spec_ids = [*ids[:-1], ids[-1] + 1]  # diverges at the end: the whole sequence is walked
    reg = default_registry()
    td = reg.get(TOKEN_DIFF)
    arm = td.check.__globals__["_arm"]
    compare_outputs = td.check.__globals__["compare_outputs"]
    obj = {"base": {"token_ids": ids, "top_logprobs": top}, "spec": {"token_ids": spec_ids}}
    check_ms = _ms(lambda: (arm(obj, "base"), arm(obj, "spec")), a.runs)
    base, spec = arm(obj, "base"), arm(obj, "spec")
    diff_ms = _ms(lambda: compare_outputs(spec, base), a.runs)
    print(f"token_diff, {a.tokens} tokens x top-10: input check {check_ms:.1f} ms, diff {diff_ms:.1f} ms "
          f"({check_ms / diff_ms:.1f}x)")

    as_json = json.dumps(top)
    packed = json.dumps(pack(top))
    json_ms = _ms(lambda: json.loads(as_json), a.runs)
    unpack_ms = _ms(lambda: unpack(json.loads(packed)), a.runs)
    print(f"top logprobs of one {a.tokens}-token row: {len(as_json) / 1e6:.1f} MB as JSON, "
          f"{len(packed) / 1e6:.1f} MB packed; read {json_ms:.0f} ms (JSON) vs {unpack_ms:.0f} ms (packed)")

    tc = reg.get("tool_calls")
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    probe = Probe(name="w", category="tool_call", messages=[{"role": "user", "content": "?"}], tools=[tool])
    out = Output(text="", tool_calls=[{"id": "c", "type": "function",
                                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}])
    cache = tc.check.__globals__["_validators"]
    cached_ms = _ms(lambda: [tc.check(out, probe) for _ in range(100)], a.runs)

    def uncached() -> None:
        for _ in range(100):
            cache.cache_clear()
            tc.check(out, probe)

    print(f"tool_calls gate, 100 checks of one probe: {cached_ms:.1f} ms cached, "
          f"{_ms(uncached, a.runs):.1f} ms re-validating")
    detok_requests()


def detok_requests() -> None:
    """Requests a 200-token completion probe makes to the pacing stub, by path."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from client_throughput import start_stub, stop_stub

    from observatory.client.send import EngineClient
    from observatory.model.probes import Probe

    proc, url = start_stub(100000.0)
    try:
        client = EngineClient(url, timeout=60)
        probe = Probe(name="t", category="prose_en", prompt="Once", max_tokens=200)
        t0 = time.perf_counter()
        r = client.run(probe)
        took = time.perf_counter() - t0
        client.close()
        print(f"completion probe, {len(r.token_ids)} tokens: {len(r.token_texts)} token texts in "
              f"{took * 1000:.0f} ms")
    finally:
        stop_stub(proc)


if __name__ == "__main__":
    main()
