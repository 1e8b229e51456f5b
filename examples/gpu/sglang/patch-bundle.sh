#!/usr/bin/env bash
# The one source change the bundle makes to SGLang 0.5.14 (build-bundle.sh runs it on the
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
grep -q '^from IPython.display import HTML, display$' "$f" || exit 0
sed -i 's/^from IPython.display import HTML, display$/# (IPython: imported in print_highlight, see the bundle'"'"'s patch-bundle.sh)/' "$f"
sed -i 's/^\( *\)display(HTML(/\1from IPython.display import HTML, display\n\n\1display(HTML(/' "$f"
python3 -c "import ast,sys; ast.parse(open('$f').read())"
