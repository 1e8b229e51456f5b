"""Acceptance per request (issue 48 item 3): the engine's own counters per answer, summed against /metrics, and
broken down by what each request is.

The volume channel's traffic runs with the engine's per-request speculative
counters on (vLLM ``--per-request-spec-decode-metrics``, added to every
speculating arm's launch where the engine has it; SGLang's ``meta_info`` and
llama.cpp's ``timings`` carry them unasked), stored per answer in
``results.request_counters``.

- ``volume:identity``: the sum of the answers' own counters over the
  traffic equals the /metrics delta read (settled) just before and after it:
  drafts, draft tokens, accepted tokens and, where both report them, the
  per-position counts. Two records of the same steps; any difference is a
  FAIL (an identity has no noise). Not measurable where a request of the
  window failed (/metrics counted steps no answer states) or answers came
  without counters.
- ``volume:acceptance``: alpha (accepted / draft tokens), tau (1 + accepted
  / drafts) and the median decode rate per class of every attribute of
  `observatory.channels.request_classes` (the report draws it, and base's
  rate per class beside it). A class *collapses* when its alpha is below
  `COLLAPSE` of the other classes of the same attribute pooled and the gap
  is beyond chance (one-sided z > `Z_COLLAPSE`, the variance of each ratio
  from its requests as clusters: the tokens of one request are not
  independent draws): a FAIL, speculation that buys nothing for that
  class. Against history: a class whose alpha is below the median of the
  same class on the earlier nights (same arm, model, engine, suite; the
  history channel's trusted nights) by more than their band (3 robust SD,
  at least `HISTORY_FLOOR` of the median) is a WARN. A class whose drafts
  stop altogether is the ``speculates`` channel's (issue 49 item 10).

Why `COLLAPSE` = 0.25: on the field model's clean mtp1 arm the lowest class
sits at 0.73 of its siblings (prompts of 512+ tokens; docs/channels.md, "The
volume replay on the CPU engine"), and the long-prompt decay the model has by
itself reaches 0.26 of the short prompts' only at 1,000 tokens (docs/channels.md,
long_prompts; the replay's prompts stay under ~750); drafts spoiled for a
class (random ids) accept almost nothing (0.0002 against 0.60:
``tools_bad_drafts``). A quarter sits below the model's own spread and far
above spoiled drafts; a partial spoiling that keeps more than a quarter is
left to the history comparison.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from observatory.channels.request_classes import ATTRIBUTES, classes, own_counters
from observatory.channels.view import ChannelView
from observatory.engines.metrics import SpecCounters
from observatory.judge.stats import Z_P001
from observatory.judge.summaries import suite_hash, summary_model
from observatory.model.vocabulary import FAIL, PASS, SKIP, SPECULATING, WARN
from observatory.store.stored import StoredArm, StoredResult, Verdict
from observatory.store.summary_rows import earlier_trusted

COLLAPSE = 0.25
Z_COLLAPSE = Z_P001  # one-sided p < 0.0005 per class
Z_CAP = 99.0  # a z shown for a gap with no spread at all (stored JSON has no infinity)
MIN_REQUESTS = 10  # requests a class needs (with counters) to be judged
MIN_DRAFT_TOKENS = 50
HISTORY_NIGHTS, HISTORY_MIN, HISTORY_FLOOR = 7, 3, 0.25
MAD_SIGMA, SIGMAS = 1.4826, 3.0
GATE = "volume:acceptance"


def decode_rate(r: StoredResult) -> float | None:
    """Tokens per second after the first (streamed: from the first token on; whole: over the whole request)."""
    n = (r.usage or {}).get("completion_tokens")
    if not isinstance(n, int) or n < 2 or not r.duration_ms:
        return None
    span = r.duration_ms - (r.ttft_ms or 0.0) if r.ttft_ms is not None else r.duration_ms
    return (n - 1) / (span / 1000.0) if span > 0 else None


def _cluster_var(pairs: list[tuple[int, int]]) -> float:
    """Variance of sum(a)/sum(d) over requests (a_i accepted, d_i drafted): the ratio estimator's, clusters = requests."""
    d = sum(x for _, x in pairs)
    if len(pairs) < 2 or d <= 0:
        return math.inf
    ratio = sum(a for a, _ in pairs) / d
    ss = sum((a - ratio * x) ** 2 for a, x in pairs)
    return len(pairs) / (len(pairs) - 1) * ss / d ** 2


