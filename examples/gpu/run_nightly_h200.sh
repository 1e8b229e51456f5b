#!/usr/bin/env bash
# The nightly profile (every field channel, docs/channels.md) on one H200 with vLLM 0.26.0 for CUDA
# (the trimmed bundle, see examples/h200/README.md). From the repo root, on the device machine:
#   bash examples/gpu/run_nightly_h200.sh tiny     # base,base,mtp1,mtp2 on the embedded tiny model
#   bash examples/gpu/run_nightly_h200.sh hybrid   # base,mtp2 on the Qwen3.5-style hybrid, random weights
#   bash examples/gpu/run_nightly_h200.sh field    # base,base,mtp1,mtp2 on the bundled field model with production
#                                                  # defaults (bf16, CUDA graphs, prefix caching): one clean night
#                                                  # of the false-alarm table (docs/design.md 3.7); TAG names the run
# Results go to $OUT (or /tmp/out), at most 8 files (what the device machine sends back): nightly-MODE.db,
# nightly-MODE.txt (the gate's output), costs-MODE.txt (benchmarks/channel_costs.py: each phase's cost),
# timings.txt, and nightly-MODE.tar.gz (report, JUnit, engine logs). LIMIT_S (default 560) stops the gate
# with SIGINT, as Ctrl-C would: the session is stored as interrupted and its engines stopped. CHANNELS (a comma
# list) runs those channels instead of the profile's (the H100 nights of 2026-12-05 ran soak to seeds: the
# nightly of 2026-12-06 no longer fits one call on a cold machine, examples/field-nights/README.md). field only:
# RESUME=1 in the next call on the same warm machine runs the arms a cut night is missing (`compare --resume`;
# its database is kept in STATE_DIR, default /tmp/nightly-state, and copied to $out after each call). ARMS
# (default base,base,mtp1,mtp2) and PROFILE (default nightly; PROFILE= runs no profile, so no A/A copy is added)
# size a field session to the call: `ARMS=base,mtp2 PROFILE= CHANNELS=volume,prompt_embeds,reasoning`.
set -uo pipefail
mode=${1:?tiny, hybrid or field}
cd "$(dirname "$0")/../.."
source examples/gpu/device_env.sh  # the bundle, the wheels, PYTHONPATH, $out
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
python3 -c "import vllm; print('vllm', vllm.__version__)"
profile=${PROFILE-nightly}
field_model=(); [ -z "$profile" ] && field_model=(--model observatory/field_model)  # the nightly profile picks it
common=(--engine-arg=--attention-backend=TRITON_ATTN --spec-extra '{"attention_backend":"TRITON_ATTN"}'
        --health-timeout 400 --log-dir "$out/logs" ${profile:+--profile "$profile"}
        ${CHANNELS:+--channels "$CHANNELS"})
limit=${LIMIT_S:-560}
timed() {  # label, then the command
  local label=$1; shift
  local t0; t0=$(date +%s.%N)
  "$@"; local rc=$?
  echo "$label rc=$rc wall_s=$(python3 -c "import time; print(round(time.time() - $t0, 1))")" | tee -a "$out/timings.txt"
}
case $mode in
tiny)
  timed nightly-tiny timeout -s INT "$limit" python3 -m observatory gate --arms base,base,mtp1,mtp2 --model observatory/default_model --db "$out/nightly-tiny.db" \
    --report "$out/nightly-tiny" --junit "$out/nightly-tiny.xml" "${common[@]}" \
    --engine-arg=--gpu-memory-utilization=0.2 --engine-arg=--enforce-eager --concurrency 1,4 > "$out/nightly-tiny.txt" 2>&1
  tail -40 "$out/nightly-tiny.txt"
  ;;
field)
  tag=${TAG:-1}
  # the database lives outside $out (emptied for every call) so that RESUME=1, the next call on the same warm
  # machine (it is given back after 30 s idle), runs the arms the cut session is missing (compare --resume)
  state=${STATE_DIR:-/tmp/nightly-state}; mkdir -p "$state"; db=$state/nightly-field-$tag.db
  if [ "${RESUME:-0}" = 1 ]; then
    # the stored plan's flags (--log-dir too) are the resumed session's: compare refuses any other
    timed nightly-field-$tag-resumed timeout -s INT "$limit" python3 -m observatory compare --resume 1 --db "$db" \
      >> "$state/nightly-field-$tag.txt" 2>&1
    python3 -m observatory report 1 --db "$db" --out "$out/nightly-field-$tag" --junit "$out/nightly-field-$tag.xml" \
      >> "$state/nightly-field-$tag.txt" 2>&1
  else
    timed nightly-field-$tag timeout -s INT "$limit" python3 -m observatory gate --arms "${ARMS:-base,base,mtp1,mtp2}" "${field_model[@]}" --db "$db" \
      --report "$out/nightly-field-$tag" --junit "$out/nightly-field-$tag.xml" "${common[@]}" \
      --dtype bfloat16 --engine-arg=--gpu-memory-utilization=0.2 > "$state/nightly-field-$tag.txt" 2>&1
  fi
  cp "$db" "$state/nightly-field-$tag.txt" "$out/"
  tail -40 "$out/nightly-field-$tag.txt"
  mode=field-$tag
  ;;
hybrid)
  python3 examples/gpu/make_hybrid_config.py /tmp/hybrid --hidden 4096 --layers 32 \
    --tokenizer-from "${TOKENIZER_FROM:-observatory/default_model}"
  timed nightly-hybrid timeout -s INT "$limit" python3 -m observatory gate --arms base,mtp2 --model /tmp/hybrid --suite default --db "$out/nightly-hybrid.db" \
    --report "$out/nightly-hybrid" --junit "$out/nightly-hybrid.xml" "${common[@]}" \
    --dtype bfloat16 --max-model-len 2048 --engine-arg=--load-format=dummy --engine-arg=--language-model-only \
    --engine-arg=--gdn-prefill-backend=triton --engine-arg=--gpu-memory-utilization=0.5 \
    --engine-arg=--max-num-seqs=8 --concurrency 1 > "$out/nightly-hybrid.txt" 2>&1
  tail -40 "$out/nightly-hybrid.txt"
  ;;
esac
python3 benchmarks/channel_costs.py "$out/nightly-$mode.db" > "$out/costs-$mode.txt" 2>&1; cat "$out/costs-$mode.txt"
tar -C "$out" -czf "$out/nightly-$mode.tar.gz" "nightly-$mode" "nightly-$mode.xml" logs gpus.txt 2>/dev/null
rm -rf "$out/nightly-$mode" "$out/nightly-$mode.xml" "$out/logs" "$out/gpus.txt"
ls -la "$out"
