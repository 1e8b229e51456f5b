#!/usr/bin/env bash
# The observatory on two H200s (device kind nvidia-h200-x2) with vLLM 0.26.0 for CUDA
# (the trimmed bundle, see examples/h200/README.md). From the repo root, on the device machine:
#   bash examples/gpu/run_h200x2.sh parallel   # base,mtp1,mtp2 with --parallel-arms, then the same sequentially
#   bash examples/gpu/run_h200x2.sh tp2        # a TP=2 pair: base,mtp2 with --gpus-per-arm 2
# Results go to $OUT (or /tmp/out): h200x2.db, engine logs, timings.txt.
set -uo pipefail
mode=${1:?parallel or tp2}
cd "$(dirname "$0")/../.."
source examples/gpu/device_env.sh  # the bundle, the wheels, PYTHONPATH, $out
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
python3 -c "import vllm; print('vllm', vllm.__version__)"
common=(--engine-arg=--attention-backend=TRITON_ATTN --spec-extra '{"attention_backend":"TRITON_ATTN"}'
        --health-timeout 400 --log-dir "$out/logs" --quiet --db "$out/h200x2.db"
        --engine-arg=--gpu-memory-utilization=0.2 --engine-arg=--enforce-eager)
timed() {  # label, then the command
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@"; local rc=$?
  echo "$label rc=$rc wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" | tee -a "$out/timings.txt"
}
case $mode in
parallel)
  timed parallel python3 -m observatory compare --arms base,mtp1,mtp2 --gpus-per-arm 1 --parallel-arms \
    --concurrency 1,4 "${common[@]}"
  timed sequential python3 -m observatory compare --arms base,mtp1,mtp2 --gpus-per-arm 1 \
    --concurrency 1,4 "${common[@]}"
  ;;
tp2)
  timed tp2 python3 -m observatory compare --arms base,mtp2 --gpus-per-arm 2 \
    --engine-arg=--tensor-parallel-size=2 --concurrency 1,4 "${common[@]}"
  ;;
esac
python3 -m observatory sessions --db "$out/h200x2.db"
