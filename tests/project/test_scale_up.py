"""training/scale_up.py: the scaled model computes the small model's function.

The large model is built at a reduced size (hidden 512, 6 layers, 8 heads of
64 in 4 KV groups, intermediate 512) in fp32 and run with training.model's
reference implementation; main logits and both MTP draft steps must equal the
small field model's within fp32 rounding.
"""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
import torch
from safetensors.torch import load_file

from tests.support.paths import REPO
from training import model as ref
from training import scale_up

FIELD = REPO / "observatory" / "field_model"
TOL = 1e-4


def _build(cfg: dict, sd: dict[str, torch.Tensor]) -> ref.MiMoForCausalLM:
    mc = ref.ModelConfig(**{f.name: cfg[f.name] for f in fields(ref.ModelConfig)})
    m = ref.MiMoForCausalLM(mc)
    m.load_state_dict(sd, strict=True)
    return m.eval()


@pytest.fixture(scope="module")
def pair() -> tuple[ref.MiMoForCausalLM, ref.MiMoForCausalLM, dict]:
    small_cfg = json.loads((FIELD / "config.json").read_text())
    sd = load_file(str(FIELD / "model.safetensors"))
    big_cfg = scale_up.big_config(small_cfg, hidden=512, layers=6, heads=8, kv_heads=4, intermediate=512,
                                  dtype="float32")
    big_sd = scale_up.scale_state_dict(sd, small_cfg, big_cfg)
    return _build(small_cfg, sd), _build(big_cfg, big_sd), big_cfg


def _outputs(m: ref.MiMoForCausalLM, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    pos = torch.arange(ids.shape[1])[None].expand_as(ids)
    with torch.no_grad():
        hidden = m.trunk(ids, pos)
        main = m.main_logits(hidden)
        # teacher-forced drafts: step 1 reads token t+1, step 2 the step-1 draft at t (as vLLM does)
        nxt = torch.roll(ids, -1, dims=1)
        s1, kv1 = m.mtp_step1(hidden, nxt, pos)
        d1 = m.mtp_logits(s1)
        s2 = m.mtp_step2(s1, d1.argmax(-1), pos, kv1)
        d2 = m.mtp_logits(s2)
    return main, d1, d2


def test_scaled_model_equals_the_small_one(pair: tuple) -> None:
    small, big, big_cfg = pair
    assert big.cfg.hidden_size == 512 and big.cfg.head_dim == 64 and len(big.model.layers) == 6
    ids = torch.randint(3, big_cfg["vocab_size"], (2, 48), generator=torch.Generator().manual_seed(0))
    for name, a, b in zip(("main", "mtp step 1", "mtp step 2"), _outputs(small, ids), _outputs(big, ids)):
        diff = (a - b).abs().max().item()
        assert diff < TOL, f"{name}: logits differ by {diff}"
        assert torch.equal(a.argmax(-1), b.argmax(-1)), name


def test_filler_layers_are_identity_but_not_empty(pair: tuple) -> None:
    _, big, _ = pair
    filler = big.model.layers[5]
    assert filler.self_attn.q_proj.weight.abs().sum() > 0  # the GPU does a real layer's work
    assert filler.self_attn.o_proj.weight.abs().sum() == 0 and filler.mlp.down_proj.weight.abs().sum() == 0


def test_bad_sizes_are_refused() -> None:
    small_cfg = json.loads((FIELD / "config.json").read_text())
    with pytest.raises(ValueError, match="groups"):
        scale_up.big_config(small_cfg, 512, 6, heads=8, kv_heads=8, intermediate=512, dtype="float32")
    with pytest.raises(ValueError, match="multiple"):
        scale_up.big_config(small_cfg, 480, 6, heads=10, kv_heads=5, intermediate=512, dtype="float32")
    with pytest.raises(ValueError, match="intermediate"):
        scale_up.big_config(small_cfg, 512, 6, heads=8, kv_heads=4, intermediate=128, dtype="float32")
