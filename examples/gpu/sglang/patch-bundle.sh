#!/usr/bin/env bash
# The source changes the bundle makes to SGLang 0.5.14 (build-bundle.sh runs it on the
# unpacked tree; DIR is the folder that holds sglang/): sglang/utils.py imports IPython at the
# top for a notebook helper (print_highlight), and `import sglang` runs it, so the server could
# not start without IPython; the import is moved into that helper. And the device's
# transformers (5.17; SGLang pins 5.8.1, 12 MB more to carry) already defines qwen3_asr, so
# sglang/srt/configs/qwen3_asr.py's AutoConfig.register raised at import; it registers with
# exist_ok=True (SGLang's class still wins: transformers looks its registered extras up first).
set -euo pipefail
q=${1:?DIR}/sglang/srt/configs/qwen3_asr.py
sed -i 's/^AutoConfig.register(\("[a-z0-9_]*", [A-Za-z0-9]*\))$/AutoConfig.register(\1, exist_ok=True)/' "$q"
f=$1/sglang/utils.py
if grep -q '^from IPython.display import HTML, display$' "$f"; then
  sed -i 's/^from IPython.display import HTML, display$/# (IPython: imported in print_highlight, see the bundle'"'"'s patch-bundle.sh)/' "$f"
  sed -i 's/^\( *\)display(HTML(/\1from IPython.display import HTML, display\n\n\1display(HTML(/' "$f"
  python3 -c "import ast,sys; ast.parse(open('$f').read())"
fi
# Two more, found on the device (README.md "Where it stopped"): sgl_kernel hands every bf16/fp16 RMSNorm to
# flashinfer, which JIT-builds it from the sources the bundle cuts (ninja: norm.cu missing); the bundle makes
# sgl_kernel use its own compiled kernels. And sgl_kernel has no float32 RMSNorm ("failed to dispatch data
# type Float"), so with SGLANG_BUNDLE_FP32_NATIVE=1 a float32 input runs each op's forward_native (plain torch;
# RMSNorm, SiluAndMul, rotary), which is how SGLang serves our float32 model at all (it is then a slower,
# plainer float32 deployment, the same on base and spec arms).
python3 - "$1" <<'PY'
import re, sys
root = sys.argv[1]
e = f"{root}/sgl_kernel/elementwise.py"
s = open(e).read()
mark = "# bundle: flashinfer's norm sources are cut"
if mark not in s:
    s = s.replace("    _has_flashinfer = False\n", "    _has_flashinfer = False\n" + f"_has_flashinfer = False  {mark} (patch-bundle.sh)\n", 1)
    assert mark in s, "sgl_kernel/elementwise.py: the flashinfer import block moved"
    open(e, "w").write(s)
m = f"{root}/sglang/srt/layers/utils/multi_platform.py"
s = open(m).read()
mark = "SGLANG_BUNDLE_FP32_NATIVE"
if mark not in s:
    old = "    def forward(self, *args, **kwargs):\n        return self._forward_method(*args, **kwargs)\n"
    new = ("    def forward(self, *args, **kwargs):\n"
           "        if _FP32_NATIVE and type(self).forward_native is not MultiPlatformOp.forward_native and any(\n"
           "                getattr(a, 'dtype', None) is _torch.float32 for a in args):\n"
           "            return self.forward_native(*args, **kwargs)  # bundle: patch-bundle.sh\n"
           "        return self._forward_method(*args, **kwargs)\n")
    assert old in s, "multi_platform.py: MultiPlatformOp.forward moved"
    s = s.replace(old, new, 1)
    s = s.replace("from torch import nn\n", "import os as _os\n\nimport torch as _torch\nfrom torch import nn\n\n"
                  f"_FP32_NATIVE = _os.environ.get('{mark}') == '1'\n", 1)
    open(m, "w").write(s)
PY
