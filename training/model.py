"""A small MiMo model (Qwen2 decoder + one MTP layer) in plain PyTorch.

It computes exactly what vLLM's CPU build computes for ``MiMoForCausalLM``
(vllm/model_executor/models/mimo.py) and its drafter ``MiMoMTP``
(mimo_mtp.py), so training optimises the very functions that serve it:

- the trunk returns the hidden state *before* the final norm; the main
  logits are ``lm_head(norm(h))``;
- the MTP layer at position t takes the trunk's pre-norm hidden state h_t and
  the embedding of token t+1 (zeroed where the position is 0), and predicts
  token t+2: ``input_proj(cat[hidden_layernorm(h_t), token_layernorm(e)])``
  -> one Qwen2 decoder layer (causal, rotary positions = target positions)
  -> ``final_layernorm`` -> the shared ``lm_head`` (no ``model.norm``);
- drafting k > 1 tokens reuses the same MTP layer, fed with its own output
  (after ``final_layernorm``) as the hidden state, one position further on.

State-dict names are the checkpoint names vLLM loads (MTP block weights
without the ``mtp_block`` prefix).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn

KV = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class ModelConfig:
    """Architecture numbers (a subset of the HF Qwen2 config)."""

    vocab_size: int
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 1024

    @property
    def head_dim(self) -> int:
        """Per-head width."""
        return self.hidden_size // self.num_attention_heads

    def hf_config(self, eos_token_id: int, pad_token_id: int) -> dict:
        """config.json for vLLM / transformers."""
        return {
            "architectures": ["MiMoForCausalLM"],
            "model_type": "qwen2",
            **asdict(self),
            "num_nextn_predict_layers": 1,
            "hidden_act": "silu",
            "attention_dropout": 0.0,
            "initializer_range": 0.02,
            "tie_word_embeddings": False,
            "use_cache": True,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": self.num_hidden_layers,
            "bos_token_id": None,
            "eos_token_id": eos_token_id,
            "pad_token_id": pad_token_id,
            "torch_dtype": "float32",
        }


class RMSNorm(nn.Module):
    """Qwen2 RMSNorm."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotary(positions: torch.Tensor, cfg: ModelConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of shape [..., T, head_dim] for neox-style rotary embedding."""
    d = cfg.head_dim
    steps = torch.arange(0, d, 2, dtype=torch.float32, device=positions.device)
    inv_freq = 1.0 / (cfg.rope_theta ** (steps / d))
    freqs = positions.to(torch.float32)[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Qwen2 grouped-query attention (q/k/v biases, no o bias)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        hd = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, cfg.num_attention_heads * hd, bias=True)
        self.k_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=True)
        self.v_proj = nn.Linear(cfg.hidden_size, cfg.num_key_value_heads * hd, bias=True)
        self.o_proj = nn.Linear(cfg.num_attention_heads * hd, cfg.hidden_size, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        context: KV | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """Causal self-attention over x [B, T, H] (rope: cos/sin [B, T, D]).

        With `context` (keys/values of another sequence of the same length),
        query t attends to the context entries 0..t and to its own entry only.
        Returns the output and this sequence's (rotated) keys and values.
        """
        b, t, _ = x.shape
        hd, nh, nkv = self.cfg.head_dim, self.cfg.num_attention_heads, self.cfg.num_key_value_heads
        q = self.q_proj(x).view(b, t, nh, hd).transpose(1, 2)
        k = self.k_proj(x).view(b, t, nkv, hd).transpose(1, 2)
        v = self.v_proj(x).view(b, t, nkv, hd).transpose(1, 2)
        cos, sin = rope[0].unsqueeze(1), rope[1].unsqueeze(1)
        q, k = _apply_rotary(q, cos, sin), _apply_rotary(k, cos, sin)
        if context is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            ones = torch.ones(t, t, dtype=torch.bool, device=x.device)
            mask = torch.cat([ones.tril(), torch.eye(t, dtype=torch.bool, device=x.device)], dim=1)
            out = F.scaled_dot_product_attention(
                q,
                torch.cat([context[0], k], dim=2),
                torch.cat([context[1], v], dim=2),
                attn_mask=mask,
                enable_gqa=True,
            )
        return self.o_proj(out.transpose(1, 2).reshape(b, t, nh * hd)), (k, v)


class MLP(nn.Module):
    """SwiGLU feed-forward."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Qwen2 pre-norm decoder layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        context: KV | None = None,
    ) -> tuple[torch.Tensor, KV]:
        """The layer's output and its attention keys/values (see `Attention`)."""
        attn, kv = self.self_attn(self.input_layernorm(x), rope, context)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class MTPLayer(DecoderLayer):
    """MiMo's MTP layer: its decoder-block weights sit at the top level (the
    checkpoint has no ``mtp_block`` prefix), plus the four MTP-only modules."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__(cfg)
        self.token_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.input_proj = nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
        self.final_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def fuse(self, hidden: torch.Tensor, emb: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The block's input from the previous hidden state and the next token's
        embedding (zeroed at position 0, as vLLM does)."""
        emb = torch.where(positions.unsqueeze(-1) == 0, 0.0, emb)
        return self.input_proj(
            torch.cat([self.hidden_layernorm(hidden), self.token_layernorm(emb)], dim=-1)
        )


class Model(nn.Module):
    """``model.*``: embeddings, trunk layers, final norm and the MTP layer."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mtp_layers = nn.ModuleList([MTPLayer(cfg)])


class MiMoForCausalLM(nn.Module):
    """Trunk + main head + MTP drafter, with vLLM's checkpoint names."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.model = Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @property
    def mtp(self) -> MTPLayer:
        """The single MTP layer."""
        return self.model.mtp_layers[0]

    def trunk(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Pre-norm hidden states [B, T, H] (MiMoModel.forward's output)."""
        rope = rotary(positions, self.cfg)
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x, _ = layer(x, rope)
        return x

    def main_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits from pre-norm hidden states."""
        return self.lm_head(self.model.norm(hidden))

    def mtp_logits(self, mtp_out: torch.Tensor) -> torch.Tensor:
        """Draft logits from the MTP layer's output (already final-normed)."""
        return self.lm_head(mtp_out)

    def mtp_step1(
        self, hidden: torch.Tensor, next_ids: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, KV]:
        """MTP output at every position t from h_t and token t+1 (causal over
        the MTP's own sequence; predicts token t+2 via `mtp_logits`), and the
        MTP layer's keys/values (its KV cache)."""
        mtp = self.mtp
        x = mtp.fuse(hidden, self.model.embed_tokens(next_ids), positions)
        x, kv = mtp(x, rotary(positions, self.cfg))
        return mtp.final_layernorm(x), kv

    def mtp_step2(
        self, step1_out: torch.Tensor, step2_ids: torch.Tensor, positions: torch.Tensor, kv1: KV
    ) -> torch.Tensor:
        """The second draft step for every position at once.

        For each t, vLLM's second step runs the same layer at position t+1 on
        (step-1 output at t, draft token t+2), attending to the step-1 entries
        at positions <= t (the MTP's KV cache, `kv1`, from `mtp_step1` over at
        least T positions) and to itself. Returns outputs [B, T, H] predicting
        token t+3 via `mtp_logits`.
        """
        mtp = self.mtp
        t = step1_out.shape[1]
        kv1 = (kv1[0][:, :, :t], kv1[1][:, :, :t])
        x = mtp.fuse(step1_out, self.model.embed_tokens(step2_ids), positions + 1)
        x, _ = mtp(x, rotary(positions + 1, self.cfg), context=kv1)
        return mtp.final_layernorm(x)

def load(model_dir: str | Path) -> MiMoForCausalLM:
    """The model saved in `model_dir` (config.json + model.safetensors)."""
    model_dir = Path(model_dir)
    hf = json.loads((model_dir / "config.json").read_text())
    cfg = ModelConfig(**{f.name: hf[f.name] for f in fields(ModelConfig)})
    model = MiMoForCausalLM(cfg)
    model.load_state_dict(load_file(str(model_dir / "model.safetensors")), strict=True)
    return model.eval()
