"""Diff a channel's requests against base's, knowing where base itself varies.

Shared by the state channels (soak, length_sweep, mixed_batch). Each of them
keys its stored results (a key names one request the same way on every arm:
a length, a probe and its occurrence, a probe alone or in a batch), says
which of base's keys are the reference for a key, and where base is not
steady (its own repeats differ, or it differs alone and in a batch). This
module does the rest, the same way for all three:

- each request is diffed against its reference with the ``token_diff`` gate
  (full token ids; at the first divergence base's logprob margin tells a
  near-tie, WARN, from a hard divergence, FAIL: docs/design.md mistake 3);
- where base varies (its own noise, or an A/A copy ``base,base`` that differs
  from base at that key), a divergence is WARN "not attributable", never FAIL;
- a request that failed on the arm but not on base is FAIL; one base could not
  answer is "not measurable" (no verdict made up for it), and so is one whose
  ids came back incomplete on either side (fewer than its usage count: vLLM
  0.26 for CUDA withholds the streamed ids its hermes tool parser swallows).

The arm's verdict is FAIL if any request FAILs, else WARN if any WARNs, else
PASS; UNJUDGED when no request could be compared. The base arm gets PASS
(with its own noise counted) or INVALID when its reference requests failed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from observatory.channels.view import ChannelView
from observatory.judge.apply_gates import to_output, tokens_complete
from observatory.judge.rates import OPPORTUNITIES, opportunities
from observatory.model.errors import NOT_REPORTED
from observatory.model.numerics import NEAR_TIE_NATS
from observatory.model.vocabulary import (
    AA_COPY,
    BASE,
    FAIL,
    INVALID,
    NOT_MEASURABLE,
    PASS,
    SKIP,
    TOKEN_DIFF,
    UNJUDGED,
    WARN,
)
from observatory.store.stored import StoredArm, StoredResult, Verdict

PREVIEW = 80  # characters of each output shown in a table row
CONTINUATION = 12  # tokens shown per side from the first divergence in a table row


@dataclass(frozen=True)
class Keyed:
    """One stored request of one arm, under the key every arm shares for it."""

    key: tuple[Any, ...]
    label: dict[str, Any]  # flat and short: what the table shows for this request
    result: StoredResult


# (view, arm) -> its requests by key
KeyFn = Callable[[ChannelView, StoredArm], dict[tuple[Any, ...], Keyed]]
# base's requests -> {key: why base is not steady there} (a key of any arm, or a reference key)
NoiseFn = Callable[[dict[tuple[Any, ...], Keyed]], dict[tuple[Any, ...], str]]


def same_tokens(a: StoredResult | None, b: StoredResult | None) -> bool:
    """Whether two results both answered with the same generated token ids."""
    return a is not None and b is not None and a.ok and b.ok and list(a.token_ids) == list(b.token_ids)


def tool_calls_as_data(r: StoredResult) -> list[tuple[str, Any]]:
    """An answer's tool calls as data: (name, arguments parsed from JSON where they parse, else as sent)."""
    out = []
    for c in r.tool_calls or []:
        fn = (c or {}).get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        out.append((str(fn.get("name") or ""), args))
    return out


def differs_alone(ref: dict[tuple[Any, ...], Keyed], alone: str, other: str, why: str) -> dict[tuple[Any, ...], str]:
    """Base's own noise for channels keyed (name, how): requests whose OTHER output on base differs from its ALONE
    output of the same name, each with WHY (the engine's own issue, not the spec arm's)."""
    out = {}
    for (name, how), k in ref.items():
        first = ref.get((name, alone))
        if how == other and first is not None and not same_tokens(k.result, first.result):
            out[(name, how)] = why
    return out


def preview(r: StoredResult | None) -> str:
    """The first 80 characters of a result's text (the template escapes it)."""
    if r is None:
        return ""
    return (r.text or "")[:PREVIEW] if r.ok else f"error: {(r.error or '')[:PREVIEW - 7]}"


