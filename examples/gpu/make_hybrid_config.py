"""Write a Qwen3.5-style hybrid model folder (config and tokenizer, no weights) for --load-format dummy.

3 of 4 layers gated-delta-net (linear attention), every 4th full attention,
one MTP layer: the shape of the field reports' Qwen3.5/3.6 deployments, scaled
to fit one device call. Weights are random (vLLM's dummy loader): acceptance
says nothing, but step times, r and c, and the HBM roofline share do.

    python examples/gpu/make_hybrid_config.py OUT_DIR [--hidden 4096] [--layers 32]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def hybrid_config(hidden: int, layers: int, vocab: int) -> dict:
    """A Qwen3_5ForConditionalGeneration config with a text model of the given size."""
    heads = hidden // 256
    text = {
        "model_type": "qwen3_5_text",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": hidden * 3,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 4),
        "head_dim": 256,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25, "rope_type": "default"},
        "attention_bias": False,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "mtp_num_hidden_layers": 1,
        "dtype": "bfloat16",
    }
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text,
        "vision_config": {"model_type": "qwen3_5", "depth": 2, "hidden_size": 256, "num_heads": 4,
                          "intermediate_size": 512, "out_hidden_size": hidden},
        # vision token ids inside the vocabulary (never used: --language-model-only)
        "image_token_id": vocab - 4, "video_token_id": vocab - 3,
        "vision_start_token_id": vocab - 2, "vision_end_token_id": vocab - 1,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--tokenizer-from", default=str(Path(__file__).resolve().parents[2] / "observatory" / "default_model"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    src = Path(a.tokenizer_from)
    for name in TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    vocab = len(json.loads((src / "tokenizer.json").read_text())["model"]["vocab"])
    added = json.loads((src / "tokenizer.json").read_text()).get("added_tokens", [])
    vocab = max([vocab, *[t["id"] + 1 for t in added]]) + 4  # room for the 4 vision ids
    (out / "config.json").write_text(json.dumps(hybrid_config(a.hidden, a.layers, vocab), indent=1))
    print(f"wrote {out}: hidden {a.hidden}, {a.layers} layers, vocab {vocab}")


if __name__ == "__main__":
    main()