def breakdown(view: ChannelView, arm: StoredArm, results: list[StoredResult]) -> list[dict[str, Any]]:
    """One row per (attribute, class): requests, counters, alpha, tau, median decode rate."""
    groups: dict[tuple[str, str], list[tuple[StoredResult, SpecCounters | None]]] = {}
    for r in results:
        if not r.ok:
            continue
        c = own_counters(r)
        for attr, value in classes(view.probe(r), r.usage, r.concurrency).items():
            groups.setdefault((attr, value), []).append((r, c))
    rows = []
    for (attr, value), items in sorted(groups.items(), key=lambda kv: (ATTRIBUTES.index(kv[0][0]), kv[0][1])):
        counted = [c for _, c in items if c is not None and c.drafts is not None and c.accepted is not None]
        drafts = sum(int(c.drafts or 0) for c in counted)
        drafted = sum(int(c.draft_tokens or 0) for c in counted)
        accepted = sum(int(c.accepted or 0) for c in counted)
        rates = [x for x in (decode_rate(r) for r, _ in items) if x is not None]
        rows.append({"attribute": attr, "class": value, "requests": len(items), "with_counters": len(counted),
                     "drafts": drafts, "draft_tokens": drafted, "accepted": accepted,
                     "alpha": round(accepted / drafted, 4) if drafted else None,
                     "tau": round(1 + accepted / drafts, 4) if drafts else None,
                     "tok_s": round(statistics.median(rates), 1) if rates else None,
                     "_pairs": [(int(c.accepted or 0), int(c.draft_tokens or 0)) for c in counted]})
    return rows


