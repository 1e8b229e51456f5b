"""Embed a small MiMo model exactly into a large dense layout: the same answers at a GPU-bound size.

The field model (observatory/field_model: hidden 128, 4 layers, heads of 32)
has the acceptance, entropy and near-ties of real text (its model card), but it
decodes a token in about a millisecond on an H200, where the engine's own
Python time, not the GPU, sets the step; speed figures on it say nothing about
a deployment (issue 27 item 5, issue 29 item 5). This script writes the same
function in the 7B-class dense layout of `examples/gpu/make_dense_config.py`
(hidden 4096, 32 layers, 32 heads of 128, 8 KV heads, intermediate 11008,
bf16): every step reads the large model's weights from HBM, while main and MTP
logits equal the small model's (exactly in fp32, up to bf16 rounding in bf16).

How the small function sits inside the large one (`scale_state_dict`):

- residual stream: the small model's 128 dims are the first 128 of 4096, the
  rest stay zero through every layer (embeddings, o_proj, down_proj and the
  MTP input_proj write nothing there);
- RMSNorm: a zero-padded vector's mean square is the small one's times
  128/4096, so the rsqrt grows by sqrt(4096/128); every norm weight is
  multiplied by sqrt(128/4096) and eps by 128/4096, and the norm's output is
  then the small output, zero-padded;
- heads: small head h (KV group g = h // (heads/kv), index i in the group)
  becomes large head g * (big group size) + i, small KV head g large KV head g;
  the other heads read zero queries and keys and their o_proj columns are zero,
  so they add nothing;
- rotary (neox): small dims j and 16 + j (a rotary pair at frequency
  theta^(-2j/32)) become large dims 4j and 64 + 4j (the pair at
  theta^(-8j/128), the same frequency); values take the first 32 dims of the
  large head, with o_proj's columns to match;
- attention scale: 1/sqrt(128) instead of 1/sqrt(32) halves every score, so
  q's weight and bias are doubled;
- MLP: the small intermediate is the first 384 of 11008 (the rest reads zero
  gate and up rows: silu(0) * 0 = 0);
- layers past the small model's are identity layers: o_proj and down_proj
  zero (the residual passes unchanged), their other weights seeded random so
  the GPU does the work a real layer does (`--filler zero` for zeros);
- MTP: input_proj's two halves (hidden_layernorm(h), token_layernorm(e)) go to
  columns 0.. and H_big.. of the large [H_big, 2 H_big] matrix.

`tests/project/test_scale_up.py` checks main and MTP logits (steps 1 and 2) against
the small model at a reduced large size in fp32 (training.model).

    python training/scale_up.py observatory/field_model OUT [--hidden 4096 --layers 32 --heads 32
        --kv-heads 8 --intermediate 11008 --dtype bfloat16 --device cuda]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from pathlib import Path

import torch

COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                "chat_template.jinja")
FILLER_SEED = 27
FILLER_STD = 0.02  # the config's initializer_range


def big_config(small: dict, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int,
               dtype: str) -> dict:
    """SMALL's config.json at the large size (eps scaled so every norm's output is the small one's)."""
    if hidden < small["hidden_size"] or layers < small["num_hidden_layers"]:
        raise ValueError("the large model must be at least as wide and as deep as the small one")
    if intermediate < small["intermediate_size"]:
        raise ValueError(f"--intermediate {intermediate} is below the small model's {small['intermediate_size']}")
    sh, skv = small["num_attention_heads"], small["num_key_value_heads"]
    if kv_heads < skv or heads // kv_heads < sh // skv:
        raise ValueError(f"{heads} heads / {kv_heads} KV heads cannot hold {sh} / {skv} (groups of {sh // skv})")
    small_hd, big_hd = small["hidden_size"] // sh, hidden // heads
    if big_hd % small_hd or big_hd < small_hd:
        raise ValueError(f"head width {big_hd} is not a multiple of the small model's {small_hd}")
    return {**small, "hidden_size": hidden, "num_hidden_layers": layers, "max_window_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "intermediate_size": intermediate,
            "rms_norm_eps": small["rms_norm_eps"] * small["hidden_size"] / hidden, "torch_dtype": dtype}


def head_dim_map(small_hd: int, big_hd: int) -> torch.Tensor:
    """Large-head dim of each small-head dim: neox rotary pairs (j, j + d/2) keep their frequency."""
    stride, half, big_half = big_hd // small_hd, small_hd // 2, big_hd // 2
    return torch.tensor([stride * j if j < half else big_half + stride * (j - half) for j in range(small_hd)])


