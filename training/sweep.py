"""Train variants of the recipe side by side and score them: the default
probes (greedy verdicts, simulated MTP acceptance) and fresh list tasks
(counting across 100, primes), where a model shows whether it reads the bound
in the prompt or stops at a memorised length.

For choosing a recipe, typically on the GPU machine (one process per variant);
the shipped weights come from `python -m training.train` on the CPU.

Usage: python -m training.sweep OUT_DIR VARIANT [VARIANT ...] [--device cuda]
       python -m training.sweep --list
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from observatory.model.probes import load_probe_file, resolve_suite
from training import build_tokenizer, corpus, train
from training.check_mtp import check_probe, greedy, summarize
from training.render import EOS_TOKEN

WIDE = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=6, num_attention_heads=6,
            num_key_value_heads=2)

# name -> overrides: "hp" (HParams fields), "arch" (train.ARCH), "count_max",
# "counts" (corpus.COUNTS entries)
VARIANTS: dict[str, dict[str, Any]] = {
    "recipe": {},
    "smoke": {"hp": {"steps": 20}},
    "steps6k": {"hp": {"steps": 6000}},
    "wide": {"arch": WIDE},
    "wide6k": {"arch": WIDE, "hp": {"steps": 6000}},
    "below100": {"count_max": 99},
    "dw1": {"hp": {"decision_weight": 1.0}},
    "nojitter": {"hp": {"length_jitter": 0.0}},
    "lists_half": {"counts": {"counting": 3600, "sequence": 2000}},
    "lists2x6k": {"counts": {"counting": 7200, "sequence": 4000}, "hp": {"steps": 6000}},
    "wide_lists2x6k": {"arch": WIDE, "counts": {"counting": 7200, "sequence": 4000},
                       "hp": {"steps": 6000}},
}

CROSSING_100 = ((95, 103), (97, 106), (98, 101), (92, 100), (99, 110), (90, 104), (94, 108), (100, 112))


def list_tasks(seed: int = 777) -> list[tuple[str, str, str]]:
    """(kind, user prompt, exact answer): random counting and primes tasks plus
    counts across 100, in the corpus's wordings."""
    rng = random.Random(seed)
    tasks = []
    for _ in range(60):
        ex = corpus.counting(rng)
        tasks.append(("counting", ex.user_text, ex.answer))
    for a, b in CROSSING_100:
        user = f"Count from {a} to {b}."
        tasks.append(("crossing_100", user, ", ".join(str(i) for i in range(a, b + 1))))
    for _ in range(40):
        ex = corpus.sequence(rng)
        tasks.append(("primes", ex.user_text, ex.answer))
    return tasks


def score_lists(model: train.MiMoForCausalLM, tok: Any) -> dict[str, Any]:
    """Exact-match rate per kind of list task, with a few failures shown."""
    eos = tok.convert_tokens_to_ids(EOS_TOKEN)
    hits: dict[str, list[int]] = {}
    failures = []
    for kind, user, answer in list_tasks():
        prompt = tok.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                         tokenize=True, return_dict=False)
        out = greedy(model, prompt, 120, eos)
        text = tok.decode([t for t in out if t != eos], skip_special_tokens=False)
        ok = text == answer
        hits.setdefault(kind, []).append(int(ok))
        if not ok and len(failures) < 12:
            failures.append({"kind": kind, "user": user, "got": text, "want": answer})
    return {"exact": {k: sum(v) / len(v) for k, v in hits.items()}, "failures": failures}


def run_variant(name: str, out: Path, device: str) -> dict[str, Any]:
    """Build the tokenizer, train, save and score one variant."""
    spec = VARIANTS[name]
    corpus.COUNT_MAX = spec.get("count_max", corpus.COUNT_MAX)
    corpus.COUNTS.update(spec.get("counts", {}))
    train.ARCH.update(spec.get("arch", {}))
    hp = replace(train.HParams(), **spec.get("hp", {}))
    torch.set_num_threads(2)
    model_dir = out / name
    build_tokenizer.main(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model, report = train.train(tok, hp, device)
    report["sha256"] = train.save(model, tok, model_dir)
    model.eval()
    probes = load_probe_file(resolve_suite("default"))
    checks = [check_probe(model, tok, p) for p in probes]
    result = {
        "variant": name,
        "spec": spec,
        "hparams": asdict(hp),
        "params": sum(p.numel() for p in model.parameters()),
        "losses": report,
        "probes": {c.name: {"passed": c.passed, "text": c.text, "k1": c.acceptance[1][:2]} for c in checks},
        "probe_passes": sum(c.passed for c in checks),
        "acceptance": summarize(checks),
        "lists": score_lists(model, tok),
    }
    (out / f"{name}.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


def main() -> None:
    """Run each named variant in its own process and print a summary."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, nargs="?")
    ap.add_argument("variants", nargs="*")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list or not args.out:
        print("\n".join(f"{k}: {v}" for k, v in VARIANTS.items()))
        return
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variants: {unknown}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.one:
        run_variant(args.variants[0], args.out, args.device)
        return
    t0 = time.time()
    procs = {
        v: subprocess.Popen(
            [sys.executable, "-m", "training.sweep", str(args.out), v, "--one", "--device", args.device],
            stdout=(args.out / f"{v}.log").open("w"), stderr=subprocess.STDOUT,
        )
        for v in args.variants
    }
    for v, p in procs.items():
        p.wait()
        path = args.out / f"{v}.json"
        if p.returncode or not path.exists():
            print(f"{v}: FAILED rc={p.returncode} ({time.time() - t0:.0f}s)")
            continue
        r = json.loads(path.read_text())
        print(
            f"{v:16s} probes {r['probe_passes']}/10  lists {r['lists']['exact']}  "
            f"k1 {r['acceptance']['all']['k1']:.3f} k2 {r['acceptance']['all']['k2']:.3f}  "
            f"main {r['losses']['main']:.4f} mtp1 {r['losses']['mtp1']:.4f}  "
            f"train {r['losses']['train_seconds']:.0f}s  params {r['params']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