def collapses(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Classes whose alpha is below COLLAPSE of their siblings' pooled, beyond chance (each row gets ``vs_rest``)."""
    out = []
    for row in rows:
        sib = [x for x in rows if x["attribute"] == row["attribute"] and x is not row]
        pairs = [p for x in sib for p in x["_pairs"]]
        rest_d = sum(d for _, d in pairs)
        if row["with_counters"] < MIN_REQUESTS or row["draft_tokens"] < MIN_DRAFT_TOKENS or rest_d < MIN_DRAFT_TOKENS:
            continue
        rest = sum(a for a, _ in pairs) / rest_d
        row["rest_alpha"] = round(rest, 4)
        if not rest or row["alpha"] is None:
            continue
        row["vs_rest"] = round(row["alpha"] / rest, 3)
        se = math.sqrt(_cluster_var(row["_pairs"]) + _cluster_var(pairs))
        gap = rest - row["alpha"]
        # no spread among the requests on either side (each request alike): the gap is certain, not noise
        z = None if not math.isfinite(se) else min(Z_CAP, gap / se) if se > 0 else (Z_CAP if gap > 0 else 0.0)
        row["z"] = None if z is None else round(z, 2)
        if row["alpha"] < COLLAPSE * rest and z is not None and z > Z_COLLAPSE:
            out.append(row)
    return out


def _history(view: ChannelView, arm: StoredArm, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """Classes whose alpha fell below the earlier nights' band of the same class; and the nights read."""
    session = view.store.session(view.session_id)
    suite = suite_hash(p.content_hash for p in view.store.probes(view.session_id)
                       if not (p.definition or {}).get("channel"))
    earlier, _ = earlier_trusted(view.store, view.session_id, arm.name, summary_model(arm.model, session.model),
                                 suite, arm.engine_version, HISTORY_NIGHTS, flagged_by=GATE)
    past: dict[tuple[str, str], list[float]] = {}
    for night in earlier:
        for v in view.store.verdicts(night["arm_id"]):
            if v.gate == GATE:
                for x in (v.details or {}).get("table") or []:
                    if isinstance(x.get("alpha"), (int, float)):
                        past.setdefault((x.get("attribute"), x.get("class")), []).append(float(x["alpha"]))
    drops = []
    for row in rows:
        values = past.get((row["attribute"], row["class"]), [])
        if row["alpha"] is None or len(values) < HISTORY_MIN:
            continue
        med = statistics.median(values)
        mad = statistics.median(abs(v - med) for v in values)
        tol = max(SIGMAS * MAD_SIGMA * mad, HISTORY_FLOOR * med)
        row["history_median"], row["history_band"] = round(med, 4), round(tol, 4)
        if row["alpha"] < med - tol:
            drops.append(row)
    return drops, [n["session_id"] for n in earlier]


def identity(view: ChannelView, arm: StoredArm, results: list[StoredResult]) -> Verdict:
    """``volume:identity``: the answers' own counters summed against the /metrics delta over the same traffic."""
    facts = ((arm.launch or {}).get("channel_facts") or {}).get("volume") or {}
    before, after = facts.get("counters_before"), facts.get("counters_after")
    failed = sum(1 for r in results if not r.ok)
    missing = sum(1 for r in results if r.ok and not r.request_counters)
    stated = [SpecCounters.from_dict(r.request_counters) for r in results if r.ok and r.request_counters]
    total = SpecCounters()
    for c in stated:
        total = total + c
    delta = SpecCounters.from_dict(after) - SpecCounters.from_dict(before) if before and after else None
    details: dict[str, Any] = {"answers": len(results), "with_counters": len(stated), "failed": failed,
                               "without_counters": missing, "stated": total.to_dict(),
                               "metrics": delta.to_dict() if delta else None}
    why = ("the /metrics reads around the traffic were not stored" if delta is None
           else f"/metrics unusable: {delta.problem}" if delta.problem
           else "no answer stated its own counters (per-request metrics off, or not served)" if not stated
           else f"{failed} requests failed (/metrics counts their steps, no answer states them)" if failed
           else f"{missing} answers came without their counters" if missing else None)
    if why is not None:
        return view.verdict(arm, SKIP, f"not measurable: {why}", details, part="identity")
    broken = [f"{name}: answers {getattr(total, name)} vs /metrics {getattr(delta, name)}"
              for name in ("drafts", "draft_tokens", "accepted") if getattr(total, name) != getattr(delta, name)]
    assert delta is not None  # `why` says so otherwise
    if total.accepted_per_pos and delta.accepted_per_pos and total.accepted_per_pos != delta.accepted_per_pos:
        broken.append(f"per position: answers {total.accepted_per_pos} vs /metrics {delta.accepted_per_pos}")
    if broken:
        return view.verdict(arm, FAIL, f"the answers' own speculative counters do not sum to the server's over the "
                            f"same {len(stated)} requests: {'; '.join(broken)}", details, part="identity")
    return view.verdict(arm, PASS, f"the {len(stated)} answers' own counters sum exactly to the /metrics delta "
                        f"({total.drafts} drafts, {total.draft_tokens} draft tokens, {total.accepted} accepted)",
                        details, part="identity")


def _shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]


def judge_acceptance(view: ChannelView, sent: Callable[[ChannelView, StoredArm], list[StoredResult]]) -> list[Verdict]:
    """``volume:identity`` and ``volume:acceptance`` for each speculating arm (base's rates kept beside them)."""
    out: list[Verdict] = []
    base = view.base
    base_rows = {(x["attribute"], x["class"]): x for x in breakdown(view, base, sent(view, base))} if base else {}
    for arm in view.arms:
        if view.role(arm) not in SPECULATING:
            continue
        results = sent(view, arm)
        out.append(identity(view, arm, results))
        rows = breakdown(view, arm, results)
        for row in rows:
            b = base_rows.get((row["attribute"], row["class"]))
            row["base_tok_s"] = b["tok_s"] if b else None
            row["S"] = round(row["tok_s"] / b["tok_s"], 3) if b and b["tok_s"] and row["tok_s"] else None
        low = collapses(rows)
        drops, nights = _history(view, arm, rows)
        details = {"table": _shown(rows), "collapse": COLLAPSE, "z": Z_COLLAPSE, "history_sessions": nights}
        measured = [r for r in rows if r["with_counters"]]
        if not measured:
            out.append(view.verdict(arm, SKIP, "not measurable: no answer carried its own speculative counters",
                                    details, part="acceptance"))
        elif low:
            low.sort(key=lambda r: r["vs_rest"])
            w = low[0]
            out.append(view.verdict(arm, FAIL, f"acceptance collapses for {w['attribute']}={w['class']}: alpha "
                                    f"{w['alpha']} against {w['rest_alpha']} for the other classes ({w['vs_rest']:.0%}, "
                                    f"z = {w['z']}, {w['with_counters']} requests){_more(low)}", details,
                                    part="acceptance"))
        elif drops:
            drops.sort(key=lambda r: r["alpha"] - r["history_median"])
            w = drops[0]
            out.append(view.verdict(arm, WARN, f"acceptance of {w['attribute']}={w['class']} dropped to {w['alpha']} "
                                    f"against {w['history_median']} (band {w['history_band']}) over sessions "
                                    f"{' '.join(map(str, nights))}{_more(drops)}", details, part="acceptance"))
        else:
            alphas = [r["alpha"] for r in measured if r["alpha"] is not None]
            spread = f"alpha {min(alphas)}-{max(alphas)}" if alphas else "no draft tokens"
            hist = f", and within {len(nights)} earlier nights' band" if nights else ""
            out.append(view.verdict(arm, PASS, f"acceptance holds in every class of {len(ATTRIBUTES)} attributes "
                                    f"({spread}; none below {COLLAPSE:.0%} of its siblings{hist})", details,
                                    part="acceptance"))
    return out


def _more(rows: list[dict[str, Any]]) -> str:
    """The other classes flagged, named (four at most)."""
    if len(rows) < 2:
        return ""
    names = ", ".join(f"{r['attribute']}={r['class']}" for r in rows[1:5])
    return f"; also {names}" + (f" and {len(rows) - 5} more" if len(rows) > 5 else "")
