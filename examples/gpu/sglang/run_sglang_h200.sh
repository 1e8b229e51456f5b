#!/usr/bin/env bash
# The observatory launching SGLang arms on the H200 (issue 31 item 2): sglang:base and sglang:mtp2 on
# the bundled tiny model (float32, as the vLLM and llama.cpp arms serve it), then, while the call has
# time, the same on the field model in bfloat16 (its suite; acceptance neither 0 nor 1).
#   bash examples/gpu/sglang/run_sglang_h200.sh [BUNDLE]   (from the repo root, on the device; carry
#   BUNDLE (default .sgl, made by build-bundle.sh) and .whl (SQLAlchemy); results in $OUT)
# SGLANG_FIELD_AFTER_S (default 240): the field-model session starts only if the first ended before it.
set -uo pipefail
B=${1:-.sgl}
t0=$(date +%s)
out=${OUT:-/tmp/out}; mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
source "$B/activate.sh"
[ -f /tmp/sgl-site/.patched3 ] || { bash examples/gpu/sglang/patch-bundle.sh /tmp/sgl-site && touch /tmp/sgl-site/.patched3; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=$PWD:/tmp/site:$PYTHONPATH
# the bundle's kernels (examples/gpu/sglang/README.md): Triton attention, torch sampling, no grammar backend;
# float32 through each op's torch forward (patch-bundle.sh); a third of the GPU for the KV cache
export SGLANG_BUNDLE_FP32_NATIVE=1
export OBSERVATORY_SGLANG_ARGS="--attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static 0.3 --cuda-graph-max-bs 16"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
common=(--health-timeout 400 --log-dir "$out/logs" --quiet --concurrency 1,4)
python3 -m observatory compare --arms sglang:base,sglang:mtp2 --db "$out/h200-sglang-tiny.db" "${common[@]}"
echo "tiny session rc=$? at $(( $(date +%s) - t0 )) s"
python3 -m observatory show --db "$out/h200-sglang-tiny.db" > "$out/show-tiny.txt" 2>&1
python3 -m observatory show --db "$out/h200-sglang-tiny.db" --json > "$out/show-tiny.json" 2>&1
head -60 "$out/show-tiny.txt"
if (( $(date +%s) - t0 < ${SGLANG_FIELD_AFTER_S:-240} )); then
  python3 -m observatory compare --arms sglang:base,sglang:mtp2 --model observatory/field_model --suite field \
    --dtype bfloat16 --db "$out/h200-sglang-field.db" "${common[@]}"
  echo "field session rc=$? at $(( $(date +%s) - t0 )) s"
  python3 -m observatory show --db "$out/h200-sglang-field.db" > "$out/show-field.txt" 2>&1
  head -60 "$out/show-field.txt"
fi
for f in "$out"/*.db; do gzip -k "$f"; rm -f "$f"; done
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
