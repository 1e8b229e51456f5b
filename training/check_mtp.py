"""Offline check of a trained default model on a probe suite.

For every probe: the base model's greedy output (does it pass the probe's
expectations?), then the MTP head's drafts on that very output, accepted the
way vLLM's greedy speculative decoding accepts them:

- after the target emits the token at index j, the MTP layer drafts token
  j+1 from (trunk hidden state at j-1, token j); with k=2 the same layer runs
  again at position j on (its own output, draft 1) to draft token j+2;
- the longest prefix of drafts equal to the greedy tokens is accepted, the
  target adds one token, and drafting resumes after it.

The acceptance rate (accepted / drafted tokens) is what vLLM reports through
``vllm:spec_decode_num_accepted_tokens_total / ..._num_draft_tokens_total``.

Usage: python -m training.check_mtp [--model DIR] [--probes FILE] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from observatory.judge.apply_gates import result_gates
from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe, load_probe_file, resolve_suite
from observatory.model.vocabulary import FAIL, PASS
from training.build_tokenizer import DEFAULT_OUT
from training.corpus import check_held_out, generate
from training.model import MiMoForCausalLM, load
from training.render import EOS_TOKEN

MAX_K = 2
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class ProbeCheck:
    """One probe's greedy output and MTP acceptance."""

    name: str
    category: str
    text: str
    token_ids: list[int]
    passed: bool
    reason: str
    # k -> [drafted tokens, accepted tokens, accepted at position 1.., ...]
    acceptance: dict[int, list[int]] = field(default_factory=dict)


def prompt_ids(tok: PreTrainedTokenizerBase, probe: Probe) -> list[int]:
    """The prompt as vLLM tokenizes it (chat template + generation prompt)."""
    if probe.messages is None:
        return tok.encode(probe.prompt or "", add_special_tokens=False)
    return tok.apply_chat_template(
        probe.messages, tools=probe.tools, add_generation_prompt=True, tokenize=True, return_dict=False
    )


@torch.no_grad()
def greedy(model: MiMoForCausalLM, ids: list[int], max_tokens: int, eos: int) -> list[int]:
    """Greedy continuation (eos included when produced)."""
    seq = list(ids)
    for _ in range(max_tokens):
        x = torch.tensor([seq])
        h = model.trunk(x, torch.arange(len(seq)).unsqueeze(0))
        nxt = int(model.main_logits(h[:, -1]).argmax(-1))
        seq.append(nxt)
        if nxt == eos:
            break
    return seq[len(ids) :]


@torch.no_grad()
def draft_table(model: MiMoForCausalLM, seq: list[int]) -> list[list[int]]:
    """drafts[i][t]: draft i+1 made after the token at index t+1, i.e. the
    prediction of token t+2+i (teacher-forced on `seq`, like vLLM's accepted
    prefix)."""
    ids = torch.tensor([seq])
    pos = torch.arange(len(seq)).unsqueeze(0)
    hidden = model.trunk(ids, pos)
    step1, kv1 = model.mtp_step1(hidden[:, :-1], ids[:, 1:], pos[:, :-1])
    step2 = model.mtp_step2(step1[:, :-1], ids[:, 2:], pos[:, :-2], kv1)
    return [
        model.mtp_logits(step1)[0].argmax(-1).tolist(),
        model.mtp_logits(step2)[0].argmax(-1).tolist(),
    ]


def simulate(drafts: list[list[int]], seq: list[int], n_prompt: int, k: int) -> list[int]:
    """[drafted, accepted, accepted at position 1..k] for k draft tokens per step."""
    out = [0, 0] + [0] * k
    end = len(seq) - 1
    j = n_prompt  # the target's first token comes from the prefill
    while j < end:
        accepted = 0
        for i in range(k):
            target = j + 1 + i
            if target > end or drafts[i][j - 1] != seq[target]:
                break
            accepted += 1
            out[2 + i] += 1
        out[0] += k
        out[1] += accepted
        j += accepted + 1
    return out


