"""Does vLLM wire the MTP layer the way training did?

Probe by probe, the acceptance vLLM reported for an MTP arm of a stored
observatory session (spec-decode counters read around each streamed
request) against the MTP head's offline top-1 acceptance on the very tokens
that arm produced (`check_mtp.draft_table` + `simulate`: drafts made the
way vLLM makes them, teacher-forced on the accepted prefix). A checkpoint
that vLLM loads but wires differently (norm order, hidden/embedding order in
`input_proj`, the pre-norm hidden state) drafts garbage online while the
offline figure stays high; a wiring that matches gives the same figure
within a few points.

Usage::

    observatory compare --arms base,mtp1 --db /tmp/wiring.db
    python -m training.wiring_check /tmp/wiring.db [--arm mtp1] [--model DIR]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoTokenizer

from observatory.judge.apply_gates import full_sequence, results_by_mode
from observatory.model.probes import Probe
from observatory.model.read_model import to_plain
from observatory.report.data import build
from observatory.store.session_store import Store
from training.build_tokenizer import DEFAULT_OUT
from training.check_mtp import draft_table, prompt_ids, simulate
from training.model import load


@dataclass
class Row:
    """One probe: draft tokens and accepted tokens, offline and served."""

    probe: str
    offline_drafted: int
    offline_accepted: int
    served_drafted: int
    served_accepted: int


def _alpha(accepted: int, drafted: int) -> float | None:
    return accepted / drafted if drafted else None


def compare(store: Store, session_id: int | None, arm: str, model_dir: Path = DEFAULT_OUT) -> list[Row]:
    """Rows for every probe of `arm` in a stored session (the newest by default)."""
    data = to_plain(build(store, session_id))  # the documented JSON shape (observatory.model.read_model)
    names = [a["name"] for a in data["arms"]]
    if arm not in names:
        raise ValueError(f"no arm {arm!r} in the session (arms: {names})")
    spec_arm = data["arms"][names.index(arm)]
    spec = spec_arm["speculative_config"] or {}
    k = spec.get("num_speculative_tokens")
    if spec.get("method") != "mtp" or k is None:
        raise ValueError(f"arm {arm!r} is not an MTP arm")
    arm_row = store.arms(data["session"]["id"])[names.index(arm)]
    # The streamed request's token ids, or the non-streamed ones (the same
    # greedy sequence) where the stream lost some: what the judge diffs.
    modes = results_by_mode(store, arm_row.id)
    full: dict[str, list[int]] = {}
    for p in store.probes(data["session"]["id"]):
        r = full_sequence(modes, p.id)
        if r is not None:
            full[p.name] = r.token_ids
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = load(model_dir)
    probes = {p["name"]: Probe.from_dict(p["definition"]) for p in data["probes"]}
    by_probe = (spec_arm.get("acceptance") or {}).get("by_probe") or {}
    rows = []
    with torch.no_grad():
        for name, served in by_probe.items():
            if name not in full:
                continue
            prompt = prompt_ids(tok, probes[name])
            seq = prompt + full[name]
            drafted, accepted = simulate(draft_table(model, seq), seq, len(prompt), k)[:2]
            rows.append(Row(name, drafted, accepted, served["draft_tokens"], served["accepted"]))
    return rows


def totals(rows: list[Row]) -> tuple[float | None, float | None]:
    """(offline, served) acceptance over all rows."""
    return (
        _alpha(sum(r.offline_accepted for r in rows), sum(r.offline_drafted for r in rows)),
        _alpha(sum(r.served_accepted for r in rows), sum(r.served_drafted for r in rows)),
    )


def main() -> int:
    """Print the per-probe table; exit 1 when the totals differ by more than --tolerance."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path, help="a session database (observatory compare --db)")
    ap.add_argument("--session", type=int, default=None, help="session id (default: the newest)")
    ap.add_argument("--arm", default="mtp1")
    ap.add_argument("--model", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--tolerance", type=float, default=0.05)
    args = ap.parse_args()
    torch.set_num_threads(2)
    rows = compare(Store(str(args.db), create=False), args.session, args.arm, args.model)
    print(f"{'probe':24s} {'offline':>12s} {'served':>12s}")
    for r in rows:
        print(f"{r.probe:24s} {r.offline_accepted:5d}/{r.offline_drafted:<6d} {r.served_accepted:5d}/{r.served_drafted:<6d}")
    offline, served = totals(rows)
    if offline is None or served is None:
        print("no drafts to compare")
        return 1
    print(f"{'all':24s} {offline:12.3f} {served:12.3f}   difference {served - offline:+.3f}")
    return 0 if abs(served - offline) <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
