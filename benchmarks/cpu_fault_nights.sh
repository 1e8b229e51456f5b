#!/usr/bin/env bash
# Nights of the same arms on the CPU engine, clean nights then several different hidden faults, one a night,
# each to be flagged by the history channel (issue 29, "how it will be checked"; figures in benchmarks/README.md).
#   bash benchmarks/cpu_fault_nights.sh OUT [SCHEDULE]     # default schedule cccdcsncc
# Every night the observatory launches base and spec2 (mtp, K=2) on the field model (observatory/field_model),
# paired timing (both engines up, requests alternating), the history channel, one database. spec2 has the same
# name and served config every night; a fault night adds the plugin's variables to its environment only:
#   d  draft_noise with OBSERVATORY_DRAFT_NOISE_FRACTION=0.33: a drafter about a third worse
#   s  slow_step with OBSERVATORY_SLOW_STEP_FRACTION=3: every spec step four times as long
#   n  draft_noise: a dead drafter (every draft random)
# (benchmarks/speed_detection.py run --launch; one JSON line per night in OUT/results.jsonl, resumable; the
# table at the end in OUT/nights.txt). Engines are launched, not kept up: five servers side by side on the
# 2-core host starved each other (benchmarks/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUT folder}; schedule=${2:-cccdcsncc}
mkdir -p "$out"
py=${PYTHON:-.venv/bin/python}
t0=$(date +%s)
"$py" benchmarks/speed_detection.py run --launch --arm spec2 --k 2 --model observatory/field_model \
    --suite benchmarks/speed_suite.toml --schedule "$schedule" --db "$out/nights.db" --out "$out" \
    --fault-env "d=OBSERVATORY_FAULT=draft_noise,OBSERVATORY_DRAFT_NOISE_FRACTION=0.33" \
    --fault-env "s=OBSERVATORY_FAULT=slow_step,OBSERVATORY_SLOW_STEP_FRACTION=3" \
    --fault-env "n=OBSERVATORY_FAULT=draft_noise"
"$py" benchmarks/speed_detection.py count "$out/results.jsonl" | tee "$out/nights.txt"
echo "done after $(( $(date +%s) - t0 )) s"
