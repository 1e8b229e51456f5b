# On the device machine, from the checkout root:  source DEST/activate.sh
# (DEST being the folder build-bundle.sh filled and `carry` named). Unpacks SGLang into
# /tmp/sgl-site once per machine and sets the environment every SGLang start there needs.
_B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -f /tmp/sgl-site/.ready ]; then
  mkdir -p /tmp/sgl-site && tar -xJf "$_B"/sglang-0.5.14-trim-sm90.tar.xz -C /tmp/sgl-site \
  && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/sgl-site "$_B"/whl/*.whl \
  && touch /tmp/sgl-site/.ready || echo "activate.sh: unpacking the SGLang bundle failed" >&2
fi
export PYTHONPATH=/tmp/sgl-site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 DO_NOT_TRACK=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TRITON_CACHE_DIR=/tmp/triton_cache TORCHINDUCTOR_CACHE_DIR=/tmp/inductor_cache