def gate_verdicts(probe: Probe, text: str, finished: bool) -> tuple[bool, str]:
    """The observatory's own result gates for PROBE (expect, tool_calls,
    degeneracy, ...) on the raw output, its tool calls parsed as vLLM's hermes
    parser does: (all passed, the failures)."""
    calls: list[dict[str, Any]] = []
    for raw in _TOOL_CALL.findall(text):
        try:
            call = json.loads(raw)
        except json.JSONDecodeError:
            return False, f"tool call is not JSON: {raw!r}"
        arguments = call.get("arguments") if isinstance(call, dict) else None
        name = call.get("name") if isinstance(call, dict) else None
        calls.append({"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}})
    content = _TOOL_CALL.sub("", text).strip()
    finish = "length" if not finished else "tool_calls" if calls else "stop"
    out = Output(text=content, content=content or (None if calls else ""), tool_calls=calls or None,
                 finish_reason=finish)
    failures = [f"{g.name}: {res.reason}" for g in result_gates(default_registry(), probe)
                if (res := g.check(out, probe)).verdict == FAIL]
    return not failures, "; ".join(failures) or "ok"


def check_probe(model: MiMoForCausalLM, tok: PreTrainedTokenizerBase, probe: Probe) -> ProbeCheck:
    """Greedy output, expectations and simulated acceptance for k = 1..MAX_K."""
    eos = tok.convert_tokens_to_ids(EOS_TOKEN)
    prompt = prompt_ids(tok, probe)
    out = greedy(model, prompt, probe.max_tokens, eos)
    text = tok.decode([t for t in out if t != eos], skip_special_tokens=False)
    passed, reason = gate_verdicts(probe, text, finished=bool(out) and out[-1] == eos)
    seq = prompt + out
    drafts = draft_table(model, seq)
    acceptance = {k: simulate(drafts, seq, len(prompt), k) for k in range(1, MAX_K + 1)}
    return ProbeCheck(probe.name, probe.category, text, out, passed, reason, acceptance)


def summarize(checks: list[ProbeCheck]) -> dict[str, dict[str, float]]:
    """Acceptance rate per category (and overall) for each k."""
    groups: dict[str, list[ProbeCheck]] = defaultdict(list)
    for c in checks:
        groups[c.category].append(c)
    groups["all"] = checks
    summary = {}
    for name, group in groups.items():
        summary[name] = {}
        for k in range(1, MAX_K + 1):
            drafted = sum(c.acceptance[k][0] for c in group)
            accepted = sum(c.acceptance[k][1] for c in group)
            summary[name][f"k{k}"] = accepted / drafted if drafted else 0.0
    return summary


def main() -> None:
    """Print the per-probe table and the per-category acceptance."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--probes", type=Path, default=resolve_suite("default"))
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = load(args.model)
    probes = load_probe_file(args.probes)
    for problem in check_held_out(probes, generate()):
        print(f"HELD-OUT VIOLATION: {problem}")
    checks = [check_probe(model, tok, p) for p in probes]
    for c in checks:
        rates = "  ".join(
            f"k{k} {c.acceptance[k][1]}/{c.acceptance[k][0]}" for k in range(1, MAX_K + 1)
        )
        print(f"{PASS if c.passed else FAIL}  {c.name:24s} {rates}  {c.text!r}"
              + ("" if c.passed else f"  <- {c.reason}"))
    summary = summarize(checks)
    for name, rates in summary.items():
        print(f"{name:12s} " + "  ".join(f"{k} {v:.3f}" for k, v in rates.items()))
    if args.json:
        args.json.write_text(
            json.dumps({"probes": [asdict(c) for c in checks], "summary": summary}, indent=2,
                       ensure_ascii=False) + "\n"
        )


if __name__ == "__main__":
    main()