def continuations(r: StoredResult, ref: StoredResult, at: int | None) -> dict[str, Any]:
    """Both sides from token AT (the first divergence) on: per-token texts and ids, base's and here's.

    A row's text from the start would show two identical texts whenever the outputs agree in text
    but not in ids (tokens past a stop string, docs/channels.md section finish); from the
    divergence, the side that ended shows an empty list and the other what it added.
    """
    def side(x: StoredResult) -> tuple[list[Any], list[int]]:
        ids = list(x.token_ids or [])[at or 0:][:CONTINUATION]
        texts = list(x.token_texts or [])
        shown = texts[at or 0:][:CONTINUATION] if len(texts) == len(x.token_ids or []) else ids
        return shown, ids

    (base, base_ids), (here, here_ids) = side(ref), side(r)
    return {"from_token": at, "base": base, "base_ids": base_ids, "here": here, "here_ids": here_ids}


def diff(view: ChannelView, cand: StoredResult, ref: StoredResult) -> tuple[str, dict[str, Any]]:
    """(verdict, details) of CAND against REF by the token_diff gate (REF's top-k logprobs give the margin)."""
    res = view.registry.get(TOKEN_DIFF).check(to_output(cand), to_output(ref), view.probe(cand))
    return res.verdict, dict(res.details)


def _withheld(r: StoredResult, where: str) -> str | None:
    """Why R cannot be diffed token by token (fewer ids than its usage count: withheld), or None."""
    if tokens_complete(r):
        return None
    said = (r.usage or {}).get("completion_tokens")
    return (f"ids withheld {where}: {len(r.token_ids or [])} of {said if said is not None else 'unknown'} "
            "came back (the engine's stream held them back)")


def _row(view: ChannelView, k: Keyed, ref: StoredResult | None, noise: str | None) -> dict[str, Any]:
    r = k.result
    row: dict[str, Any] = {**k.label}
    if ref is None or not ref.ok:
        row.update(verdict=NOT_MEASURABLE, kind="base did not answer", position=None, margin=None)
        return row
    if not r.ok:
        row.update(verdict=FAIL, kind="request failed here, not on base", position=None, margin=None,
                   here=preview(r))
        return row
    short = _withheld(r, "here") or _withheld(ref, "on base")
    if short:
        row.update(verdict=NOT_MEASURABLE, kind=short, position=None, margin=None)
        return row
    verdict, d = diff(view, r, ref)
    margin = d.get("margin")
    kind = d.get("kind")
    # where a near-tie flip could have happened: the rate of such flips is judged against controls
    # (observatory.judge.rates), never one flip at a time
    row[OPPORTUNITIES] = opportunities(ref.top_logprobs, len(ref.token_ids or []) if d.get("position") is None
                                       else int(d["position"]) + 1, NEAR_TIE_NATS)
    if d.get("longer"):  # one side ended where the other goes on: no logprob margin exists there
        kind = "here continues past base's end" if d["longer"] == "spec" else "base continues past the end here"
    row.update(verdict=verdict, kind=kind, position=d.get("position"),
               margin=None if margin is None else round(float(margin), 3))
    if verdict == FAIL and noise:
        row.update(verdict=WARN, kind=f"not attributable: {noise}")
    if verdict != PASS:
        row.update(continuations(r, ref, d.get("position")))
    return row


