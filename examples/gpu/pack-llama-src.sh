#!/usr/bin/env bash
# Pack the llama.cpp source that scripts/build-llama.sh fetched here into a tarball small enough
# to carry to the device machine (no network there), for LLAMA_SRC=... LLAMA_CUDA=90 build-llama.sh.
#   bash examples/gpu/pack-llama-src.sh DEST.tar.xz
# Cut: the test models, docs, media and benchmarks, and every ggml backend but CPU and CUDA
# (178 MB of source -> about 6 MB xz). gguf-py and convert_hf_to_gguf.py stay (the GGUF export).
set -euo pipefail
dest=${1:?usage: pack-llama-src.sh DEST.tar.xz}
root="${OBSERVATORY_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/observatory/llama.cpp}/${LLAMA_CPP_VERSION:-11434.0.0}/src"
[ -f "$root/CMakeLists.txt" ] || { echo "no llama.cpp source at $root: run scripts/build-llama.sh first" >&2; exit 3; }
ex=(--exclude=./models --exclude=./docs --exclude=./media --exclude=./benches --exclude=.git)
for b in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
  ex+=("--exclude=./ggml/src/ggml-$b")
done
tar -C "$root" "${ex[@]}" -cf - . | xz -6 -T2 > "$dest"
du -h "$dest"
