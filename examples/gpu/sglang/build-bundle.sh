#!/usr/bin/env bash
# Build a SGLang 0.5.14 bundle (CUDA, torch 2.11) small enough to carry to the H200 device
# machine, which has torch 2.11.0+cu130 but no network (examples/gpu/sglang/README.md).
#   usage: bash examples/gpu/sglang/build-bundle.sh DEST   (DEST: an ignored folder of the checkout)
# Produces DEST/sglang-0.5.14-trim-sm90.tar.xz, DEST/whl/ and DEST/activate.sh.
# Kept: SGLang's Python (less the diffusion server multimodal_gen and its tests), sgl_kernel's
# Python and its sm90 common_ops; flashinfer's Python (no headers or sources: nothing JIT-built;
# patch-bundle.sh keeps sgl_kernel's norms off flashinfer, README.md). Cut: sgl_kernel's FA3 (flash_ops, 1.76 GB),
# FlashMLA and sm100 ops, flashinfer's data and the cubin package, xgrammar (--grammar-backend
# none), SGLang's grpc server, and every other requirement serving one dense model does not
# import (README.md). patch-bundle.sh makes the bundle's four source changes.
set -eo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DEST=${1:?usage: build-bundle.sh DEST}; mkdir -p "$DEST"; DEST=$(cd "$DEST" && pwd)
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
PLAT=""
for t in 2_28 2_27 2_17 2014 1 2_24 2_34 2_31 2_5 2_26; do
  case $t in 2014|1) PLAT+=" --platform manylinux${t}_x86_64";; *) PLAT+=" --platform manylinux_${t}_x86_64";; esac
done
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PLAT "$@"; }
dl -d "$WORK/dl" sglang==0.5.14 sglang-kernel==0.4.4 flashinfer-python==0.6.12
mkdir -p "$WORK/src" "$WORK/trim"
for w in "$WORK"/dl/*.whl; do (cd "$WORK/src" && unzip -q -o "$w"); done
cd "$WORK/src"
rm -rf sglang/multimodal_gen sglang/test
rm -f sgl_kernel/flash_ops.abi3.so sgl_kernel/flashmla_ops.abi3.so && rm -rf sgl_kernel/sm100
rm -rf flashinfer/data
rm -rf sglang/srt/grpc
bash "$HERE/patch-bundle.sh" .
find . -name __pycache__ -prune -exec rm -rf {} +
tar -cf - sglang sglang-0.5.14.dist-info sgl_kernel sglang_kernel-0.4.4.dist-info triton_kernels \
    flashinfer flashinfer_python-0.6.12.dist-info \
  | xz -9 -T2 > "$DEST/sglang-0.5.14-trim-sm90.tar.xz"
rm -rf "$DEST/whl" && dl -d "$DEST/whl" -r "$HERE/carry_reqs.txt"
cp "$HERE/activate.sh" "$DEST/activate.sh"
du -sh "$DEST"/* | tee "$DEST/sizes.txt"
