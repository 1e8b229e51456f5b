"""Train the field model (trunk + MTP head) on the field corpus, on CPU.

The model, losses, batching, initialisation and schedule are the default
model's (`training.model`, `training.train`): main head on token t+1, MTP
step 1 on t+2 and step 2 on t+3 the way vLLM drafts with one MiMo MTP layer.
What differs: the corpus (real package text, `training.field.corpus`), one
thread, no decision weights, examples longer than MAX_TOKENS dropped, and
checkpoints: every CKPT_EVERY steps the model files are written to OUT_DIR
(usable as they are) and the optimiser/data state to CKPT, from which a
stopped run resumes to the same bits. A wall-clock budget (`--budget-s`)
stops the run early with the last checkpoint saved; the steps reached are
recorded in train_report.json.

Usage: python -m training.field.train [--out DIR] [--budget-s S]
       (after training.field.build_tokenizer)
"""

from __future__ import annotations

import argparse
import json
import pickle
import random
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from training.corpus import Example
from training.field.build_tokenizer import FIELD_MODEL
from training.field.corpus import SEED, generate, pools
from training.field.sources import documents
from training.model import MiMoForCausalLM, ModelConfig
from training.render import PAD_TOKEN, split_example
from training.train import HParams, Sample, collate, evaluate, init_weights, losses, lr_at, plan_batches, save

THREADS = 1
MAX_TOKENS = 320
CKPT_EVERY = 100
CKPT = Path("/tmp/field-ckpt/state.pt")
EVAL_COUNTS = {"code": 150, "recitation": 100, "prose_en": 100, "prose_zh": 100, "tool_call": 60, "json": 60}

HP = HParams(
    steps=1300,
    tokens_per_batch=4096,
    length_jitter=64.0,
    lr=2e-3,
    min_lr=2e-4,
    warmup=100,
    mtp1_weight=0.5,
    mtp2_weight=0.25,
    decision_weight=1.0,
)
ARCH = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
)


def encode(tok: PreTrainedTokenizerBase, examples: list[Example]) -> list[Sample]:
    """Examples as token ids (prompt as vLLM renders it + completion), those
    longer than MAX_TOKENS dropped."""
    out = []
    for ex in examples:
        prompt, completion = split_example(ex)
        p = tok.encode(prompt, add_special_tokens=False)
        c = tok.encode(completion, add_special_tokens=False)
        if len(p) + len(c) <= MAX_TOKENS:
            out.append(Sample(p + c, len(p), ex.category))
    return out


def eval_samples(tok: PreTrainedTokenizerBase) -> list[Sample]:
    """Examples from the held-out documents (another seed): the evaluation set."""
    return encode(tok, list(generate(pools(documents(), held=True), SEED + 1, EVAL_COUNTS)))


def _state(model: MiMoForCausalLM, opt: torch.optim.Optimizer, step: int, rng: random.Random,
           queue: list[list[int]], elapsed: float) -> dict[str, Any]:
    return {"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
            "rng": pickle.dumps(rng.getstate()), "queue": queue, "elapsed": elapsed}


def train(tok: PreTrainedTokenizerBase, out_dir: Path, budget_s: float) -> dict[str, Any]:
    """Train (resuming from CKPT when present) until HP.steps or the budget."""
    torch.manual_seed(SEED)
    cfg = ModelConfig(vocab_size=len(tok), **ARCH)  # type: ignore[arg-type]
    model = MiMoForCausalLM(cfg)
    init_weights(model, HP.init_std)
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": HP.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=HP.lr, betas=(0.9, 0.95),
    )
    samples = encode(tok, list(generate(pools(documents()))))
    pad_id = tok.convert_tokens_to_ids(PAD_TOKEN)
    rng = random.Random(SEED)
    queue: list[list[int]] = []
    step, elapsed = 0, 0.0
    if CKPT.exists():
        st = torch.load(CKPT, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, queue, elapsed = st["step"], st["queue"], st["elapsed"]
        rng.setstate(pickle.loads(st["rng"]))
        print(f"resumed at step {step}", flush=True)
    t0 = time.time() - elapsed
    model.train()
    while step < HP.steps and time.time() - t0 < budget_s:
        if not queue:
            queue = plan_batches(samples, HP, rng)
        batch = collate([samples[i] for i in queue.pop()], pad_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, HP)
        main, mtp1, mtp2 = losses(model, batch)
        loss = main + HP.mtp1_weight * mtp1 + HP.mtp2_weight * mtp2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), HP.grad_clip)
        opt.step()
        step += 1
        if step % 25 == 0:
            print(f"step {step:5d}  main {main.item():.4f}  mtp1 {mtp1.item():.4f}  "
                  f"mtp2 {mtp2.item():.4f}  {time.time() - t0:.0f}s", flush=True)
        if step % CKPT_EVERY == 0 or step == HP.steps:
            CKPT.parent.mkdir(parents=True, exist_ok=True)
            torch.save(_state(model, opt, step, rng, queue, time.time() - t0), CKPT.with_suffix(".tmp"))
            CKPT.with_suffix(".tmp").replace(CKPT)
            save(model, tok, out_dir)
    model.eval()
    sha = save(model, tok, out_dir)
    report: dict[str, Any] = {
        "steps_done": step, "steps_planned": HP.steps, "train_seconds": round(time.time() - t0),
        "threads": THREADS, "train_examples": len(samples),
        "train_tokens_per_epoch": sum(len(s.ids) for s in samples),
        "tokens_per_batch": HP.tokens_per_batch, "sha256": sha,
        "hparams": asdict(HP), "arch": ARCH,
        "params": sum(p.numel() for p in model.parameters()),
    }
    report["eval_loss_heldout"] = evaluate(model, eval_samples(tok), pad_id, HP)
    (out_dir / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main() -> None:
    """Train into --out (which already holds the tokenizer)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=FIELD_MODEL)
    ap.add_argument("--budget-s", type=float, default=float("inf"))
    args = ap.parse_args()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    tok = AutoTokenizer.from_pretrained(args.out)
    print(json.dumps(train(tok, args.out, args.budget_s), indent=2), flush=True)


if __name__ == "__main__":
    main()
