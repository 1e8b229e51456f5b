#!/usr/bin/env bash
# Trim the vLLM 0.26.0 device bundle (.gpu, made by the workplace's build-bundle.sh, see
# examples/h200/README.md) so that it travels beside this checkout and the observatory's own
# wheels (.whl) under the 64 MiB a device call carries.
#   usage: bash examples/gpu/trim-bundle.sh .gpu
# What goes (measured 2026-12-02: 42.4 MB -> 38.0 MB, du -sb of the folder):
#   - the llguidance wheel (3.1 MB): guided decoding by llguidance is then unavailable (xgrammar, the
#     default backend, stays); vLLM's backend_guidance.py evaluates llguidance annotations at import,
#     so the bundle's copy gets `from __future__ import annotations` (quoting two of them is not
#     enough: a third, line 294, is evaluated too);
#   - _flashmla_C, _flashmla_extension_C and _qutlass_C (MLA and FP4 kernels, imported under
#     suppress(ImportError); no dense MTP model uses them).
# What must stay: apache_tvm_ffi (xgrammar imports tvm_ffi at import, and vLLM imports xgrammar at start).
set -euo pipefail
B=${1:?usage: trim-bundle.sh BUNDLE_DIR}
B=$(cd "$B" && pwd)
tarball=$B/vllm-0.26.0-trim-sm90.tar.xz
[ -f "$tarball" ] || { echo "trim-bundle.sh: $tarball not found" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
tar -xJf "$tarball" -C "$work"
rm -f "$work"/vllm/_flashmla_C.abi3.so "$work"/vllm/_flashmla_extension_C.abi3.so "$work"/vllm/_qutlass_C.abi3.so
g=$work/vllm/v1/structured_output/backend_guidance.py
grep -q '^from __future__ import annotations' "$g" || sed -i '0,/^import /s//from __future__ import annotations\nimport /' "$g"
grep -q '^from __future__ import annotations' "$g" || { echo "trim-bundle.sh: could not patch $g" >&2; exit 1; }
tar -C "$work" -cf - vllm vllm-0.26.0.dist-info | xz -9 -T2 > "$tarball.new"
mv "$tarball.new" "$tarball"
rm -f "$B"/whl/llguidance-*.whl
du -sb "$B"
