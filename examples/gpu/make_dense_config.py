"""Write a dense model folder (config and tokenizer, no weights) for --load-format dummy: the bundled
model's own architecture (MiMoForCausalLM: a Qwen2 stack plus one MTP layer) at a 7B-class size.

Used by examples/gpu/run_bench_h200.sh (decode mode) to compare the observatory's decode figures with
`vllm bench serve` on a server whose step time is the GPU's (about 11 GB of bf16 weights read per
token), not the host's: the bundled tiny model decodes a token in about a millisecond, where the
engine's own Python jitter is larger than the +-2% the comparison must resolve. Weights are random;
answers are garbage, so both sides ask the server to ignore EOS.

    python examples/gpu/make_dense_config.py OUT_DIR [--hidden 4096] [--layers 32]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

DEFAULT_MODEL = Path(__file__).resolve().parents[2] / "observatory" / "default_model"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def dense_config(base: dict, hidden: int, layers: int) -> dict:
    """BASE (the bundled model's config) scaled to HIDDEN x LAYERS, bf16, heads of 128, 4:1 grouped KV."""
    heads = hidden // 128
    return {**base, "hidden_size": hidden, "intermediate_size": hidden * 11008 // 4096,
            "num_hidden_layers": layers, "max_window_layers": layers, "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 4), "max_position_embeddings": 4096,
            "torch_dtype": "bfloat16"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=32)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (DEFAULT_MODEL / name).exists():
            shutil.copy(DEFAULT_MODEL / name, out / name)
    base = json.loads((DEFAULT_MODEL / "config.json").read_text())
    cfg = dense_config(base, a.hidden, a.layers)
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    print(f"wrote {out}: {cfg['architectures'][0]}, hidden {a.hidden}, {a.layers} layers, vocab {cfg['vocab_size']}")


if __name__ == "__main__":
    main()
