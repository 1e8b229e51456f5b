# Sourced from the repo root by the run_*.sh scripts on the device machine: vLLM's trimmed
# bundle (.gpu, see examples/h200/README.md), observatory's own wheels that machine lacks
# (.whl: SQLAlchemy, msgspec) in /tmp/site, an entry-point record so vLLM finds the fault
# plugin, this checkout on PYTHONPATH, and NVLink multicast off (shared hosts; the observatory
# sets the same in every engine environment). Sets $out: $OUT, or /tmp/out.
source .gpu/activate.sh
out=${OUT:-/tmp/out}; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
ep=/tmp/ep/observatory-0.dist-info; mkdir -p $ep
printf 'Metadata-Version: 2.1\nName: observatory\nVersion: 0.1.0\n' > $ep/METADATA
printf '[vllm.general_plugins]\nobservatory_faults = observatory.faults:register\n' > $ep/entry_points.txt
export PYTHONPATH=$PWD:/tmp/site:/tmp/ep:${PYTHONPATH:-}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# The card found, not an assumed H200 (issue 50 item 7): an H100 has about 80 GB, an H200 about 141 GB.
# gpu_name, gpu_mem_gib; kv_bytes N WEIGHTS_GIB: the KV cache for each of N servers side by side, what 80% of
# the card leaves after their weights, at most 8 GiB (the H200 runs' figure) and at least 1 GiB; mem_util N:
# --gpu-memory-utilization for each of N servers side by side (0.2 on the H200, as the examples ran; 0.9 / N
# where 0.2 of the card would not hold one). The time limits (LIMIT_S) are the device call's 600 s, the same on
# either card; an H100's lower memory bandwidth (3.35 against 4.8 TB/s) fits fewer detection sessions in them.
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
gpu_mem_gib=$(( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1 | tr -dc 0-9) / 1024 ))
kv_bytes() {
  local each=$(( (gpu_mem_gib * 8 / 10 - $1 * $2) / $1 ))
  (( each > 8 )) && each=8; (( each < 1 )) && each=1
  echo $(( each * 1024 * 1024 * 1024 ))
}
mem_util() { python3 -c "import sys; m, n = float(sys.argv[1]), int(sys.argv[2]); print(round(max(0.2, min(0.9 / n, 0.2 * 141 / max(m, 1))), 3))" "$gpu_mem_gib" "$1"; }
echo "card: ${gpu_name:-none found}, ${gpu_mem_gib} GiB"
