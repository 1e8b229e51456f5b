"""Measure the field model offline on probes/field.toml and write its card.

Per probe, with `training.check_mtp` (the simulation of vLLM's greedy MTP
drafting and acceptance): the base model's greedy output, the observatory's
result gates on it, and the drafts accepted at k=1 and k=2. Per-position
acceptance is accepted-at-position-i / drafting steps (what vLLM's
``spec_decode_num_accepted_tokens_per_pos`` over ``num_drafts`` gives).
Along each greedy output it also records the main head's next-token entropy
(nats) and the margin between its two best log-probabilities; a step with a
margin below NEAR_TIE_NATS is counted as a near-tie (0.25 nats: the bound
docs/design.md's token-diff gate uses to tell WARN from FAIL).

Writes measurements.json (the figures `tests/project/test_field_model.py`
reproduces) and README.md (the model card) into the model directory.

Usage: python -m training.field.measure [--model DIR] [--probes FILE]
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from observatory.model.probes import Probe, load_probe_file
from training.check_mtp import MAX_K, ProbeCheck, check_probe, prompt_ids
from training.field.build_tokenizer import FIELD_MODEL
from training.model import MiMoForCausalLM, load

NEAR_TIE_NATS = 0.25
PROBES = Path(__file__).resolve().parents[2] / "probes" / "field.toml"


@torch.no_grad()
def token_stats(model: MiMoForCausalLM, prompt: list[int], out: list[int]) -> tuple[list[float], list[float]]:
    """Entropy and top-2 log-probability margin of the main head before each output token."""
    seq = prompt + out
    ids = torch.tensor([seq])
    h = model.trunk(ids, torch.arange(len(seq)).unsqueeze(0))
    logp = torch.log_softmax(model.main_logits(h[0, len(prompt) - 1 : len(seq) - 1]), -1)
    entropy = -(logp.exp() * logp).sum(-1)
    top2 = logp.topk(2, dim=-1).values
    return entropy.tolist(), (top2[:, 0] - top2[:, 1]).tolist()


def measure_probe(model: MiMoForCausalLM, tok: PreTrainedTokenizerBase, probe: Probe) -> dict[str, Any]:
    """One probe's output, verdict, acceptance counts and token statistics."""
    c: ProbeCheck = check_probe(model, tok, probe)
    entropy, margin = token_stats(model, prompt_ids(tok, probe), c.token_ids)
    return {
        "name": c.name, "category": c.category, "text": c.text, "passed": c.passed, "reason": c.reason,
        "tokens": len(c.token_ids), "token_ids": c.token_ids, "acceptance": {str(k): v for k, v in c.acceptance.items()},
        "entropy_sum": sum(entropy), "near_ties": sum(m < NEAR_TIE_NATS for m in margin),
    }


def aggregate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rates of a group of probes: per k, overall and per position; entropy; near-ties."""
    out: dict[str, Any] = {"probes": len(rows), "passed": sum(r["passed"] for r in rows)}
    tokens = sum(r["tokens"] for r in rows)
    for k in range(1, MAX_K + 1):
        counts = [r["acceptance"][str(k)] for r in rows]
        drafted, accepted = sum(c[0] for c in counts), sum(c[1] for c in counts)
        steps = drafted // k
        out[f"k{k}"] = {
            "rate": accepted / drafted if drafted else None,
            "per_position": [sum(c[2 + i] for c in counts) / steps if steps else None for i in range(k)],
            "mean_accepted_len": 1 + accepted / steps if steps else None,
        }
    out["tokens"] = tokens
    out["entropy_nats"] = sum(r["entropy_sum"] for r in rows) / tokens if tokens else None
    out["near_tie_share"] = sum(r["near_ties"] for r in rows) / tokens if tokens else None
    return out


def measure(model_dir: Path, probes_path: Path) -> dict[str, Any]:
    """Every probe measured, grouped by category and overall."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load(model_dir)
    rows = [measure_probe(model, tok, p) for p in load_probe_file(probes_path)]
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[r["category"]].append(r)
    summary = {c: aggregate(g) for c, g in groups.items()} | {"all": aggregate(rows)}
    return {"probes": rows, "summary": summary, "near_tie_nats": NEAR_TIE_NATS}


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _code_block(text: str) -> str:
    """Model output shown verbatim and inert in Markdown (untrusted text)."""
    return "~~~text\n" + text.replace("~~~", "~ ~ ~") + "\n~~~"


