"""The volume channel's per-request checks: teacher-forced correctness, identifiers copied from the prompt.

**Teacher forcing** (docs/design.md 3.2's near-tie bound, `NEAR_TIE` = 0.25
nats). The arm's own server scores the arm's output as a prompt (prompt ids +
output ids, ``max_tokens`` 1, ``prompt_logprobs``): the target model's
forward pass over the output, a prefill that no speculative step touches
(`observatory.channels.teacher` says why the scores are the target's, not
the rejection sampler's). Then, for every emitted token:

- greedy: the token must be the target's choice within the bound: the best
  logprob at that position minus the token's own is at most `NEAR_TIE`
  (`greedy_finding`). This holds after an earlier near-tie divergence too:
  each token is judged on the prefix the arm actually produced, which is
  why a greedy output need not equal base's to be right;
- sampled at temperature T <= 1 with top_p (and top_k): the token must be
  inside the nucleus the engine samples from (`support_finding`). Tokens
  more likely than it by more than the bound form an upper set of the
  distribution; tempering with T <= 1 moves mass toward the top, so their
  tempered mass is at least their raw mass, which the prefill returns
  exactly for the top-`TOP_SAMPLED` tokens. If that raw mass already
  reaches top_p (or they number top_k or more), the token cannot have been
  drawn: the output is corrupted, whatever T. No bound on the vocabulary's
  tail is needed; at T > 1 only the top_k rule is applied.

A token missing from the prefill's row (never: vLLM returns the prompt
token's own logprob beside the top-N) makes the output unjudged, never
excused.

**Base scores the divergence** (`base_divergence`). A greedy answer that
leaves base's answer to the same request does so at one token whose prefix
is base's own; base's forced row of its own answer at that position (a
non-speculating arm forces with the top-`TOP_BASE`) scores the arm's token
there, by base's engine: the token_diff rule (docs/design.md 3.2), margin
from base's prefill, a token outside base's top-`TOP_BASE` counted with the
lower bound and never excused below it. So a spec arm whose own target
agrees with its own wrong answer (a target that is not base's) is still
caught where it first leaves base; the tokens after it, on a prefix base
never produced, are scored by the arm's own target.

**Identifiers** (reference-free; SGLang #34959: single-character identifier
typos under heterogeneous batching). `identifiers` reads code-like names of
the prompt (at least `MIN_IDENT` characters with ``_``, a digit or an inner
capital); an output word that is not among them but one edit away from one
(`near_misses`) is an identifier the model copied wrong. A small model makes
such typos by itself, so the channel judges the excess over its control
(`observatory.channels.volume`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from observatory.model.probes import Probe

NEAR_TIE = 0.25  # nats: docs/design.md 3.2
TOP_GREEDY = 1  # prompt logprobs asked for a greedy output: the best token (the emitted one comes with it)
TOP_SAMPLED = 5  # for a sampled output: the tokens above it whose raw mass is the support bound
TOP_BASE = 5  # a non-speculating arm's greedy outputs: base's top-5 score another arm's first divergent token
MIN_IDENT = 6
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# the findings of one answer (lower case: labels of a finding, not verdict levels)
OK, NEAR_TIE_FLIP, CORRUPTED, UNSCORED = "ok", "near_tie", "corrupted", "unjudged"


def _row(row: Any) -> list[tuple[int, float]]:
    return [(int(t), float(lp)) for t, lp in (row or []) if lp is not None and math.isfinite(float(lp))]


def _covered(ids: Sequence[int], rows: Sequence[Any]) -> int:
    """The positions of IDS the forced ROWS score: all of them, or all but the last (forced without it)."""
    return len(ids) - 1 if len(rows) == len(ids) - 1 and ids else len(ids)


def greedy_finding(ids: Sequence[int], rows: Sequence[Any]) -> dict[str, Any]:
    """Whether every greedy token of IDS is the target's choice within NEAR_TIE (ROWS: the forced top-k rows; an
    answer that filled the model's context is forced without its last token, which is then not judged)."""
    worst, flips = 0.0, 0
    for i, tid in enumerate(ids[: _covered(ids, rows)]):
        row = _row(rows[i] if i < len(rows) else None)
        mine = next((lp for t, lp in row if t == tid), None)
        if not row or mine is None:
            return {"verdict": UNSCORED, "at": i, "why": "the forced row lacks the emitted token"}
        best_id, best = max(row, key=lambda x: x[1])
        margin = best - mine
        if margin > NEAR_TIE:
            return {"verdict": CORRUPTED, "at": i, "token": tid, "expected": best_id, "margin": round(margin, 4)}
        if best_id != tid and margin > 0:
            flips += 1
            worst = max(worst, margin)
    if flips:
        return {"verdict": NEAR_TIE_FLIP, "flips": flips, "margin": round(worst, 4)}
    return {"verdict": OK}


