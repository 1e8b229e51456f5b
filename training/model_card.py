"""The default model's README.md, written by `training.train` after training."""

from __future__ import annotations

import platform
from collections import Counter
from dataclasses import asdict
from typing import Any

import torch

from training.corpus import generate
from training.model import MiMoForCausalLM


def model_card(model: MiMoForCausalLM, hparams: Any, report: dict[str, Any], sha256: str) -> str:
    """Markdown describing how the shipped weights were made."""
    cfg = model.cfg
    n_params = sum(p.numel() for p in model.parameters())
    mtp_params = sum(p.numel() for p in model.mtp.parameters())
    counts = Counter(ex.category for ex in generate())
    corpus = ", ".join(f"{cat} {n}" for cat, n in counts.items())
    hp = ", ".join(f"{k}={v}" for k, v in asdict(hparams).items())
    minutes = report["train_seconds"] / 60
    return f"""# observatory default model

A tiny, trained `MiMoForCausalLM` (Qwen2 decoder + one MTP layer) that vLLM's
CPU build serves with `--speculative-config '{{"method": "mtp", "num_speculative_tokens": K}}'`.
It speaks exactly what the default probe suite (`probes/default.toml`) asks:
recitation, counting, primes, hermes tool calls (`<tool_call>{{"name": ..., "arguments": {{...}}}}</tool_call>`),
and two or three sentences of English or Chinese prose on a dozen topics. It
knows nothing else. Made from scratch by `training/` in this repository: no
downloaded weights or data.

## Architecture

| | |
|---|---|
| layers (trunk) | {cfg.num_hidden_layers} Qwen2 decoder layers + 1 MTP layer (`num_nextn_predict_layers: 1`) |
| hidden / intermediate | {cfg.hidden_size} / {cfg.intermediate_size} |
| attention heads / kv heads / head dim | {cfg.num_attention_heads} / {cfg.num_key_value_heads} / {cfg.head_dim} (q/k/v biases) |
| vocabulary | {cfg.vocab_size} (byte-level BPE trained on the corpus, Qwen2 pre-tokenizer: digits and Han characters are single tokens) |
| rope theta / max positions | {cfg.rope_theta:g} / {cfg.max_position_embeddings} |
| parameters | {n_params:,} (MTP layer {mtp_params:,}), float32, untied `embed_tokens` / `lm_head` |

Chat format: ChatML (`<|im_start|>`, `<|im_end|>` = eos) with hermes-style tools
(`<tool_call>` and `</tool_call>` are single tokens); template in `tokenizer_config.json`.

## Training

- Corpus: {sum(counts.values())} generated conversations ({corpus}),
  {report["train_tokens_per_epoch"]:,} tokens, rendered through the chat template above.
  The default probes are held out (see `training/corpus.py`).
- Losses on the assistant turn only: main head (token t+1), MTP step 1
  (token t+2 from the trunk's pre-norm hidden state at t and token t+1, as vLLM
  drafts) and MTP step 2 (the same layer fed its own output, as vLLM drafts
  the second of k=2 tokens).
- Batches grouped by length with random jitter (exact length buckets teach a
  list to stop at a fixed length), the "," / eos targets (a list's
  continue/stop decisions) weighted {hparams.decision_weight:g}x, and twice as many
  counting and primes conversations as the first recipe, for {hparams.steps} steps: the
  sweep in `training/README.md` shows what each of these did.
- Hyper-parameters: {hp}; AdamW, seed fixed, {report["threads"]} CPU threads,
  torch {torch.__version__}.
- Training time: {report["train_seconds"]:.0f} s ({minutes:.1f} min) on {platform.machine()} CPU
  (shared machine; wall-clock time varies with load, the weights do not).

Final losses (mean cross-entropy per assistant token, unweighted, over
{report["eval_examples"]} conversations generated with another seed):

| head | loss |
|---|---|
| main (t+1) | {report["main"]:.4f} |
| MTP step 1 (t+2) | {report["mtp1"]:.4f} |
| MTP step 2 (t+3) | {report["mtp2"]:.4f} |

## Files

`model.safetensors` sha256: `{sha256}`

Reproduce (deterministic: the same CPU type and torch version give the same bytes):

```
python -m training.build_tokenizer
python -m training.train
python -m training.check_mtp      # offline probe verdicts and MTP acceptance
observatory compare --arms base,mtp1,mtp2 --db /tmp/w.db
python -m training.wiring_check /tmp/w.db   # offline vs vLLM acceptance, probe by probe
```
"""
