"""Train the default model (trunk + MTP head) on the generated corpus.

Deterministic: fixed seeds, 2 CPU threads, a fixed data order and a fixed
number of steps, so a re-run on the same machine reproduces the weights
bit for bit. Losses are taken on the assistant turn only:

- main head: token t+1 from the trunk at t;
- MTP step 1: token t+2 from (trunk hidden at t, token t+1);
- MTP step 2: token t+3 from (MTP step-1 output at t, token t+2), the way
  vLLM reuses the one MTP layer for a second draft token.

List answers need two details to learn where to stop (see plan_batches and
decision_weights): length-jittered batches and extra weight on the ","/eos
decisions.

Usage: python -m training.train [OUT_DIR]   (after training.build_tokenizer)
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from training.build_tokenizer import DEFAULT_OUT
from training.corpus import SEED, generate
from training.model import MiMoForCausalLM, ModelConfig
from training.model_card import model_card
from training.render import EOS_TOKEN, PAD_TOKEN, split_example

THREADS = 2
EVAL_SEED = SEED + 1
EVAL_EXAMPLES = 1000


@dataclass(frozen=True)
class HParams:
    """Optimisation settings."""

    steps: int = 6000
    tokens_per_batch: int = 3072  # padded tokens
    length_jitter: float = 64.0  # tokens; see plan_batches
    lr: float = 2e-3
    min_lr: float = 2e-4
    warmup: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    mtp1_weight: float = 0.5
    mtp2_weight: float = 0.25
    decision_weight: float = 5.0  # loss weight of "," and eos targets; see decision_weights
    init_std: float = 0.02


ARCH = dict(
    hidden_size=128,
    intermediate_size=384,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
)


@dataclass
class Sample:
    """One tokenized example: prompt + completion ids."""

    ids: list[int]
    prompt_len: int
    category: str


@dataclass
class Batch:
    """Padded ids, positions and the three loss masks (targets inside the
    assistant turn)."""

    ids: torch.Tensor  # [B, T]
    positions: torch.Tensor  # [B, T]
    main_mask: torch.Tensor  # [B, T-1]: predict ids[:, t+1]
    mtp1_mask: torch.Tensor  # [B, T-2]: predict ids[:, t+2]
    mtp2_mask: torch.Tensor  # [B, T-3]: predict ids[:, t+3]

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on `device`."""
        return Batch(*(getattr(self, f.name).to(device) for f in fields(self)))


def encode_corpus(tok: PreTrainedTokenizerBase, seed: int = SEED) -> list[Sample]:
    """The corpus as token ids, split where vLLM's prompt ends."""
    samples = []
    for ex in generate(seed):
        prompt, completion = split_example(ex)
        p = tok.encode(prompt, add_special_tokens=False)
        c = tok.encode(completion, add_special_tokens=False)
        samples.append(Sample(p + c, len(p), ex.category))
    return samples


def plan_batches(samples: list[Sample], hp: HParams, rng: random.Random) -> list[list[int]]:
    """Index batches within the token budget, shuffled. Samples are grouped by
    length plus random jitter: exact length buckets would give each batch
    answers of one length (one counting length, one primes list), which
    rewards stopping at a fixed position instead of reading the prompt."""
    jitter = [rng.random() * hp.length_jitter for _ in samples]
    order = sorted(range(len(samples)), key=lambda i: (len(samples[i].ids) + jitter[i], i))
    batches, cur, longest = [], [], 0
    for i in order:
        n = len(samples[i].ids)
        if cur and max(longest, n) * (len(cur) + 1) > hp.tokens_per_batch:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(samples: list[Sample], pad_id: int) -> Batch:
    """Right-padded batch (causal attention never sees the padding)."""
    t = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), t), pad_id, dtype=torch.long)
    target = torch.zeros((len(samples), t), dtype=torch.bool)
    for row, s in enumerate(samples):
        ids[row, : len(s.ids)] = torch.tensor(s.ids)
        target[row, s.prompt_len : len(s.ids)] = True
    positions = torch.arange(t).expand(len(samples), t)
    return Batch(ids, positions, target[:, 1:], target[:, 2:], target[:, 3:])


def decision_weights(tok: PreTrainedTokenizerBase, hp: HParams) -> torch.Tensor:
    """Per-target-token loss weights: `decision_weight` for "," and eos.

    In a list answer these are the continue/stop decisions, the only tokens
    that depend on the bound in the prompt (count to b, primes below N, the
    first N primes) and a small share of the loss otherwise."""
    weights = torch.ones(len(tok))
    weights[[tok.convert_tokens_to_ids(","), tok.convert_tokens_to_ids(EOS_TOKEN)]] = hp.decision_weight
    return weights


