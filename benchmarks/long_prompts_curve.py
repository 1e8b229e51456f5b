"""Measure the clean acceptance curve by prompt length on one vLLM arm (issue 49 item 7; channel long_prompts).

The documented platform curves (`observatory/judge/curves.py`, ``PLATFORM_CURVES``) and the derivation of
``SIGMA_FLOOR`` (docs/channels.md, section long_prompts) came from this script: one engine per run, the
channel's own prompts (its plan on the suite, its padding, its MAX_TOKENS, greedy, EOS ignored, streamed one at
a time with /metrics read around each), more questions and lengths than the nightly sends so the nightly's
6 x 6 cells are a subset. Writes one JSON file of rows (fraction, sample, prompt tokens, accepted, drafted).

    python benchmarks/long_prompts_curve.py --k 2 --out k2.json                      # compiled, clean
    python benchmarks/long_prompts_curve.py --k 2 --eager --out k2_eager.json        # other kernels
    python benchmarks/long_prompts_curve.py --k 2 --fault long_noise --out k2_noise.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from observatory.channels import long_prompts as lp  # noqa: E402
from observatory.channels.length_sweep import padded_ids  # noqa: E402
from observatory.client.send import EngineClient  # noqa: E402
from observatory.model.suites import read_suite  # noqa: E402

FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 3 / 8, 1 / 2, 5 / 8, 3 / 4, 7 / 8, 1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=2, help="MTP depth (0: base)")
    ap.add_argument("--fault", default="none", help="OBSERVATORY_FAULT for the engine")
    ap.add_argument("--eager", action="store_true", help="--enforce-eager")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--model", default=str(REPO / "observatory" / "field_model"))
    ap.add_argument("--suite", default=str(REPO / "probes" / "field.toml"))
    ap.add_argument("--port", type=int, default=8711)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(REPO), VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    if a.fault != "none":
        env["OBSERVATORY_FAULT"] = a.fault
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", a.model, "--host", "127.0.0.1",
           "--port", str(a.port), "--seed", "0", "--max-logprobs", "20"] + (["--enforce-eager"] if a.eager else [])
    if a.k:
        cmd += ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": a.k})]
    t0 = time.time()
    with open(a.out + ".log", "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    client = EngineClient(f"http://127.0.0.1:{a.port}")
    try:
        while True:
            try:
                if client.fetch("/health", 5.0).status_code == 200:
                    break
            except Exception:  # not up yet
                pass
            if proc.poll() is not None:
                raise SystemExit(f"the engine exited: {a.out}.log")
            time.sleep(2)
        ready = time.time() - t0
        lp.SAMPLES = a.samples
        probes = [p for p in lp.plan(read_suite(a.suite).probes) if p.meta["bucket"] == 0]
        limit = int(client.fetch("/v1/models", 10.0).json()["data"][0]["max_model_len"])
        filler = client.tokenize(lp.FILLER) or []
        rows = []
        t1 = time.time()
        for f in FRACTIONS:
            for p in probes:
                question = client.tokenize(str(p.prompt)) or []
                sent = dataclasses.replace(p, prompt=padded_ids(question, filler, lp.length_of(f, limit)))
                before = client.counters()
                ts = time.time()
                r = client.run(sent, stream=True)
                time.sleep(0.3)  # the engine records a step's stats after it streams it
                d = client.counters() - before
                rows.append({"fraction": f, "sample": p.meta["sample"], "prompt_tokens": (r.usage or {}).get(
                    "prompt_tokens"), "accepted": d.accepted, "drafted": d.draft_tokens, "tokens": len(r.token_ids),
                    "s": time.time() - ts, "error": r.error})
        Path(a.out).write_text(json.dumps({"k": a.k, "fault": a.fault, "eager": a.eager, "limit": limit,
                                           "ready_s": ready, "requests_s": time.time() - t1, "rows": rows}, indent=1))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
