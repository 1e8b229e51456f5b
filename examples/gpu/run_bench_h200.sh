#!/usr/bin/env bash
# The observatory's timed client against `vllm bench serve` on one H200 (issue "A fast instrument"):
# the same server, the same prompts, no logprobs on either side (the target: decode tok/s within
# +-2%, client CPU per request at or below vllm bench's); then, for information, the full path
# (top-10 logprobs on both sides). From the repo root, on the device:
#   bash examples/gpu/run_bench_h200.sh
# Writes four files to $OUT: bench-timed.json, bench-timed.txt, bench-full.json, bench-full.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
source examples/gpu/device_env.sh  # the bundle, the wheels, PYTHONPATH, $out
common=(--engine-arg=--attention-backend=TRITON_ATTN --engine-arg=--gpu-memory-utilization=0.2
        --engine-arg=--enforce-eager)
if [ "${1:-}" = decode ]; then
  python3 benchmarks/bench_vs_vllm.py --repeats 5 --ignore-eos --max-tokens 256 --tool-parser none --out "$out/bench-decode-tiny.json" \
      --work-dir /tmp/bench-decode-tiny "${common[@]}" 2>&1 | tail -n 40 > "$out/bench-decode-tiny.txt"
  python3 examples/gpu/make_dense_config.py /tmp/dense
  python3 benchmarks/bench_vs_vllm.py --model /tmp/dense --dtype bfloat16 --tool-parser none --repeats 3 \
      --ignore-eos --max-tokens 256 --engine-arg=--load-format=dummy --out "$out/bench-decode-dense.json" \
      --work-dir /tmp/bench-decode-dense --engine-arg=--attention-backend=TRITON_ATTN \
      --engine-arg=--gpu-memory-utilization=0.3 --engine-arg=--enforce-eager 2>&1 | tail -n 40 > "$out/bench-decode-dense.txt"
  exit 0
fi
python3 benchmarks/bench_vs_vllm.py --repeats 5 --out "$out/bench-timed.json" --work-dir /tmp/bench-timed \
    "${common[@]}" 2>&1 | tail -n 40 > "$out/bench-timed.txt"
python3 benchmarks/bench_vs_vllm.py --full --repeats 3 --out "$out/bench-full.json" --work-dir /tmp/bench-full \
    "${common[@]}" 2>&1 | tail -n 40 > "$out/bench-full.txt"