def _rows(small_cfg: dict, big_cfg: dict, n_small_heads: int, n_big_heads: int, kv: bool,
          rotary: bool) -> torch.Tensor:
    """Large output rows of each small projection row (q: heads in their KV groups; k/v: KV heads)."""
    sh, skv = small_cfg["num_attention_heads"], small_cfg["num_key_value_heads"]
    bh, bkv = big_cfg["num_attention_heads"], big_cfg["num_key_value_heads"]
    small_hd, big_hd = small_cfg["hidden_size"] // sh, big_cfg["hidden_size"] // bh
    dims = head_dim_map(small_hd, big_hd) if rotary else torch.arange(small_hd)
    rows = []
    for h in range(n_small_heads):
        big_head = h if kv else (h // (sh // skv)) * (bh // bkv) + h % (sh // skv)
        rows.append(big_head * big_hd + dims)
    del n_big_heads
    return torch.cat(rows)


def _filler(shape: tuple[int, ...], gen: torch.Generator | None, dtype: torch.dtype,
            device: str) -> torch.Tensor:
    if gen is None:
        return torch.zeros(shape, dtype=dtype, device=device)
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * FILLER_STD).to(dtype)


def scale_state_dict(sd: dict[str, torch.Tensor], small_cfg: dict, big_cfg: dict, dtype: torch.dtype = torch.float32,
                     device: str = "cpu", filler: str = "random") -> dict[str, torch.Tensor]:
    """The large model's weights (checkpoint names as SD's) computing SD's function."""
    H, h = big_cfg["hidden_size"], small_cfg["hidden_size"]
    sh, skv = small_cfg["num_attention_heads"], small_cfg["num_key_value_heads"]
    bh, bkv = big_cfg["num_attention_heads"], big_cfg["num_key_value_heads"]
    inter = big_cfg["intermediate_size"]
    small_hd, big_hd = h // sh, H // bh
    nscale = math.sqrt(h / H)  # RMSNorm of the zero-padded stream: rsqrt is sqrt(H/h) times the small one
    qrows = _rows(small_cfg, big_cfg, sh, bh, kv=False, rotary=True)
    krows = _rows(small_cfg, big_cfg, skv, bkv, kv=True, rotary=True)
    vrows = _rows(small_cfg, big_cfg, skv, bkv, kv=True, rotary=False)
    orows = _rows(small_cfg, big_cfg, sh, bh, kv=False, rotary=False)  # o_proj columns: the heads' value dims
    qscale = math.sqrt(big_hd / small_hd)  # scores are scaled by 1/sqrt(head_dim)
    gen = None
    if filler == "random":
        gen = torch.Generator(device=device).manual_seed(FILLER_SEED)
    elif filler != "zero":
        raise ValueError(f"filler {filler!r}: random or zero")

    def z(*shape: int) -> torch.Tensor:
        return torch.zeros(shape, dtype=torch.float32, device=device)

    def place(t: torch.Tensor, rows: torch.Tensor | None, cols: torch.Tensor | None, shape: tuple[int, ...]) -> torch.Tensor:
        out = z(*shape)
        t = t.to(device=device, dtype=torch.float32)
        r = torch.arange(t.shape[0], device=device) if rows is None else rows.to(device)
        if t.dim() == 1:
            out[r] = t
        else:
            c = torch.arange(t.shape[1], device=device) if cols is None else cols.to(device)
            out[r[:, None], c[None, :]] = t
        return out

    def layer(prefix_small: str, prefix_big: str, out: dict[str, torch.Tensor]) -> None:
        g = sd.__getitem__
        a = f"{prefix_small}self_attn."
        A = f"{prefix_big}self_attn."
        out[A + "q_proj.weight"] = place(g(a + "q_proj.weight") * qscale, qrows, None, (bh * big_hd, H))
        out[A + "q_proj.bias"] = place(g(a + "q_proj.bias") * qscale, qrows, None, (bh * big_hd,))
        for name, rows in (("k_proj", krows), ("v_proj", vrows)):
            out[A + f"{name}.weight"] = place(g(a + f"{name}.weight"), rows, None, (bkv * big_hd, H))
            out[A + f"{name}.bias"] = place(g(a + f"{name}.bias"), rows, None, (bkv * big_hd,))
        out[A + "o_proj.weight"] = place(g(a + "o_proj.weight"), None, orows, (H, bh * big_hd))
        m, M = f"{prefix_small}mlp.", f"{prefix_big}mlp."
        out[M + "gate_proj.weight"] = place(g(m + "gate_proj.weight"), None, None, (inter, H))
        out[M + "up_proj.weight"] = place(g(m + "up_proj.weight"), None, None, (inter, H))
        out[M + "down_proj.weight"] = place(g(m + "down_proj.weight"), None, None, (H, inter))
        for n in ("input_layernorm", "post_attention_layernorm"):
            out[f"{prefix_big}{n}.weight"] = place(g(f"{prefix_small}{n}.weight") * nscale, None, None, (H,))

    def identity_layer(prefix: str, out: dict[str, torch.Tensor]) -> None:
        A, M = f"{prefix}self_attn.", f"{prefix}mlp."
        out[A + "q_proj.weight"] = _filler((bh * big_hd, H), gen, torch.float32, device)
        out[A + "q_proj.bias"] = z(bh * big_hd)
        for name in ("k_proj", "v_proj"):
            out[A + f"{name}.weight"] = _filler((bkv * big_hd, H), gen, torch.float32, device)
            out[A + f"{name}.bias"] = z(bkv * big_hd)
        out[A + "o_proj.weight"] = z(H, bh * big_hd)
        out[M + "gate_proj.weight"] = _filler((inter, H), gen, torch.float32, device)
        out[M + "up_proj.weight"] = _filler((inter, H), gen, torch.float32, device)
        out[M + "down_proj.weight"] = z(H, inter)
        for n in ("input_layernorm", "post_attention_layernorm"):
            out[f"{prefix}{n}.weight"] = torch.ones(H, dtype=torch.float32, device=device)

    out: dict[str, torch.Tensor] = {}
    out["model.embed_tokens.weight"] = place(sd["model.embed_tokens.weight"], None, None,
                                             (small_cfg["vocab_size"], H))
    out["lm_head.weight"] = place(sd["lm_head.weight"], None, None, (small_cfg["vocab_size"], H))
    out["model.norm.weight"] = place(sd["model.norm.weight"] * nscale, None, None, (H,))
    for n in range(big_cfg["num_hidden_layers"]):
        if n < small_cfg["num_hidden_layers"]:
            layer(f"model.layers.{n}.", f"model.layers.{n}.", out)
        else:
            identity_layer(f"model.layers.{n}.", out)
    mtp = "model.mtp_layers.0."
    layer(mtp, mtp, out)
    for n in ("token_layernorm", "hidden_layernorm", "final_layernorm"):
        out[f"{mtp}{n}.weight"] = place(sd[f"{mtp}{n}.weight"] * nscale, None, None, (H,))
    proj = sd[f"{mtp}input_proj.weight"]  # [h, 2h]: cat[hidden_layernorm(h_t), token_layernorm(e)]
    cols = torch.cat([torch.arange(h), H + torch.arange(h)])
    out[f"{mtp}input_proj.weight"] = place(proj, None, cols, (H, 2 * H))
    missing = set(sd) - set(out)
    if missing:
        raise ValueError(f"weights of the small model not placed: {sorted(missing)[:5]}")
    return {k: v.to(dtype).contiguous() for k, v in out.items()}


def scale_model(src: Path, out: Path, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int,
                dtype: str, device: str, filler: str) -> dict:
    """Write OUT: config, copied tokenizer files and the large model.safetensors; returns the config."""
    from safetensors.torch import load_file, save_file

    small = json.loads((src / "config.json").read_text())
    big = big_config(small, hidden, layers, heads, kv_heads, intermediate, dtype)
    out.mkdir(parents=True, exist_ok=True)
    for name in COPIED_FILES:
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    sd = scale_state_dict(load_file(str(src / "model.safetensors")), small, big, getattr(torch, dtype), device,
                          filler)
    save_file({k: v.cpu() for k, v in sd.items()}, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(big, indent=1))
    return big


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--filler", default="random", choices=("random", "zero"))
    a = ap.parse_args()
    t0 = time.monotonic()
    cfg = scale_model(a.src, a.out, a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate, a.dtype, a.device,
                      a.filler)
    size = (a.out / "model.safetensors").stat().st_size
    print(f"wrote {a.out}: hidden {cfg['hidden_size']}, {cfg['num_hidden_layers']} layers, "
          f"{cfg['num_attention_heads']}/{cfg['num_key_value_heads']} heads, {a.dtype}, {size / 1e9:.2f} GB "
          f"in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
