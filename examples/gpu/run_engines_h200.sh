#!/usr/bin/env bash
# vLLM, SGLang and llama.cpp arms in one observatory session on the H200 (issue 31 item 4), the nightly
# profile. The three engines do not fit one device call's carry (64 MiB) beside the tree (23 MB with the
# example databases left out), so they travel in back-to-back calls on one warm machine (it is given back
# after 30 s idle; what the calls leave in /tmp stays while it is warm):
#   1. carry [".sgl", ".llama", ".whl"]:  bash examples/gpu/run_engines_h200.sh stage
#      unpacks SGLang into /tmp/sgl-site and patches it (sglang/patch-bundle.sh) while llama.cpp's CUDA
#      llama-server for sm_90 builds from .llama/src.tar.xz (examples/gpu/pack-llama-src.sh) into /tmp/llama
#   2. carry [".gpu", ".whl"]:  bash examples/gpu/run_engines_h200.sh run
#      unpacks vLLM into /tmp/site, then `gate --profile nightly` over the six arms; the database is kept in
#      /tmp/eng and copied to $OUT with the gate's output, the report and the engine logs
#   3. only if 2 ran out of time (LIMIT_S, default 560, stops the gate with SIGINT: the session is stored as
#      interrupted): carry [".gpu", ".whl"], bash examples/gpu/run_engines_h200.sh resume (compare --resume);
#      on a machine given back in between: stage again with carry [".sgl", ".whl"] (no llama.cpp build: a
#      resume checks only the engines of the arms it runs), then resume with carry [".gpu", ".whl", ".eng"],
#      .eng/h200-engines.db.gz being the session's database as the last call returned it
# The observatory and the vLLM arms import vLLM's bundle (/tmp/site); the SGLang arms, defined in
# examples/gpu/sglang/arms-h200.toml, put SGLang's (/tmp/sgl-site) on their own PYTHONPATH instead;
# the llama.cpp arms run the CUDA build ($LLAMA_CUDA=90 selects it, observatory.engines.llamacpp).
# ENGINE_ARMS overrides the arms (default: all six).
set -uo pipefail
mode=${1:?stage, run or resume}
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}; mkdir -p "$out"
t0=$(date +%s)
export LLAMA_CUDA=90 OBSERVATORY_LLAMA_CACHE=/tmp/llama
db=/tmp/eng/h200-engines.db; mkdir -p /tmp/eng
if [ "$mode" = stage ]; then
  exec > >(tee "$out/stage.log") 2>&1
  nvcc --version | tail -1
  build=
  if [ -f .llama/src.tar.xz ]; then  # not carried for a resume whose llama.cpp arms have finished
    ( LLAMA_SRC=$PWD/.llama/src.tar.xz LLAMA_BUILD_JOBS=$(nproc) bash scripts/build-llama.sh > "$out/llama-build.log" 2>&1
      echo "llama build rc=$? at $(( $(date +%s) - t0 )) s" >> "$out/llama-build.log" ) &
    build=$!
  fi
  ( source .sgl/activate.sh ) && { [ -f /tmp/sgl-site/.patched3 ] || { bash examples/gpu/sglang/patch-bundle.sh /tmp/sgl-site && touch /tmp/sgl-site/.patched3; }; }
  echo "SGLang staged at $(( $(date +%s) - t0 )) s"
  [ -z "$build" ] || { wait $build; tail -3 "$out/llama-build.log"; }
  exit 0
fi
exec > >(tee -a "$out/run.log") 2>&1
[ -f /tmp/sgl-site/.patched3 ] || { echo "SGLang's bundle is not staged on this machine: run 'stage' first"; exit 3; }
[ "$mode" = resume ] || [ -x /tmp/llama/*-cuda90/bin/llama-server ] || { echo "the CUDA llama-server is not built on this machine: run 'stage' first"; exit 3; }
source examples/gpu/device_env.sh
python3 -c "import vllm; print('vllm', vllm.__version__)"
echo "vLLM staged at $(( $(date +%s) - t0 )) s"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1
export VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_CACHE_ROOT=/tmp/vllm_cache
export TRITON_CACHE_DIR=/tmp/triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_cache
export SGLANG_BUNDLE_FP32_NATIVE=1
export OBSERVATORY_SGLANG_ARGS="--attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static 0.3 --cuda-graph-max-bs 16"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
limit=${LIMIT_S:-560}
if [ "$mode" = run ]; then
  timeout -s INT "$limit" python3 -m observatory gate --profile nightly --no-aa-copy --model observatory/default_model \
    --arms-file examples/gpu/sglang/arms-h200.toml \
    --arms "${ENGINE_ARMS:-llama.cpp:base,llama.cpp:draft2,base,mtp2,sglang:sgl-base,sglang:sgl-mtp2}" --db "$db" \
    --report /tmp/eng/report --junit /tmp/eng/report.xml \
    --engine-arg=--attention-backend=TRITON_ATTN --spec-extra '{"attention_backend":"TRITON_ATTN"}' \
    --engine-arg=--gpu-memory-utilization=0.2 --engine-arg=--enforce-eager \
    --health-timeout 400 --log-dir /tmp/eng/logs --concurrency 1 > "$out/gate.txt" 2>&1
  echo "gate rc=$? at $(( $(date +%s) - t0 )) s"
else
  # the session's database: the one this machine holds, or the one carried in .eng/ (a machine given back)
  [ -f "$db" ] || gunzip -c .eng/h200-engines.db.gz > "$db"
  sid=$(sqlite3 "$db" "select max(id) from sessions" 2>/dev/null || python3 -c "import sqlite3; print(sqlite3.connect('$db').execute('select max(id) from sessions').fetchone()[0])")
  timeout -s INT "$limit" python3 -m observatory compare --resume "$sid" --db "$db" --log-dir /tmp/eng/logs > "$out/resume.txt" 2>&1
  echo "resume rc=$? at $(( $(date +%s) - t0 )) s"
  python3 -m observatory report --db "$db" --out /tmp/eng/report > /dev/null 2>&1
fi
tail -45 "$out/gate.txt" "$out/resume.txt" 2>/dev/null
python3 -m observatory show --db "$db" > "$out/show.txt" 2>&1; head -80 "$out/show.txt"
python3 -m observatory show --db "$db" --json > "$out/show.json" 2>&1
python3 benchmarks/channel_costs.py "$db" > "$out/costs.txt" 2>&1; cat "$out/costs.txt"
gzip -c "$db" > "$out/h200-engines.db.gz"
tar czf "$out/report-logs.tgz" -C /tmp/eng report logs $( [ -f /tmp/eng/report.xml ] && echo report.xml )
ls -la "$out"
