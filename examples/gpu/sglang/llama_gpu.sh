#!/usr/bin/env bash
# After probe_h200.sh started build-llama.sh (LLAMA_CUDA=90): wait for the CUDA llama-server,
# convert the bundled model (observatory.engines.llamacpp.gguf_for) and serve it on the H200 as
# base and draft2 (draft-simple, the model cut to its first 2 layers), greedy ids side by side.
out=${1:?out}
for i in $(seq 1 400); do grep -q "llama build rc=" "$out/llama-build.log" 2>/dev/null && break; sleep 1; done
tail -3 "$out/llama-build.log"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
for arm in base draft2; do
  argv=$(python3 - "$arm" <<'PY'
import shlex, sys
from observatory.engines.llamacpp import server_argv
from observatory.engines.settings import EngineSettings
from observatory.model.arms import parse_arms
arm = parse_arms(f"llama.cpp:{sys.argv[1]}")[0]
print(shlex.join(server_argv(arm, EngineSettings(model="observatory/default_model"), 30001)))
PY
) || { echo "llama argv failed"; break; }
  echo "llama.cpp:$arm: $argv"
  t0=$(date +%s); $argv > "$out/llama-$arm.log" 2>&1 & pid=$!
  for i in $(seq 1 120); do curl -sf -m 2 http://127.0.0.1:30001/health >/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
  echo "llama.cpp:$arm ready after $(( $(date +%s) - t0 )) s"; grep -i "offloaded\|CUDA0\|compute capability" "$out/llama-$arm.log" | head -4
  curl -s -m 60 -H 'Content-Type: application/json' -d '{"prompt":"The capital of France is","n_predict":48,"temperature":0,"return_tokens":true,"n_probs":2}' \
    http://127.0.0.1:30001/completion > "$out/llama-$arm-cmpl.json"
  python3 -c "import json; d=json.load(open('$out/llama-$arm-cmpl.json')); print('$arm tokens', d.get('tokens')); print('$arm timings', d.get('timings'))"
  python3 - <<'PY' | tee -a "$out/llama-speed.txt"
import json, time, urllib.request
b = json.dumps({"prompt": "Story number 1:", "n_predict": 128, "temperature": 0, "ignore_eos": True}).encode()
t = time.time(); d = json.load(urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:30001/completion", b, {"Content-Type": "application/json"}), timeout=120))
print("tokens", d["timings"]["predicted_n"], "predicted_per_second", d["timings"]["predicted_per_second"], "wall", round(time.time() - t, 2), "draft_n", d["timings"].get("draft_n"), "accepted", d["timings"].get("draft_n_accepted"))
PY
  curl -s -m 10 http://127.0.0.1:30001/metrics | grep -v "^#" | grep -i spec | head -5
  kill $pid; wait $pid 2>/dev/null
done
