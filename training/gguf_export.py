"""The bundled model as GGUF for llama.cpp (the code is observatory/engines/llamacpp_gguf.py).

    python -m training.gguf_export OUT.gguf [--layers N] [--gguf-py DIR]
"""

from __future__ import annotations

import sys

from observatory.engines.llamacpp_gguf import main

if __name__ == "__main__":
    sys.exit(main())
