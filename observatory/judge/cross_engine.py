"""Across engines: the same probes through several engines' base arms, kept apart from every verdict.

Issue 17 item 4. A session whose arms run on more than one engine
(``--arms vllm:base,vllm:mtp2,ENGINE:base,ENGINE:NAME``: `observatory.engines.arm_engines`) is judged
engine by engine: each engine's spec arms against that engine's own base
(`observatory.model.roles`, `observatory.judge.apply_gates`, `observatory.judge.figures`). This
module is everything that crosses engines, and none of it is a verdict:

- **Tokenizer alignment first**: every probe's rendered prompt as each
  engine's base server tokenized it, stored in the base arm's launch facts
  under ``prompt_ids`` while the arm was up
  (`observatory.session.prompt_tokens`: the judge reads the store and needs
  no server). Where two engines' ids differ, that probe's cross-engine
  comparison is "not comparable", with the first differing token.
- **Base against base** (`compare`): on aligned probes, each base's
  complete token sequence (streamed, else non-streamed) diffed by the
  token_diff gate's own rule with the first engine's base as the reference
  (its top-k logprobs give the margin). Different kernels make near ties
  expected; the kind (identical, near_tie, diverged, ...) is shown, never
  turned into a verdict.
- **Acceptance side by side** for speculation methods both engines offer
  (n-gram lookup on both; a draft model; MTP), from each arm's own figures.

`observatory.report.data.build` adds `compare`'s result under its own key
``cross_engine`` after the session verdict is decided; the report shows it in
its own section (templates/_partials/cross_engine.html).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from observatory.judge.apply_gates import full_sequence, results_by_mode, to_output
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.model.vocabulary import BASE, TOKEN_DIFF
from observatory.store.session_store import Store

PROMPT_IDS = "prompt_ids"  # key of the base arm's launch dict
NOT_COMPARABLE = "not comparable"
ALIGNED = "aligned"
NOT_MEASURED = "not measured"
# speculative_config.method -> the method family compared across engines
FAMILIES = {"ngram": "n-gram", "ngram-simple": "n-gram", "ngram-mod": "n-gram", "ngram-map-k": "n-gram",
            "draft_model": "draft model", "draft-simple": "draft model", "mtp": "MTP", "draft-mtp": "MTP"}


@dataclass
class Alignment:
    """Whether two engines tokenize one probe's rendered prompt into the same ids."""

    status: str  # ALIGNED, NOT_COMPARABLE, NOT_MEASURED
    prompt_tokens: list[int | None]  # per engine, in the pair's order
    position: int | None = None  # the first differing token
    tokens: list[dict[str, Any]] = field(default_factory=list)  # per engine: {"id", "piece"} there
    why: str | None = None


def align(a: dict[str, Any] | None, b: dict[str, Any] | None) -> Alignment:
    """Compare two stored `prompt_ids` entries of one probe."""
    missing = [x.get("error") if x else "not tokenized" for x in (a, b) if not x or "ids" not in x]
    if a is None or b is None or missing:
        return Alignment(NOT_MEASURED, [len(x["ids"]) if x and "ids" in x else None for x in (a, b)],
                         why="; ".join(str(m) for m in missing))
    ia, ib = list(a["ids"]), list(b["ids"])
    counts: list[int | None] = [len(ia), len(ib)]
    if ia == ib:
        return Alignment(ALIGNED, counts)
    at = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))

    def tok(x: dict[str, Any], ids: list[int]) -> dict[str, Any]:
        pieces = x.get("pieces") or []
        return {"id": ids[at] if at < len(ids) else None, "piece": pieces[at] if at < len(pieces) else None}

    return Alignment(NOT_COMPARABLE, counts, at, [tok(a, ia), tok(b, ib)],
                     why=f"the prompt's token ids differ from position {at} on")


def _family(spec: dict[str, Any] | None) -> str | None:
    return FAMILIES.get(str((spec or {}).get("method"))) if spec else None