def card(m: dict[str, Any], report: dict[str, Any]) -> str:
    """The model card (README.md)."""
    s = m["summary"]
    lines = [
        "# field_model: a small MiMo model trained on real package text",
        "",
        "A second bundled `MiMoForCausalLM` (Qwen2 decoder + one MTP layer, the layout",
        "of `observatory/default_model`, served by vLLM's `mimo.py` / `mimo_mtp.py`),",
        "trained on CPU from text inside pinned Debian and PyPI packages",
        "(recipe: `training/field/README.md`). Its suite is `probes/field.toml`",
        "(prompts from documents held out of the corpus).",
        "",
        f"- parameters: {report['params']:,} (fp32), vocabulary {report['vocab']}, "
        f"{report['arch']['num_hidden_layers']} layers, hidden {report['arch']['hidden_size']}",
        f"- training: {report['steps_done']} of {report['steps_planned']} planned steps, "
        f"{report['train_seconds']} s on {report['threads']} CPU thread, "
        f"{report['train_examples']} examples ({report['train_tokens_per_epoch']:,} tokens per epoch)",
        "- held-out loss (nats/token; main, MTP step 1, MTP step 2): "
        + ", ".join(f"{report['eval_loss_heldout'][h]:.3f}" for h in ("main", "mtp1", "mtp2")),
        f"- model.safetensors sha256 `{report['sha256']}`",
        "",
        "## Measured offline (training.field.measure)",
        "",
        "Greedy outputs on the 30 probes, MTP drafts accepted as vLLM's greedy",
        "speculative decoding accepts them (`training/check_mtp.py`'s simulation).",
        "Per-position acceptance = accepted at position i / drafting steps.",
        f"Near-tie share = output tokens whose top-2 log-probability margin is below {m['near_tie_nats']} nats.",
        "Pass = the observatory's result gates on the base output.",
        "",
        "| category | probes pass | tokens | k=1 pos 1 | k=2 pos 1 | k=2 pos 2 | k=2 rate | entropy (nats) | near-tie share |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, g in s.items():
        lines.append(
            f"| {name} | {g['passed']}/{g['probes']} | {g['tokens']} | {_fmt(g['k1']['per_position'][0])} | "
            f"{_fmt(g['k2']['per_position'][0])} | {_fmt(g['k2']['per_position'][1])} | {_fmt(g['k2']['rate'])} | "
            f"{_fmt(g['entropy_nats'])} | {_fmt(g['near_tie_share'])} |"
        )
    failing = [r for r in m["probes"] if not r["passed"]]
    lines += ["", "Offline figures only; what the vLLM CPU engine reported for this model, where a run",
              "was recorded, is in `training/field/README.md`.", "",
              f"## Probes the base output fails ({len(failing)})", ""]
    lines += [f"- {r['name']}: `{r['reason'][:160].replace('`', chr(39))}`" for r in failing]
    lines += ["", "## Sample outputs (greedy, base)", ""]
    shown: set[str] = set()
    for r in m["probes"]:
        if r["category"] in shown:
            continue
        shown.add(r["category"])
        a1 = r["acceptance"]["1"]
        lines += [f"**{r['name']}** ({'pass' if r['passed'] else 'fail'}; k=1 {a1[1]}/{a1[0]} accepted)", "",
                  _code_block(r["text"]), ""]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=FIELD_MODEL)
    ap.add_argument("--probes", type=Path, default=PROBES)
    args = ap.parse_args()
    torch.set_num_threads(1)
    m = measure(args.model, args.probes)
    report = json.loads((args.model / "train_report.json").read_text())
    report["vocab"] = len(AutoTokenizer.from_pretrained(args.model))
    (args.model / "measurements.json").write_text(json.dumps(m, indent=1, ensure_ascii=False) + "\n",
                                                  encoding="utf-8")
    (args.model / "README.md").write_text(card(m, report), encoding="utf-8")
    for name, g in m["summary"].items():
        print(f"{name:12s} pass {g['passed']}/{g['probes']}  k1 {_fmt(g['k1']['rate'])}  "
              f"k2 pos {[_fmt(x) for x in g['k2']['per_position']]}  H {_fmt(g['entropy_nats'])}  "
              f"ties {_fmt(g['near_tie_share'])}")


if __name__ == "__main__":
    main()
