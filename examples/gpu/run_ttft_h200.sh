#!/usr/bin/env bash
# Where the observatory's TTFT differs from vllm bench's on the H200's dense model (issue "A fast
# instrument"): one server (the 5.7B dense config of make_dense_config.py, random weights), then
# benchmarks/ttft_ab.py (plain / metrics read / gap / raw httpx, rotated), then, with "bench",
# benchmarks/bench_vs_vllm.py --url against the same server. From the repo root, on the device:
#   bash examples/gpu/run_ttft_h200.sh [bench]
# Writes to $OUT: ttft-ab-dense.json/.txt (ROUNDS=0: none), and bench-decode-dense.json/.txt with "bench"
# (REPEATS, MAX_TOKENS; the engine start takes about 2 minutes of a 10-minute call).
set -uo pipefail
cd "$(dirname "$0")/../.."
source examples/gpu/device_env.sh  # the bundle, the wheels, PYTHONPATH, $out
export PYTHONPATH=$PWD/benchmarks:$PYTHONPATH  # ttft_ab.py imports bench_vs_vllm
export PYTHONUNBUFFERED=1
python3 examples/gpu/make_dense_config.py /tmp/dense
port=8123
python3 -m vllm.entrypoints.openai.api_server --model /tmp/dense --host 127.0.0.1 --port $port --seed 0 \
  --max-logprobs 20 --dtype bfloat16 --max-model-len 1024 --load-format=dummy --attention-backend=TRITON_ATTN \
  --gpu-memory-utilization=0.3 --enforce-eager > "$out/engine-dense.log" 2>&1 &
srv=$!
for _ in $(seq 300); do curl -sf http://127.0.0.1:$port/health >/dev/null && break; sleep 1; done
echo "server ready after ${SECONDS}s"
if [ "${ROUNDS:-3}" != 0 ]; then
  python3 benchmarks/ttft_ab.py --url http://127.0.0.1:$port --rounds "${ROUNDS:-3}" --max-tokens 32 \
    --out "$out/ttft-ab-dense.json" 2>&1 | tee "$out/ttft-ab-dense.txt"
fi
if [ "${1:-}" = bench ]; then
  python3 benchmarks/bench_vs_vllm.py --url http://127.0.0.1:$port --tool-parser none --repeats "${REPEATS:-4}" \
    --ignore-eos --max-tokens "${MAX_TOKENS:-96}" --out "$out/bench-decode-dense.json" \
    --work-dir /tmp/bench-decode-dense 2>&1 | tee "$out/bench-decode-dense.txt"
fi
kill $srv; wait $srv 2>/dev/null
tail -n 5 "$out/engine-dense.log" > "$out/engine-dense-tail.txt"; rm -f "$out/engine-dense.log"