def losses(
    model: MiMoForCausalLM, b: Batch, weights: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Weighted) cross-entropies of the main head and the two MTP steps."""
    ids, pos = b.ids, b.positions
    hidden = model.trunk(ids, pos)
    main_logits = model.main_logits(hidden[:, :-1][b.main_mask])
    main = F.cross_entropy(main_logits, ids[:, 1:][b.main_mask], weight=weights)
    step1, kv1 = model.mtp_step1(hidden[:, :-1], ids[:, 1:], pos[:, :-1])
    mtp1_logits = model.mtp_logits(step1[:, :-1][b.mtp1_mask])
    mtp1 = F.cross_entropy(mtp1_logits, ids[:, 2:][b.mtp1_mask], weight=weights)
    step2 = model.mtp_step2(step1[:, :-1], ids[:, 2:], pos[:, :-2], kv1)
    mtp2_logits = model.mtp_logits(step2[:, :-1][b.mtp2_mask])
    mtp2 = F.cross_entropy(mtp2_logits, ids[:, 3:][b.mtp2_mask], weight=weights)
    return main, mtp1, mtp2


@torch.no_grad()
def evaluate(
    model: MiMoForCausalLM, samples: list[Sample], pad_id: int, hp: HParams, device: str = "cpu"
) -> dict[str, float]:
    """Mean (unweighted) cross-entropies of the three heads over the
    assistant tokens of `samples`."""
    sums, counts = [0.0, 0.0, 0.0], [0, 0, 0]
    for idx in plan_batches(samples, hp, random.Random(0)):
        b = collate([samples[i] for i in idx], pad_id).to(device)
        sizes = (int(b.main_mask.sum()), int(b.mtp1_mask.sum()), int(b.mtp2_mask.sum()))
        for i, (loss, n) in enumerate(zip(losses(model, b), sizes)):
            sums[i] += loss.item() * n
            counts[i] += n
    return {name: s / n for name, s, n in zip(("main", "mtp1", "mtp2"), sums, counts)}


def init_weights(model: MiMoForCausalLM, std: float) -> None:
    """Normal(0, std) matrices, zero biases, unit norms."""
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            torch.nn.init.zeros_(p)
        elif p.dim() >= 2:
            torch.nn.init.normal_(p, std=std)


def lr_at(step: int, hp: HParams) -> float:
    """Linear warm-up, then cosine decay to min_lr."""
    if step < hp.warmup:
        return hp.lr * (step + 1) / hp.warmup
    frac = (step - hp.warmup) / max(1, hp.steps - hp.warmup)
    return hp.min_lr + 0.5 * (hp.lr - hp.min_lr) * (1 + math.cos(frac * math.pi))


def train(
    tok: PreTrainedTokenizerBase, hp: HParams = HParams(), device: str = "cpu"
) -> tuple[MiMoForCausalLM, dict[str, float]]:
    """Train from scratch; returns the model, its losses on an evaluation set
    (generated with another seed) and the training time. The shipped weights
    come from device "cpu" (see `main`); another device trains the same
    recipe, not the same bits."""
    torch.manual_seed(SEED)
    cfg = ModelConfig(vocab_size=len(tok), **ARCH)
    model = MiMoForCausalLM(cfg)
    init_weights(model, hp.init_std)
    model.to(device)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hp.lr,
        betas=(0.9, 0.95),
    )
    samples = encode_corpus(tok)
    pad_id = tok.convert_tokens_to_ids(PAD_TOKEN)
    weights = decision_weights(tok, hp).to(device)
    rng = random.Random(SEED)
    queue: list[list[int]] = []
    t0 = time.time()
    for step in range(hp.steps):
        if not queue:
            queue = plan_batches(samples, hp, rng)
        batch = collate([samples[i] for i in queue.pop()], pad_id).to(device)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, hp)
        main, mtp1, mtp2 = losses(model, batch, weights)
        loss = main + hp.mtp1_weight * mtp1 + hp.mtp2_weight * mtp2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip)
        opt.step()
        if step % 50 == 0 or step == hp.steps - 1:
            print(
                f"step {step:5d}  main {main.item():.4f}  mtp1 {mtp1.item():.4f}  "
                f"mtp2 {mtp2.item():.4f}  {time.time() - t0:.0f}s",
                flush=True,
            )
    seconds = time.time() - t0
    model.eval()
    report: dict[str, float] = evaluate(
        model, encode_corpus(tok, EVAL_SEED)[:EVAL_EXAMPLES], pad_id, hp, device
    )
    model.cpu()
    report["train_seconds"] = seconds
    report["train_tokens_per_epoch"] = sum(len(s.ids) for s in samples)
    return model, report


def save(model: MiMoForCausalLM, tok: PreTrainedTokenizerBase, out_dir: Path) -> str:
    """Write model.safetensors, config.json, generation_config.json; returns
    the sha256 of model.safetensors."""
    eos, pad = tok.convert_tokens_to_ids(EOS_TOKEN), tok.convert_tokens_to_ids(PAD_TOKEN)
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    path = out_dir / "model.safetensors"
    save_file(tensors, str(path), metadata={"format": "pt"})
    config = model.cfg.hf_config(eos_token_id=eos, pad_token_id=pad)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"eos_token_id": eos, "pad_token_id": pad}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main(out_dir: Path = DEFAULT_OUT) -> None:
    """Train and save into `out_dir` (which already holds the tokenizer),
    then write its README.md."""
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    tok = AutoTokenizer.from_pretrained(out_dir)
    hp = HParams()
    model, report = train(tok, hp)
    sha = save(model, tok, out_dir)
    report |= {"threads": THREADS, "eval_examples": EVAL_EXAMPLES}
    (out_dir / "README.md").write_text(model_card(model, hp, report, sha), encoding="utf-8")
    print(json.dumps({"sha256": sha, **report}, indent=2))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