def judge_against_base(view: ChannelView, keyed: KeyFn, ref_key: Callable[[tuple[Any, ...]], tuple[Any, ...]],
                       base_noise: NoiseFn | None = None, what: str = "requests",
                       part: str | None = None) -> list[Verdict]:
    """Every arm's verdict: each keyed request diffed against base's request at REF_KEY(key)."""
    base = view.base
    if base is None:
        return [view.verdict(a, UNJUDGED, "no base arm to diff against", part=part) for a in view.arms]
    ref = keyed(view, base)
    noisy: dict[tuple[Any, ...], str] = dict(base_noise(ref)) if base_noise else {}
    for arm in view.arms:
        if view.role(arm) == AA_COPY:
            for key, k in keyed(view, arm).items():
                if ref_key(key) in ref and not same_tokens(k.result, ref[ref_key(key)].result):
                    noisy.setdefault(key, f"A/A copy {arm.name} differs from base")
    out = [_base_verdict(view, base, ref, noisy, what, part)]
    unreported = out[0].verdict == SKIP  # base's engine reports nothing to diff: no arm of it is judged
    for arm in view.arms:
        if arm.id == base.id or view.role(arm) == BASE:
            continue
        if unreported:
            out.append(view.verdict(arm, SKIP, out[0].reason, {"requests": len(keyed(view, arm))}, part=part))
            continue
        rows = []
        for key, k in sorted(keyed(view, arm).items(), key=lambda kv: (kv[1].label.get("index", 0), kv[0])):
            rk = ref_key(key)
            base_res = ref[rk].result if rk in ref else None
            rows.append(_row(view, k, base_res, noisy.get(key) or noisy.get(rk)))
        out.append(_arm_verdict(view, arm, rows, what, part))
    return out


def _base_verdict(view: ChannelView, base: StoredArm, ref: dict[tuple[Any, ...], Keyed],
                  noisy: dict[tuple[Any, ...], str], what: str, part: str | None) -> Verdict:
    failed = [k for k in ref.values() if not k.result.ok]
    table = [{**k.label, "verdict": NOT_MEASURABLE, "kind": "failed on base", "here": preview(k.result)}
             for k in failed]
    table += [{**ref[key].label, "verdict": WARN, "kind": f"base varies: {why}"} for key, why in noisy.items()
              if key in ref]
    details = {"requests": len(ref), "noisy": len(noisy), "table": table}
    if not ref:
        return view.verdict(base, INVALID, f"the reference: no {what} stored on base", details, part=part)
    if failed and len(failed) == len(ref) and all((k.result.error or "").startswith(NOT_REPORTED) for k in failed):
        return view.verdict(base, SKIP, f"not measurable: {_first_line(failed[0].result.error or '')}", details,
                            part=part)
    if failed:
        return view.verdict(base, INVALID, f"the reference: {len(failed)} of {len(ref)} {what} failed on base",
                            details, part=part)
    return view.verdict(base, PASS, f"the reference: {len(ref)} {what}; base varies at {len(noisy)} "
                        "(divergences there are not attributable)", details, part=part)


def _arm_verdict(view: ChannelView, arm: StoredArm, rows: list[dict[str, Any]], what: str,
                 part: str | None) -> Verdict:
    judged = [r for r in rows if r["verdict"] != NOT_MEASURABLE]
    fails = [r for r in judged if r["verdict"] == FAIL]
    warns = [r for r in judged if r["verdict"] == WARN]
    details = {"requests": len(rows), "judged": len(judged), "fail": len(fails), "warn": len(warns), "table": rows}
    if not judged:
        return view.verdict(arm, UNJUDGED, f"none of {len(rows)} {what} could be compared with base", details,
                            part=part)
    if fails:
        first = fails[0]
        where = ", ".join(f"{k}={v}" for k, v in first.items() if k not in _NOT_LABEL)
        return view.verdict(arm, FAIL, f"{len(fails)} of {len(judged)} {what} differ from base where base is "
                            f"steady; first: {where} ({first['kind']}, at token {first['position']})", details,
                            part=part)
    if warns:
        return view.verdict(arm, WARN, f"{len(warns)} of {len(judged)} {what} differ from base: near-ties or "
                            "where base itself varies (not attributable)", details, part=part)
    return view.verdict(arm, PASS, f"all {len(judged)} {what} equal base's token for token", details, part=part)


_NOT_LABEL = frozenset({"verdict", "kind", "position", "margin", "base", "here", "from_token", "base_ids",
                        "here_ids", OPPORTUNITIES})


def _first_line(error: str, at_most: int = 300) -> str:
    """A stored error's first line, cut to AT_MOST characters (a reason, not a log)."""
    line = error.splitlines()[0] if error else ""
    return line if len(line) <= at_most else line[:at_most] + "..."
