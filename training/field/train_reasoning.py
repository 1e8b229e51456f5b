"""The field model's reasoning variant: tokenizer, fine-tune, offline check, card.

`observatory/field_reasoning_model/` is fine-tuned FROM the field model's
weights (observatory/field_model/, which stay untouched): its tokenizer is
the field tokenizer plus ``<think>`` (4096) and ``</think>`` (4097), added
like the tool tags (not special, so they stay in decoded text, as vLLM's
deepseek_r1 reasoning parser needs); its chat template is
`training.field.reasoning_corpus.CHAT_TEMPLATE`. embed_tokens gets the two
new rows from ``<tool_call>`` / ``</tool_call>``'s, lm_head the mean of its
rows. Training reuses `training.train`'s losses (main head, MTP step 1, MTP
step 2), batching and schedule on a mix of reasoning turns
(`reasoning_corpus`, prompt rendered with enable_thinking) and as many
examples of the original field corpus (so the non-thinking behaviour is
kept), one thread, deterministic, checkpoints every CKPT_EVERY steps (model
files usable as they are, optimiser/data state in CKPT; a stopped run
resumes). Weights are saved in bfloat16.

Usage:
  python -m training.field.train_reasoning tokenizer
  python -m training.field.train_reasoning train [--steps N] [--budget-s S]
  python -m training.field.train_reasoning check       # offline check + README.md
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import random
import re
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from training.check_mtp import draft_table, greedy, simulate
from training.corpus import Example
from training.field import reasoning_corpus as rc
from training.field.build_tokenizer import FIELD_MODEL
from training.field.corpus import generate as field_generate
from training.field.corpus import pools
from training.field.sources import documents
from training.field.train import ARCH, MAX_TOKENS, THREADS, eval_samples
from training.field.train import HP as FIELD_HP
from training.field.train import encode as encode_field
from training.model import MiMoForCausalLM, ModelConfig, load
from training.render import EOS_TOKEN, PAD_TOKEN
from training.train import Sample, collate, evaluate, losses, lr_at, plan_batches

OUT = FIELD_MODEL.parent / "field_reasoning_model"
CKPT = Path("/tmp/field-reasoning-ckpt/state.pt")
CKPT_EVERY = 50
SEED = rc.SEED
HP = replace(FIELD_HP, steps=900, lr=5e-4, min_lr=1e-4, warmup=20)
FIELD_SHARE = 1.0  # field-corpus examples per reasoning example
EVAL_COUNTS = {"code": 40, "recitation": 30, "prose_en": 30, "prose_zh": 30, "tool_call": 60, "json": 30}
CHECK_COUNTS = {"tool_call": 10, "code": 2, "recitation": 2, "prose_en": 2, "prose_zh": 2, "json": 2}
CHECK_MAX_TOKENS = 160
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


# ---------------------------------------------------------------- tokenizer
def build_tokenizer(out: Path = OUT) -> None:
    """tokenizer.json (the field one + the think tags) and tokenizer_config.json
    (the field one + their entries + the thinking template)."""
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(FIELD_MODEL / "tokenizer.json"))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in rc.THINK_TOKENS])
    ids = [tok.token_to_id(t) for t in rc.THINK_TOKENS]
    if ids != [4096, 4097]:
        raise SystemExit(f"think tags got ids {ids}")
    tok.save(str(out / "tokenizer.json"))
    cfg = json.loads((FIELD_MODEL / "tokenizer_config.json").read_text(encoding="utf-8"))
    for t, i in zip(rc.THINK_TOKENS, ids):
        cfg["added_tokens_decoder"][str(i)] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                               "single_word": False, "special": False}
    cfg["chat_template"] = rc.CHAT_TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"tokenizer: {tok.get_vocab_size()} tokens -> {out}")


# ---------------------------------------------------------------- data
def encode_reasoning(tok: PreTrainedTokenizerBase, examples: list[Example], seed: int = SEED) -> list[Sample]:
    """Reasoning examples as ids (prompt with enable_thinking + completion);
    NO_BLANK_SHARE of the tool calls without the blank line after </think>."""
    rng = random.Random(seed)
    out = []
    for ex in examples:
        no_blank = ex.category == "tool_call" and rng.random() < rc.NO_BLANK_SHARE
        prompt, completion = rc.split_thinking(ex, no_blank=no_blank)
        p = tok.encode(prompt, add_special_tokens=False)
        c = tok.encode(completion, add_special_tokens=False)
        if len(p) + len(c) <= MAX_TOKENS:
            out.append(Sample(p + c, len(p), "think_" + ex.category))
    return out


def training_samples(tok: PreTrainedTokenizerBase) -> tuple[list[Sample], list[Sample]]:
    """(reasoning samples, field-corpus samples): the mix trained on."""
    docs = documents()
    reasoning = encode_reasoning(tok, list(rc.generate(pools(docs))))
    field = list(field_generate(pools(docs)))
    random.Random(SEED).shuffle(field)
    return reasoning, encode_field(tok, field[: int(len(reasoning) * FIELD_SHARE * 1.05)])[: int(len(reasoning) * FIELD_SHARE)]


def heldout_reasoning(tok: PreTrainedTokenizerBase) -> list[Sample]:
    """Reasoning examples from the held-out documents (another seed)."""
    return encode_reasoning(tok, list(rc.generate(pools(documents(), held=True), SEED + 1, EVAL_COUNTS)), SEED + 1)


# ---------------------------------------------------------------- model
def init_from_field(vocab: int) -> MiMoForCausalLM:
    """The field model's weights with the two new vocabulary rows."""
    field = load(FIELD_MODEL)
    hf = json.loads((FIELD_MODEL / "config.json").read_text())
    cfg = ModelConfig(vocab_size=vocab, **{k: hf[k] for k in ARCH})  # type: ignore[arg-type]
    model = MiMoForCausalLM(cfg)
    state = field.state_dict()
    n_new = vocab - hf["vocab_size"]
    tool_rows = [hf["vocab_size"] - 2, hf["vocab_size"] - 1]  # <tool_call>, </tool_call>
    emb = state["model.embed_tokens.weight"]
    head = state["lm_head.weight"]
    state["model.embed_tokens.weight"] = torch.cat([emb, emb[tool_rows[:n_new]].clone()])
    state["lm_head.weight"] = torch.cat([head, head.mean(0, keepdim=True).expand(n_new, -1).clone()])
    model.load_state_dict(state, strict=True)
    return model


