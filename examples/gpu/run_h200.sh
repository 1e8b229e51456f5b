#!/usr/bin/env bash
# The observatory on one H200 with vLLM 0.26.0 for CUDA (the trimmed bundle made by
# the workplace's GPU bundle script, see examples/h200/README.md). From the repo root, on the device machine:
#   bash examples/gpu/run_h200.sh tiny     # base,base,mtp1,mtp2 on the embedded tiny model
#   bash examples/gpu/run_h200.sh hybrid   # base,mtp1,mtp2 on a Qwen3.5-style hybrid, random weights
# OBSERVATORY_DEFAULT_MODEL=DIR runs "tiny" on another checkpoint of the tiny model.
# Results go to $OUT (or /tmp/out): session databases and engine logs; render
# the reports where you read them: observatory report --db OUT/h200-tiny.db --out DIR
set -uo pipefail
mode=${1:?tiny or hybrid}
cd "$(dirname "$0")/../.."
source examples/gpu/device_env.sh  # the bundle, the wheels, PYTHONPATH, $out
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import vllm; print('vllm', vllm.__version__)"
# The bundle needs Triton attention, in the speculative config too (see shared/gpu/README.md).
common=(--engine-arg=--attention-backend=TRITON_ATTN --spec-extra '{"attention_backend":"TRITON_ATTN"}'
        --health-timeout 400 --log-dir "$out/logs" --quiet)
case $mode in
tiny)
  python3 -m observatory compare --arms base,base,mtp1,mtp2 --db "$out/h200-tiny.db" "${common[@]}" \
    --engine-arg=--gpu-memory-utilization=0.2 --engine-arg=--enforce-eager --concurrency 1,4
  python3 -m observatory show --db "$out/h200-tiny.db"
  # the harness against vLLM's own serving benchmark, same server, same prompts
  python3 benchmarks/bench_vs_vllm.py --repeats 3 --out "$out/bench-tiny.json" --work-dir /tmp/bench \
    --engine-arg=--attention-backend=TRITON_ATTN --engine-arg=--gpu-memory-utilization=0.2 --engine-arg=--enforce-eager
  ;;
hybrid)
  python3 examples/gpu/hbm_bandwidth.py | tee "$out/hbm.json"
  python3 examples/gpu/make_hybrid_config.py /tmp/hybrid --hidden 4096 --layers 32 \
    --tokenizer-from "${TOKENIZER_FROM:-observatory/default_model}"
  python3 -m observatory compare --arms base,mtp1,mtp2 --model /tmp/hybrid --suite default --db "$out/h200-hybrid.db" "${common[@]}" \
    --dtype bfloat16 --max-model-len 2048 --engine-arg=--load-format=dummy --engine-arg=--language-model-only \
    --engine-arg=--gdn-prefill-backend=triton --engine-arg=--gpu-memory-utilization=0.5 \
    --engine-arg=--max-num-seqs=8 --no-diffs --concurrency 1
  grep -h "Model loading took\|weights took\|Loading weights took" "$out"/logs/*.log | tail -5 | tee "$out/weights.txt"
  python3 -m observatory show --db "$out/h200-hybrid.db"
  ;;
esac