def acceptance_side_by_side(arms: Sequence[Any]) -> list[dict[str, Any]]:
    """Speculating arms grouped by method family, only families run on more than one engine."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for a in arms:
        spec = (a.launch or {}).get("speculative_config")
        fam = _family(spec)
        if fam is None or spec is None:
            continue
        acc = (a.figures or {}).get("acceptance") or {}
        groups.setdefault(fam, []).append({
            "arm": a.name, "engine": a.engine, "method": spec.get("method"),
            "k": spec.get("num_speculative_tokens"), "status": a.status,
            "drafts": acc.get("drafts"), "alpha": acc.get("alpha"), "tau": acc.get("tau")})
    return [{"family": fam, "arms": rows} for fam, rows in groups.items() if len({r["engine"] for r in rows}) > 1]


def _output_diff(store: Store, ref: Any, other: Any, pid: int, probe: Probe, gate: Any,
                 loaded: dict[int, Any] | None = None) -> dict[str, Any]:
    """OTHER's base output against REF's (the reference, whose top-k gives margins) on one probe.

    LOADED: arm id -> its results by mode, filled as read (each arm's results are read once per comparison,
    not once per probe: 40 reads of every result took 24 s of a three-engine report's 25)."""
    loaded = {} if loaded is None else loaded
    for arm in (ref, other):
        if arm.id not in loaded:
            loaded[arm.id] = results_by_mode(store, arm.id)
    mine, theirs = full_sequence(loaded[other.id], pid), full_sequence(loaded[ref.id], pid)
    if mine is None or theirs is None:
        return {"kind": None, "reason": "not measurable: no complete token sequence on "
                + ", ".join(a.name for a, r in ((ref, theirs), (other, mine)) if r is None)}
    d = gate.check(to_output(mine), to_output(theirs), probe).details
    keep = ("kind", "position", "margin", "margin_is_lower_bound", "base_token_id", "spec_token_id")
    out = {k: d.get(k) for k in keep}
    n = [len(theirs.token_ids or []), len(mine.token_ids or [])]
    if out["kind"] == "identical":
        reason = f"the same {n[0]} token ids"
    elif out["position"] is None:
        reason = f"{out['kind'] or 'no comparison'}: {n[0]} ids on {ref.name}, {n[1]} on {other.name}"
    else:
        margin = ("not readable" if out["margin"] is None else
                  f"{'at least ' if out['margin_is_lower_bound'] else ''}{out['margin']:.3f} nats")
        reason = (f"first difference at token {out['position']}: #{out['base_token_id']} on {ref.name}, "
                  f"#{out['spec_token_id']} on {other.name}; {ref.name}'s margin there {margin} "
                  f"({out['kind']}; kernels differ across engines, so near ties are expected)")
    return {**out, "reason": reason, "compared": [theirs.mode, mine.mode], "tokens": n}


def compare(store: Store, session_id: int) -> dict[str, Any] | None:
    """The session's cross-engine comparison (None when its arms ran on one engine). Never a verdict."""
    arms = store.arms(session_id)
    bases = [a for a in arms if a.role == BASE]
    engines = list(dict.fromkeys(a.engine for a in arms))
    if len(engines) < 2:
        return None
    gate = default_registry().get(TOKEN_DIFF)
    probes = [(p.id, Probe.from_dict(p.definition)) for p in store.probes(session_id)
              if not (p.definition or {}).get("channel")]
    pairs = []
    loaded: dict[int, Any] = {}
    ref = bases[0] if bases else None
    for other in bases[1:]:
        assert ref is not None
        rows = []
        for pid, probe in probes:
            al = align(((ref.launch or {}).get(PROMPT_IDS) or {}).get(probe.name),
                       ((other.launch or {}).get(PROMPT_IDS) or {}).get(probe.name))
            row: dict[str, Any] = {"probe": probe.name, "alignment": asdict(al), "output": None}
            if al.status == ALIGNED:
                row["output"] = _output_diff(store, ref, other, pid, probe, gate, loaded)
            rows.append(row)
        kinds = [r["output"]["kind"] for r in rows if r["output"]]
        pairs.append({
            "reference": ref.name, "other": other.name,
            "engines": [ref.engine, other.engine], "probes": rows,
            "summary": {"probes": len(rows),
                        ALIGNED: sum(r["alignment"]["status"] == ALIGNED for r in rows),
                        NOT_COMPARABLE: sum(r["alignment"]["status"] == NOT_COMPARABLE for r in rows),
                        NOT_MEASURED: sum(r["alignment"]["status"] == NOT_MEASURED for r in rows),
                        **{k: kinds.count(k) for k in ("identical", "near_tie", "diverged", "base_not_greedy")}},
        })
    return {
        "engines": engines,
        "bases": {a.engine: a.name for a in bases},
        "missing_bases": [e for e in engines if e not in {a.engine for a in bases}],
        "pairs": pairs,
        "acceptance": acceptance_side_by_side(arms),
        "note": ("Across engines, for information only: never part of the session verdict or of any "
                 "within-engine verdict. Each engine's spec arms are judged against their own engine's base."),
    }