def save_bf16(model: MiMoForCausalLM, tok: PreTrainedTokenizerBase, out: Path) -> str:
    """model.safetensors (bfloat16), config.json, generation_config.json; the sha256."""
    eos, pad = tok.convert_tokens_to_ids(EOS_TOKEN), tok.convert_tokens_to_ids(PAD_TOKEN)
    tensors = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    path = out / "model.safetensors"
    save_file(tensors, str(path.with_suffix(".tmp")), metadata={"format": "pt"})
    path.with_suffix(".tmp").replace(path)
    config = model.cfg.hf_config(eos_token_id=eos, pad_token_id=pad) | {"torch_dtype": "bfloat16"}
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": eos, "pad_token_id": pad}, indent=2) + "\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train(tok: PreTrainedTokenizerBase, out: Path, steps: int, budget_s: float) -> dict[str, Any]:
    """Fine-tune (resuming from CKPT when present) until `steps` or the budget."""
    hp = replace(HP, steps=steps)
    torch.manual_seed(SEED)
    model = init_from_field(len(tok))
    decay = [p for _, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for _, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=hp.lr, betas=(0.9, 0.95),
    )
    reasoning, field = training_samples(tok)
    samples = reasoning + field
    pad_id = tok.convert_tokens_to_ids(PAD_TOKEN)
    rng = random.Random(SEED)
    queue: list[list[int]] = []
    step, elapsed = 0, 0.0
    log: list[dict[str, float]] = []
    if CKPT.exists():
        st = torch.load(CKPT, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, queue, elapsed, log = st["step"], st["queue"], st["elapsed"], st["log"]
        rng.setstate(pickle.loads(st["rng"]))
        print(f"resumed at step {step}", flush=True)
    t0 = time.time() - elapsed
    model.train()
    while step < hp.steps and time.time() - t0 < budget_s:
        if not queue:
            queue = plan_batches(samples, hp, rng)
        batch = collate([samples[i] for i in queue.pop()], pad_id)
        for group in opt.param_groups:
            group["lr"] = lr_at(step, hp)
        main, mtp1, mtp2 = losses(model, batch)
        loss = main + hp.mtp1_weight * mtp1 + hp.mtp2_weight * mtp2
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip)
        opt.step()
        step += 1
        if step % 10 == 0:
            row = {"step": step, "main": main.item(), "mtp1": mtp1.item(), "mtp2": mtp2.item(),
                   "seconds": round(time.time() - t0, 1)}
            log.append(row)
            print(f"step {step:4d}  main {row['main']:.4f}  mtp1 {row['mtp1']:.4f}  mtp2 {row['mtp2']:.4f}  "
                  f"{row['seconds']:.0f}s", flush=True)
        if step % CKPT_EVERY == 0 or step == hp.steps:
            CKPT.parent.mkdir(parents=True, exist_ok=True)
            state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                     "rng": pickle.dumps(rng.getstate()), "queue": queue, "elapsed": time.time() - t0, "log": log}
            torch.save(state, CKPT.with_suffix(".tmp"))
            CKPT.with_suffix(".tmp").replace(CKPT)
            save_bf16(model, tok, out)
    seconds = round(time.time() - t0)
    model.eval()
    sha = save_bf16(model, tok, out)
    shipped = load(out)  # the bf16 weights, as served (upcast to fp32)
    report: dict[str, Any] = {
        "base_model": "observatory/field_model",
        "base_sha256": hashlib.sha256((FIELD_MODEL / "model.safetensors").read_bytes()).hexdigest(),
        "steps_done": step, "steps_planned": hp.steps, "train_seconds": seconds, "threads": THREADS,
        "reasoning_examples": len(reasoning), "field_examples": len(field),
        "train_tokens_per_epoch": sum(len(s.ids) for s in samples), "tokens_per_batch": hp.tokens_per_batch,
        "sha256": sha, "dtype": "bfloat16", "hparams": asdict(hp), "arch": ARCH, "seed": SEED,
        "params": sum(p.numel() for p in model.parameters()),
        "new_rows_init": "embed_tokens: rows of <tool_call>/</tool_call>; lm_head: mean of the field rows",
        "loss_log": log,
    }
    report["eval_loss_heldout_reasoning"] = evaluate(shipped, heldout_reasoning(tok), pad_id, hp)
    report["eval_loss_heldout_field"] = evaluate(shipped, eval_samples(tok), pad_id, hp)
    (out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


# ---------------------------------------------------------------- offline check
def check_examples() -> list[Example]:
    """~20 reasoning prompts from the held-out documents (the probes' way;
    none a probe prompt)."""
    return list(rc.generate(pools(documents(), held=True), SEED + 99, CHECK_COUNTS))


def _judge(ex: Example, text: str, finished: bool) -> dict[str, Any]:
    reasoning, sep, after = text.partition("</think>")
    row: dict[str, Any] = {"think_end": bool(sep), "finished": finished, "reasoning": reasoning,
                           "after": after, "blank_line": after.startswith("\n\n")}
    if ex.category == "tool_call":
        calls = _TOOL_CALL.findall(after)
        parsed = []
        for raw in calls:
            try:
                parsed.append(json.loads(raw))
            except json.JSONDecodeError:
                parsed.append(None)
        ok = (len(parsed) == 1 and isinstance(parsed[0], dict) and isinstance(parsed[0].get("arguments"), dict)
              and _TOOL_CALL.sub("", after).strip() == "")
        row["well_formed"] = bool(sep) and finished and ok
        row["right_tool"] = row["well_formed"] and parsed[0].get("name") == ex.values[1]
        row["right_arguments"] = row["right_tool"] and parsed[0]["arguments"] == json.loads(ex.values[2])
    else:
        row["well_formed"] = bool(sep) and finished and bool(after.strip()) and "<think>" not in after
    return row


def offline_check(model_dir: Path = OUT) -> dict[str, Any]:
    """Greedy (fp32) on the check prompts with enable_thinking, and without it;
    simulated MTP acceptance (k=1, k=2) on the thinking outputs."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load(model_dir)
    eos = tok.convert_tokens_to_ids(EOS_TOKEN)
    think_ids = {tok.convert_tokens_to_ids(t) for t in rc.THINK_TOKENS}
    rows = []
    for ex in check_examples():
        row: dict[str, Any] = {"category": ex.category, "prompt": ex.user_text}
        for mode, kwargs in (("think", {"enable_thinking": True}), ("plain", {})):
            prompt = tok.apply_chat_template(ex.prompt_messages, tools=ex.tools, add_generation_prompt=True,
                                             tokenize=True, return_dict=False, **kwargs)
            out = greedy(model, prompt, CHECK_MAX_TOKENS, eos)
            finished = bool(out) and out[-1] == eos
            text = tok.decode([t for t in out if t != eos], skip_special_tokens=False)
            if mode == "think":
                row |= _judge(ex, text, finished)
                seq = prompt + out
                drafts = draft_table(model, seq)
                row["acceptance"] = {k: simulate(drafts, seq, len(prompt), k) for k in (1, 2)}
                row["text"] = text
            else:
                row["plain_text"] = text
                row["plain_think_tags"] = any(t in think_ids for t in out)
                row["plain_finished"] = finished
        rows.append(row)

    def rate(group: list[dict[str, Any]], k: int) -> list[float | None]:
        counts = [r["acceptance"][k] for r in group]
        steps = sum(c[0] for c in counts) // k
        return [sum(c[2 + i] for c in counts) / steps if steps else None for i in range(k)]

    summary: dict[str, Any] = {}
    for name, group in (("tool_call", [r for r in rows if r["category"] == "tool_call"]),
                        ("other", [r for r in rows if r["category"] != "tool_call"]), ("all", rows)):
        summary[name] = {
            "prompts": len(group), "think_end": sum(r["think_end"] for r in group),
            "well_formed": sum(r["well_formed"] for r in group),
            "right_tool": sum(r.get("right_tool", False) for r in group),
            "right_arguments": sum(r.get("right_arguments", False) for r in group),
            "blank_line_after_think": sum(r["blank_line"] for r in group if r["think_end"]),
            "plain_without_think_tags": sum(not r["plain_think_tags"] for r in group),
            "k1_pos1": rate(group, 1)[0], "k2_per_position": rate(group, 2),
        }
    return {"rows": rows, "summary": summary}


def field_probe_summary(model_dir: Path) -> dict[str, Any]:
    """probes/field.toml without thinking (the field model's own measurement,
    `training.field.measure`): passes and simulated acceptance per category."""
    from training.field.measure import PROBES, measure

    out = {}
    for name, g in measure(model_dir, PROBES)["summary"].items():
        out[name] = {"passed": g["passed"], "probes": g["probes"], "k1_pos1": g["k1"]["per_position"][0],
                     "k2_per_position": g["k2"]["per_position"], "tokens": g["tokens"]}
    return out


FIELD_MODEL_PROBES = {  # observatory/field_model/README.md: passes, k=1 pos 1, k=2 pos 1, k=2 pos 2
    "code": ("3/5", 0.723, 0.679, 0.429), "recitation": ("0/5", 0.654, 0.704, 0.127),
    "prose_en": ("5/5", 0.627, 0.590, 0.319), "prose_zh": ("1/5", 0.468, 0.429, 0.196),
    "tool_call": ("5/5", 0.827, 0.843, 0.824), "json": ("5/5", 0.833, 0.694, 0.629),
    "all": ("19/30", 0.644, 0.600, 0.351),
}


def _code_block(text: str) -> str:
    return "~~~text\n" + text.replace("~~~", "~ ~ ~") + "\n~~~"


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def card(report: dict[str, Any], check: dict[str, Any]) -> str:
    """The model card (README.md)."""
    hp = report["hparams"]
    lr, lf = report["eval_loss_heldout_reasoning"], report["eval_loss_heldout_field"]
    lines = [
        "# field_reasoning_model: the field model with a reasoning template",
        "",
        "The bundled field model (`observatory/field_model`, whose weights every measured",
        "table rests on and which stay unchanged) fine-tuned to think when asked",
        "(issue 49, item 8). With the chat-template kwarg `enable_thinking=true` the",
        "generation prompt is `<|im_start|>assistant\\n<think>\\n` and the model writes a short",
        "formulaic reasoning, `\\n</think>\\n\\n`, then its answer or a hermes",
        "`<tool_call>{...}</tool_call>`, which vLLM splits with",
        "`--reasoning-parser deepseek_r1 --enable-auto-tool-choice --tool-call-parser hermes`.",
        "Without `enable_thinking` the template renders exactly the field model's prompt.",
        "Recipe: `training/field/README.md` (section \"The reasoning variant\").",
        "",
        f"- base: `observatory/field_model` (sha256 `{report['base_sha256']}`)",
        f"- vocabulary 4098: the field tokenizer + `<think>` (4096) and `</think>` (4097), not special "
        f"(kept in decoded text); new rows: {report['new_rows_init']}",
        f"- parameters: {report['params']:,}, stored in {report['dtype']}",
        f"- fine-tune: {report['steps_done']} of {report['steps_planned']} planned steps, "
        f"{report['train_seconds']} s on {report['threads']} CPU thread; {report['reasoning_examples']} reasoning "
        f"turns + {report['field_examples']} field-corpus examples ({report['train_tokens_per_epoch']:,} tokens "
        f"per epoch), {hp['tokens_per_batch']} padded tokens per batch, AdamW lr {hp['lr']} cosine to "
        f"{hp['min_lr']} ({hp['warmup']} warm-up steps), losses main + 0.5 MTP step 1 + 0.25 MTP step 2, "
        f"seed {report['seed']}",
        "- held-out loss (nats/token; main, MTP step 1, MTP step 2), bf16 weights: reasoning turns "
        + ", ".join(f"{lr[h]:.3f}" for h in ("main", "mtp1", "mtp2"))
        + "; field corpus " + ", ".join(f"{lf[h]:.3f}" for h in ("main", "mtp1", "mtp2"))
        + " (the field model: 3.889, 3.863, 3.883)",
        f"- model.safetensors sha256 `{report['sha256']}`",
        "",
        "## Offline check (training.field.train_reasoning check)",
        "",
        f"{check['summary']['all']['prompts']} prompts from documents held out of the corpus, greedy in fp32",
        f"(up to {CHECK_MAX_TOKENS} tokens) with `enable_thinking=true`; well formed = `</think>`, then exactly",
        "one JSON tool call (tool prompts) or a non-empty answer, then eos. MTP acceptance simulated as",
        "`training/check_mtp.py` does (per position = accepted / drafting steps). Plain = the same prompt",
        "without `enable_thinking`.",
        "",
        "| group | prompts | `</think>` | well formed | right tool | right arguments | blank line after `</think>` "
        "| plain: no think tags | k=1 pos 1 | k=2 pos 1 | k=2 pos 2 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in check["summary"].items():
        k2 = s["k2_per_position"]
        lines.append(f"| {name} | {s['prompts']} | {s['think_end']} | {s['well_formed']} | {s['right_tool']} | "
                     f"{s['right_arguments']} | {s['blank_line_after_think']} | {s['plain_without_think_tags']} | "
                     f"{_f(s['k1_pos1'])} | {_f(k2[0])} | {_f(k2[1])} |")
    lines += ["", "Right tool / right arguments: the call names the tool / carries exactly the arguments the",
              "prompt asks for. Like the field model, the variant does not copy names or queries out of the",
              "prompt (the field model fails all 5 recitation probes): its reasoning restates the request with",
              "names of its own and its arguments are plausible but wrong, so only the structure (reasoning,",
              "`</think>`, one well-formed call of the right tool) is reliable. What the vLLM CPU engine made of",
              "it is in `training/field/README.md`."]
    lines += ["", "## The field probes without thinking (training.field.measure's way)", "",
              "probes/field.toml through the template without `enable_thinking` (the field model's prompts,",
              "byte for byte): passes of the observatory's result gates on the greedy fp32 output and simulated",
              "acceptance, beside the field model's own figures (observatory/field_model/README.md).", "",
              "| category | passes | k=1 pos 1 | k=2 pos 1 | k=2 pos 2 | field model: passes, k=1, k=2 pos 1, pos 2 |",
              "|---|---|---|---|---|---|"]
    for name, g in check["field_probes"].items():
        ref = FIELD_MODEL_PROBES.get(name)
        lines.append(f"| {name} | {g['passed']}/{g['probes']} | {_f(g['k1_pos1'])} | {_f(g['k2_per_position'][0])} | "
                     f"{_f(g['k2_per_position'][1])} | {', '.join(str(x) for x in ref) if ref else 'n/a'} |")
    lines += ["", "## Sample outputs (greedy, enable_thinking)", ""]
    shown: set[str] = set()
    for r in check["rows"]:
        if r["category"] in shown:
            continue
        shown.add(r["category"])
        lines += [f"**{r['category']}** ({'well formed' if r['well_formed'] else 'not well formed'})", "",
                  _code_block(r["prompt"]), "", _code_block(r["text"]), ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("tokenizer", "train", "check", "steptime"))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--steps", type=int, default=HP.steps)
    ap.add_argument("--budget-s", type=float, default=float("inf"))
    args = ap.parse_args()
    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    if args.what == "tokenizer":
        build_tokenizer(args.out)
        return
    tok = AutoTokenizer.from_pretrained(args.out)
    if args.what == "train":
        report = train(tok, args.out, args.steps, args.budget_s)
        print(json.dumps({k: v for k, v in report.items() if k != "loss_log"}, indent=2), flush=True)
    elif args.what == "steptime":
        reasoning, field = training_samples(tok)
        print(f"{len(reasoning)} reasoning, {len(field)} field samples; "
              f"{sum(len(s.ids) for s in reasoning + field):,} tokens", flush=True)
        model = init_from_field(len(tok))
        batches = plan_batches(reasoning + field, HP, random.Random(0))
        pad_id = tok.convert_tokens_to_ids(PAD_TOKEN)
        t0 = time.time()
        for idx in batches[:5]:
            main_, mtp1, mtp2 = losses(model, collate([(reasoning + field)[i] for i in idx], pad_id))
            (main_ + 0.5 * mtp1 + 0.25 * mtp2).backward()
        print(f"{(time.time() - t0) / 5:.2f} s/step (fwd+bwd); {len(batches)} batches per epoch; "
              f"initial main loss {main_.item():.3f}")
    else:
        check = offline_check(args.out)
        check["field_probes"] = field_probe_summary(args.out)
        report = json.loads((args.out / "train_report.json").read_text())
        report["offline_check"] = check["summary"]
        report["field_probes"] = check["field_probes"]
        (args.out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
        (args.out / "offline_check.json").write_text(json.dumps(check, indent=1, ensure_ascii=False) + "\n",
                                                     encoding="utf-8")
        (args.out / "README.md").write_text(card(report, check), encoding="utf-8")
        print(json.dumps(check["summary"], indent=2))


if __name__ == "__main__":
    main()
