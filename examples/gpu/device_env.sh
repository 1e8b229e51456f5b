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
