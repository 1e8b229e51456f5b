#!/usr/bin/env bash
# vLLM and SGLang arms in one observatory session on the H200 (issue 31 item 4, two engines of three).
# The two bundles do not fit one device call's carry (64 MiB) beside the tree, so they travel in two
# back-to-back calls on one warm machine (it is given back after 30 s idle):
#   1. carry [".gpu", ".whl"]:  bash examples/gpu/run_engines_h200.sh stage   (unpacks vLLM into /tmp/site)
#   2. carry [".sgl", ".whl"]:  bash examples/gpu/run_engines_h200.sh run     (unpacks SGLang into /tmp/sgl-site,
#      then the session; results in $OUT)
# The observatory and the vLLM arms import vLLM's bundle (/tmp/site); the SGLang arms, defined in
# examples/gpu/sglang/arms-h200.toml, put SGLang's (/tmp/sgl-site) on their own PYTHONPATH instead.
set -uo pipefail
mode=${1:?stage or run}
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/out}; mkdir -p "$out"
t0=$(date +%s)
if [ "$mode" = stage ]; then
  source examples/gpu/device_env.sh
  python3 -c "import vllm; print('vllm', vllm.__version__)"
  echo "staged in $(( $(date +%s) - t0 )) s"; exit 0
fi
exec > >(tee "$out/run.log") 2>&1
[ -f /tmp/site/.ready ] || { echo "vLLM's bundle is not staged on this machine: run 'stage' first"; exit 3; }
( source .sgl/activate.sh ) && { [ -f /tmp/sgl-site/.patched3 ] || { bash examples/gpu/sglang/patch-bundle.sh /tmp/sgl-site && touch /tmp/sgl-site/.patched3; }; }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
ep=/tmp/ep/observatory-0.dist-info; mkdir -p $ep
printf 'Metadata-Version: 2.1\nName: observatory\nVersion: 0.1.0\n' > $ep/METADATA
printf '[vllm.general_plugins]\nobservatory_faults = observatory.faults:register\n' > $ep/entry_points.txt
export PYTHONPATH=$PWD:/tmp/site:/tmp/ep PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1
export VLLM_NO_USAGE_STATS=1 VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_CACHE_ROOT=/tmp/vllm_cache
export TRITON_CACHE_DIR=/tmp/triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_cache
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SGLANG_BUNDLE_FP32_NATIVE=1
export OBSERVATORY_SGLANG_ARGS="--attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static 0.3 --cuda-graph-max-bs 16"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -m observatory compare --arms-file examples/gpu/sglang/arms-h200.toml \
  --arms "sglang:sgl-base,sglang:sgl-mtp2,${VLLM_ARMS:-base,mtp2}" --db "$out/h200-engines.db" \
  --engine-arg=--attention-backend=TRITON_ATTN --spec-extra '{"attention_backend":"TRITON_ATTN"}' \
  --engine-arg=--gpu-memory-utilization=0.2 --engine-arg=--enforce-eager \
  --health-timeout 400 --log-dir "$out/logs" --quiet --concurrency 1
echo "session rc=$? at $(( $(date +%s) - t0 )) s"
python3 -m observatory show --db "$out/h200-engines.db" > "$out/show.txt" 2>&1; head -70 "$out/show.txt"
gzip "$out/h200-engines.db"; tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