def base_divergence(ids: Sequence[int], base_ids: Sequence[int], base_rows: Sequence[Any]) -> dict[str, Any] | None:
    """The first token where IDS leaves base's answer BASE_IDS, scored by base's forced rows of its own answer
    (BASE_ROWS: the same prefix): a finding when base's margin there exceeds NEAR_TIE, else None."""
    d = next((i for i, (a, b) in enumerate(zip(ids, base_ids)) if a != b), min(len(ids), len(base_ids)))
    if d >= len(ids) or d >= len(base_ids) or d >= len(base_rows):
        return None
    row = _row(base_rows[d])
    if not row:
        return None
    tid = ids[d]
    best_id, best = max(row, key=lambda x: x[1])
    mine = next((lp for t, lp in row if t == tid), None)
    margin = best - (mine if mine is not None else min(lp for _, lp in row))
    if margin <= NEAR_TIE:
        return None
    return {"verdict": CORRUPTED, "at": d, "token": tid, "expected": best_id, "margin": round(margin, 4),
            "why": f"base scores it {margin:.3g} nats below its choice" + ("" if mine is not None else
                                                                          " (at least: outside base's top-k)")}


def support_finding(ids: Sequence[int], rows: Sequence[Any], sampling: dict[str, Any]) -> dict[str, Any]:
    """Whether every sampled token of IDS lies in the support the engine samples from (top_p, top_k)."""
    t = float(sampling.get("temperature") or 0.0)
    if t <= 0:
        return greedy_finding(ids, rows)
    top_p = float(sampling.get("top_p") or 1.0)
    top_k = int(sampling.get("top_k") or 0)
    for i, tid in enumerate(ids[: _covered(ids, rows)]):
        row = _row(rows[i] if i < len(rows) else None)
        mine = next((lp for tk, lp in row if tk == tid), None)
        if not row or mine is None:
            return {"verdict": UNSCORED, "at": i, "why": "the forced row lacks the emitted token"}
        better = [(tk, lp) for tk, lp in row if tk != tid and lp > mine + NEAR_TIE]
        if top_k > 0 and len(better) >= top_k:
            return {"verdict": CORRUPTED, "at": i, "token": tid, "expected": better[0][0],
                    "why": f"{len(better)} tokens above it, top_k {top_k}"}
        mass = sum(math.exp(lp) for _, lp in better)
        if t <= 1.0 and top_p < 1.0 and mass >= top_p:
            return {"verdict": CORRUPTED, "at": i, "token": tid, "expected": max(better, key=lambda x: x[1])[0],
                    "why": f"tokens above it hold {mass:.3f} of the mass, top_p {top_p:g}"}
    return {"verdict": OK}


def code_like(word: str) -> bool:
    """A name a program would use: MIN_IDENT characters or more with an underscore, a digit or an inner capital."""
    return len(word) >= MIN_IDENT and ("_" in word.strip("_") or any(c.isdigit() for c in word)
                                       or (any(c.isupper() for c in word[1:]) and any(c.islower() for c in word)))


def identifiers(text: str) -> set[str]:
    """The code-like names in TEXT."""
    return {w for w in _WORD.findall(text or "") if code_like(w)}


def one_edit(a: str, b: str) -> bool:
    """Whether A and B differ by exactly one substitution, insertion or deletion."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    for i in range(len(long_)):
        if long_[:i] + long_[i + 1:] == short:
            return True
    return False


def near_misses(prompt: str, output: str) -> list[tuple[str, str]]:
    """(written, meant): each output word one edit away from a code-like name of PROMPT, absent from the prompt."""
    names = identifiers(prompt)
    if not names:
        return []
    words = set(_WORD.findall(prompt or ""))
    out: list[tuple[str, str]] = []
    for w in sorted(set(_WORD.findall(output or ""))):
        if w in words or len(w) < MIN_IDENT - 1:
            continue
        meant = next((n for n in sorted(names) if one_edit(w, n)), None)
        if meant is not None:
            out.append((w, meant))
    return out


def prompt_text(probe: Probe) -> str:
    """Everything a request showed the model as text (its messages' contents, or its prompt)."""
    if probe.messages is not None:
        return "\n".join(str(m.get("content") or "") for m in probe.messages)
    return probe.prompt if isinstance(probe.prompt, str) else ""
