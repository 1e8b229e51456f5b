#!/usr/bin/env bash
# One device call: SGLang 0.5.14 (the trimmed bundle) serving the bundled MiMo-layout model as base
# and as EAGLE/MiMoMTP mtp2, every answer the SGLang adapter reads recorded raw; and, beside it,
# llama.cpp's CUDA build (sm_90) timed and its llama-server run as base and draft2 on the GPU.
#   bash examples/gpu/sglang/probe_h200.sh BUNDLE [LLAMA_SRC_TARBALL]   (from the repo root; results in $OUT)
#   SGL_DTYPES="float32 bfloat16" (default; float32 runs each op's plain-torch forward, SGLANG_BUNDLE_FP32_NATIVE,
#   because sgl_kernel has no float32 RMSNorm: README.md); each dtype's arms are named base-<dtype>, mtp2-<dtype>.
#   DEADLINE_S (default 540): no new server is started after it.
set -uo pipefail
B=${1:?bundle folder}; LSRC=${2:-}
out=/tmp/probe; mkdir -p "$out"; res=${OUT:-/tmp/out}; mkdir -p "$res"  # $OUT takes 8 files: one tarball
trap 'tar czf "$res/probe.tgz" -C "$out" .' EXIT
exec > >(tee "$res/log") 2>&1
source "$B/activate.sh"
[ -f /tmp/sgl-site/.patched2 ] || { bash examples/gpu/sglang/patch-bundle.sh /tmp/sgl-site && touch /tmp/sgl-site/.patched2; }
export OBSERVATORY_LLAMA_CACHE=/tmp/llama LLAMA_CUDA=90
if [ -n "$LSRC" ]; then
  ( t0=$(date +%s); LLAMA_SRC=$PWD/$LSRC LLAMA_BUILD_JOBS=12 nice -n 5 bash scripts/build-llama.sh > "$out/llama-build.log" 2>&1
    echo "llama build rc=$? wall=$(( $(date +%s) - t0 )) s" >> "$out/llama-build.log" ) &
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import sglang, sgl_kernel, flashinfer, torch; print('sglang', sglang.__version__, 'sgl_kernel', sgl_kernel.__version__, 'flashinfer', flashinfer.__version__, 'torch', torch.__version__)"
M=observatory/default_model
export SGLANG_BUNDLE_FP32_NATIVE=1
T0=$(date +%s)
SG=(--model-path $M --host 127.0.0.1 --port 30000 --random-seed 0 --context-length 1024
    --attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static 0.3
    --max-running-requests 8 --enable-metrics --cuda-graph-max-bs 8 --log-level info)
J='Content-Type: application/json'
req() { local name=$1 path=$2 body=$3; curl -s -m 60 -H "$J" -d "$body" "http://127.0.0.1:30000$path" > "$out/$arm-$name.json"; echo "== $arm $name"; head -c 1500 "$out/$arm-$name.json"; echo; }
probe() {
  arm=$1; shift
  (( $(date +%s) - T0 < ${DEADLINE_S:-540} )) || { echo "deadline: $arm not started"; return 1; }
  t0=$(date +%s)
  python3 -m sglang.launch_server "${SG[@]}" --dtype "$dtype" "$@" > "$out/sglang-$arm.log" 2>&1 & pid=$!
  for i in $(seq 1 240); do
    curl -sf -m 2 http://127.0.0.1:30000/health >/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "sglang $arm exited"; tail -40 "$out/sglang-$arm.log"; return 1; }
    sleep 1
  done
  echo "sglang $arm ready after $(( $(date +%s) - t0 )) s"
  curl -s -m 10 http://127.0.0.1:30000/get_server_info > "$out/$arm-server_info.json"
  for ep in server_info get_model_info version v1/models health_generate; do curl -s -m 20 "http://127.0.0.1:30000/$ep" > "$out/$arm-ep-${ep//\//_}.json"; done
  python3 -c "import json,sys; d=json.load(open('$out/$arm-server_info.json')); print({k:d.get(k) for k in ('version','speculative_algorithm','attention_backend','sampling_backend','disable_cuda_graph','cuda_graph_max_bs','dtype')})"
  P='"prompt":"The capital of France is","max_tokens":48,"temperature":0'
  req cmpl /v1/completions "{\"model\":\"m\",$P,\"logprobs\":2,\"return_token_ids\":true}"
  req cmpl-meta /v1/completions "{\"model\":\"m\",$P,\"logprobs\":2,\"return_meta_info\":true}"
  req cmpl-stream /v1/completions "{\"model\":\"m\",$P,\"stream\":true,\"return_token_ids\":true,\"logprobs\":1}"
  req chat /v1/chat/completions "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":48,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2,\"return_token_ids\":true,\"return_meta_info\":true}"
  req chat-meta-lp /v1/chat/completions "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":48,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2,\"return_meta_info\":true}"
  req chat-stream /v1/chat/completions "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}],\"max_tokens\":48,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2,\"stream\":true,\"stream_options\":{\"include_usage\":true}}"
  req tokenize /tokenize '{"model":"m","prompt":"The capital of France is"}'
  req gen-lp /generate '{"text":"The capital of France is","sampling_params":{"max_new_tokens":48,"temperature":0},"return_logprob":true,"top_logprobs_num":2,"return_text_in_logprobs":true}'
  req gen /generate '{"text":"The capital of France is","sampling_params":{"max_new_tokens":48,"temperature":0},"return_logprob":true,"top_logprobs_num":2}'
  req gen-stream /generate '{"text":"The capital of France is","sampling_params":{"max_new_tokens":48,"temperature":0},"stream":true}'
  for c in 1 4; do  # a rough speed reading: c streams of 128 greedy tokens through /generate
    python3 - "$c" <<'PY' | tee -a "$out/$arm-speed.txt"
import json, sys, time, urllib.request, concurrent.futures as cf
c = int(sys.argv[1])
def one(i):
    b = json.dumps({"text": f"Story number {i}:", "sampling_params": {"max_new_tokens": 128, "temperature": 0, "ignore_eos": True}}).encode()
    r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:30000/generate", b, {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["meta_info"]["completion_tokens"]
t = time.time()
with cf.ThreadPoolExecutor(c) as ex:
    n = sum(ex.map(one, range(c)))
print(f"c={c} tokens={n} wall={time.time()-t:.2f}s tok/s={n/(time.time()-t):.1f}")
PY
  done
  curl -s -m 10 http://127.0.0.1:30000/metrics > "$out/$arm-metrics.txt"; grep -i "spec\|^sglang:num_requests_total\|generation_tokens_total" "$out/$arm-metrics.txt" | grep -v "^#" | head -20
  kill $pid; wait $pid 2>/dev/null
  return 0  # (wait's status is the server's, killed)
}
python3 -c "import sglang.launch_server, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, sglang.srt.models.mimo, sglang.srt.models.mimo_mtp; print('imports ok')"
for dtype in ${SGL_DTYPES:-float32 bfloat16}; do
  d=${dtype/bfloat16/bf16}; d=${d/float32/fp32}
  probe base-$d || continue
  probe mtp2-$d --speculative-algorithm EAGLE --speculative-draft-model-path $M --speculative-num-steps 2 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 3
  python3 examples/gpu/sglang/compare_ids.py "$out" base-$d mtp2-$d | tee "$out/ids-$d.txt"
done
[ -n "$LSRC" ] && bash examples/gpu/sglang/llama_gpu.sh "$out"
