#!/usr/bin/env bash
# Speed on a GPU-bound model with real acceptance (issue 27 item 5, issue 29 item 5), one H200, vLLM 0.26.0
# for CUDA (the trimmed bundle, examples/h200/README.md); an H100 too, sized from the card found. The field model embedded in a 7B-class dense
# layout (training/scale_up.py: the same logits, every step reading 13+ GiB of bf16 weights), production
# defaults (bf16, CUDA graphs, prefix caching). Four servers side by side, 0.2 of the GPU's memory each:
# base, mtp1, mtp2 and mtp2 with the hidden fault slow_step (OBSERVATORY_FAULT; every spec step 5% slower).
# From the repo root, on the device machine:
#   bash examples/gpu/run_speed_h200.sh speed    # setup, then S, tau, r, c, roofline (base,mtp1,mtp2,
#                                                # paired timing), then detection sessions until the deadline
#   bash examples/gpu/run_speed_h200.sh detect   # setup again (warm caches), more detection sessions
# Detection sessions: benchmarks/speed_detection.py (base,mtp2 paired, --channels history, one database,
# 12 field probes: benchmarks/speed_suite.toml;
# the spec arm is the clean or the faulted server by schedule). .devcache/ (gitignored) keeps the scaled
# model and compile caches while the device machine stays warm; the detection database and its results
# live in .devcache/detect, which a later call carries back if the machine went cold.
# Results to $OUT: speed.db.gz, speed.txt, detect.tar.gz (database and results.jsonl), timings.txt, hbm.json,
# servers.tar.gz (server logs). LIMIT_S (default 570): no detection session starts after LIMIT_S - 75 s.
set -uo pipefail
mode=${1:?speed or detect}
cd "$(dirname "$0")/../.."
t_start=$(date +%s)
source examples/gpu/device_env.sh  # the bundle, the wheels, PYTHONPATH, $out
limit=${LIMIT_S:-570}
cache=$PWD/.devcache; mkdir -p "$cache/detect"
elapsed() { echo $(( $(date +%s) - t_start )); }
note() { echo "$1 at $(elapsed) s" | tee -a "$out/timings.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$out/timings.txt"
model=$cache/scaled
if [ ! -f "$model/model.safetensors" ]; then
  python3 training/scale_up.py observatory/field_model "$model" --device cuda 2>&1 | tail -n 3 | tee -a "$out/timings.txt"
fi
note "model ready"
python3 examples/gpu/hbm_bandwidth.py > "$out/hbm.json"; cat "$out/hbm.json"
logs=$cache/logs; mkdir -p "$logs"
spec() { echo "{\"method\":\"mtp\",\"num_speculative_tokens\":$1,\"attention_backend\":\"TRITON_ATTN\"}"; }
start() {  # name port [K [fault]]; the server runs in the background ($!)
  local name=$1 port=$2 k=${3:-} fault=${4:-}
  local argv=(python3 -m vllm.entrypoints.openai.api_server --model "$model" --host 127.0.0.1 --port "$port"
              --seed 0 --max-logprobs 20 --dtype bfloat16 --enable-auto-tool-choice
              --tool-call-parser hermes --attention-backend TRITON_ATTN --gpu-memory-utilization "$util"
              --kv-cache-memory-bytes "$kv")
  [ -n "$k" ] && argv+=(--speculative-config "$(spec "$k")")
  # side by side: each server its own compile caches (kept in .devcache across warm calls)
  env VLLM_CACHE_ROOT="$cache/vc-$name" TRITON_CACHE_DIR="$cache/tc-$name" TORCHINDUCTOR_CACHE_DIR="$cache/ic-$name" \
      ${fault:+OBSERVATORY_FAULT=$fault} "${argv[@]}" > "$logs/$name.log" 2>&1 &
}
declare -A pid
wait_for() {  # until LOG has PATTERN; a server that exited stops the run (its log comes back)
  local name=$1 pattern=$2
  until grep -q "$pattern" "$logs/$name.log" 2>/dev/null; do
    sleep 1
    if ! kill -0 "${pid[$name]}" 2>/dev/null || [ "$(elapsed)" -gt 400 ]; then
      note "server $name failed before '$pattern'"; grep -m 3 "Error" "$logs/$name.log" | tee -a "$out/timings.txt"
      kill $(jobs -p) 2>/dev/null; tar -C "$logs" -czf "$out/servers.tar.gz" .; exit 1
    fi
  done
}
# vLLM sizes its KV cache from the GPU's free memory during its profiling run: a server profiling while
# another loads its weights counts them as its own (base at -19.04 GiB, then mtp1 at -9.68 GiB when started
# after base, 2026-12-03). So each server's KV cache is given (--kv-cache-memory-bytes, 8 GiB: 65,536 tokens
# of this layout on the H200), which skips that profiling; memory only, the same kernels and graphs. Sized from
# the card found (device_env.sh): four servers of 13.5 GiB of weights and 8 GiB of KV cache each do not fit an
# H100's 80 GB, where each gets what 80% of the card leaves (1 GiB: 8,192 tokens, still far above a
# probe's length).
kv=$(kv_bytes 4 14); util=$(mem_util 4)
echo "each server: KV cache $kv bytes, --gpu-memory-utilization $util" | tee -a "$out/timings.txt"
start base 8200; pid[base]=$!
start mtp1 8201 1; pid[mtp1]=$!; start mtp2 8202 2; pid[mtp2]=$!; start slow 8203 2 slow_step; pid[slow]=$!
for name in base mtp1 mtp2 slow; do wait_for "$name" "Application startup complete"; done
note "servers ready"
grep -h "Model loading took" "$logs"/*.log | head -n 4 | tee -a "$out/timings.txt"
u() { echo "http://127.0.0.1:$1"; }
if [ "$mode" = speed ]; then
  python3 -m observatory compare --arms "base=$(u 8200),mtp1=$(u 8201),mtp2=$(u 8202)" --model "$model" \
      --suite benchmarks/speed_suite.toml --timing paired --no-diffs --repeat 2 --db "$out/speed.db" --log-dir "$logs/obs" \
      --quiet > "$out/speed.txt" 2>&1
  note "speed session rc=$?"
  python3 -m observatory show --db "$out/speed.db" --json > "$out/speed.json" 2>> "$out/speed.txt"
  tail -n 30 "$out/speed.txt"
fi
python3 benchmarks/speed_detection.py run --base "$(u 8200)" --clean "$(u 8202)" --faulted "$(u 8203)" \
    --arm mtp2 --model "$model" --suite benchmarks/speed_suite.toml --db "$cache/detect/detect.db" --out "$cache/detect" \
    --deadline-s $(( limit - 75 - $(elapsed) )) 2>&1 | tee -a "$out/timings.txt"
note "detection done"
python3 benchmarks/speed_detection.py count "$cache/detect/results.jsonl" | tee "$out/detect.txt"
grep -h "slow_step\|SlowStep" "$logs"/slow.log | head -n 5 >> "$out/timings.txt"
kill $(jobs -p) 2>/dev/null; sleep 3
tar -C "$cache" -czf "$out/detect.tar.gz" detect/detect.db detect/results.jsonl
tar -C "$logs" -czf "$out/servers.tar.gz" .
[ -f "$out/speed.db" ] && gzip -f "$out/speed.db"
ls -la "$out"
