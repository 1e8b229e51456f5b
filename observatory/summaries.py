"""Per-arm summaries: the few figures history reads, stored when a session is judged.

`history` used to build every session whole (every result, its top
logprobs, every verdict) to keep a dozen numbers per arm: 96 s over 1,000
sessions. `write_summaries` (called by `observatory.evaluate` after the judge
and the figures) stores those numbers as one `SummaryRow` per arm, and
`read_summaries` reads them back with the filters in SQL.

Databases written before summaries existed get theirs built once, lazily,
the first time history reads those sessions (`ensure_summaries`).

The session verdict is the nightly gate's (`session_verdict`, the one call
of `observatory.verdict` here). A session is judged while it still runs and
marked complete right after, so the verdict is taken as the policy states it
for the complete session, and the status it assumed is stored with it; a
session that ended otherwise (interrupted, failed) is summarised again when
history next reads it.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import msgspec
from sqlalchemy import Text, delete, func, or_, select, type_coerce

from observatory.db import ArmRow, SessionRow, SummaryRow
from observatory.read_model import SessionView
from observatory.verdict import INVALID_CODES

_decode = msgspec.json.Decoder().decode
# A session still running is summarised as the verdict it would have once complete.
_ASSUMED_WHILE_RUNNING = "complete"


def suite_hash(hashes: Iterable[str]) -> str:
    """A hash of a session's probe content HASHES (same probes, same hash)."""
    joined = ",".join(sorted(hashes))
    return hashlib.sha256(joined.encode()).hexdigest()[:12]


def session_verdict(data: SessionView, status: str | None = None) -> str:
    """The session verdict of one `report_data.build` view, as the policy states it had the session
    ended with STATUS (default: its own status); the one call of the verdict policy here."""
    from observatory.verdict import decide

    session = data.session if status is None else replace(data.session, status=status)
    return decide(session, data.arms).verdict


def arm_summaries(data: SessionView) -> list[dict[str, Any]]:
    """One dict of SummaryRow fields per arm of a `report_data.build` view (no ids, no verdict)."""
    s = data.session
    spread = next((a.figures.noise_floor.get("throughput_spread") for a in data.arms if a.figures.noise_floor),
                  None)
    suite = suite_hash(p.hash for p in data.probes)
    out = []
    for a in data.arms:
        codes = [v.code for v in a.validity]
        fig = a.figures
        acc, vs, spd = fig.acceptance or {}, fig.vs_base or {}, fig.speed or {}
        ci = vs.get("ci")
        ci = ci if isinstance(ci, (list, tuple)) and len(ci) == 2 else None
        cells = [r.verdict for r in a.results if r.verdict]
        out.append({
            # the model the arm's server served (a URL arm's own), else the session's --model: history never
            # draws one trend across two models that one session model string hid (issue 32 item 7)
            "position": a.position, "arm": a.name, "model": a.model or s.model,
            "engine_version": a.engine_version, "image": s.image, "suite_hash": suite,
            "status": a.status, "validity": codes,
            "trusted": a.status == "ok" and not any(c in INVALID_CODES for c in codes),
            "alpha": acc.get("alpha"), "tau": acc.get("tau"), "S": vs.get("S"),
            "S_lo": ci[0] if ci else None, "S_hi": ci[1] if ci else None, "spread": spread,
            "ttft_ms": (spd.get("ttft_ms") or {}).get("median"),
            "verdicts": dict(Counter(cells)),
            "failing": sorted(r.probe for r in a.results if r.verdict == "FAIL"),
        })
    return out


def write_summaries(store: Any, session_id: int) -> int:
    """(Re)write one session's summaries from its judged data; returns how many arms."""
    from observatory.report_data import build

    data = build(store, session_id)
    status = data.session.status
    assumed = _ASSUMED_WHILE_RUNNING if status == "running" else status
    verdict = session_verdict(data, assumed)
    arm_ids = {a.position: a.id for a in store.arms(session_id)}
    rows = [SummaryRow(session_id=session_id, arm_id=arm_ids[x["position"]], session_verdict=verdict,
                       verdict_status=assumed, **x)
            for x in arm_summaries(data) if x["position"] in arm_ids]
    with store.tx() as tx:
        tx.execute(delete(SummaryRow).where(SummaryRow.session_id == session_id))
        tx.add_all(rows)
    return len(rows)


def _latest_sessions(model: str | None, limit: int) -> Any:
    q = select(SessionRow.id)
    if model:
        served = select(ArmRow.session_id).where(func.lower(ArmRow.model).contains(model.lower(), autoescape=True))
        q = q.where(or_(func.lower(SessionRow.model).contains(model.lower(), autoescape=True),
                        SessionRow.id.in_(served)))
    return q.order_by(SessionRow.id.desc()).limit(limit)


def ensure_summaries(store: Any, model: str | None = None, limit: int = 100) -> list[int]:
    """Build the summaries missing (or stale) among the latest LIMIT sessions of MODEL; returns their ids."""
    latest = _latest_sessions(model, limit).subquery()
    with store.tx() as tx:
        status = dict(tx.execute(select(SessionRow.id, SessionRow.status)
                                 .where(SessionRow.id.in_(select(latest)))).tuples().all())
        arms = dict(tx.execute(select(ArmRow.session_id, func.count()).where(ArmRow.session_id.in_(status))
                               .group_by(ArmRow.session_id)).tuples().all())
        summed = {sid: (n, assumed) for sid, n, assumed in tx.execute(
            select(SummaryRow.session_id, func.count(), func.min(SummaryRow.verdict_status))
            .where(SummaryRow.session_id.in_(status)).group_by(SummaryRow.session_id))}
    stale = []
    for sid, n_arms in arms.items():
        n, assumed = summed.get(sid, (0, None))
        if n < n_arms or (status[sid] != "running" and assumed != status[sid]):
            stale.append(sid)
    for sid in sorted(stale):
        write_summaries(store, sid)
    return sorted(stale)


# the JSON columns read as text and decoded with msgspec (4,000 rows: SQLAlchemy's json.loads was half the time)
_JSON_FIELDS = ("validity", "verdicts", "failing")


def read_summaries(store: Any, model: str | None = None, arm: str | None = None,
                   limit: int = 100) -> list[dict[str, Any]]:
    """Summary fields plus the session's ``started_at``, ``host`` and ``session_status`` of the latest
    LIMIT sessions whose model contains MODEL (case-insensitive), only arm ARM if given; oldest
    session first, arms in run order."""
    ensure_summaries(store, model, limit)
    t = SummaryRow.__table__
    cols = [type_coerce(c, Text).label(c.name) if c.name in _JSON_FIELDS else c for c in t.c]
    q = (select(*cols, SessionRow.started_at, SessionRow.host, SessionRow.status.label("session_status"))
         .join(SessionRow, t.c.session_id == SessionRow.id)
         .where(t.c.session_id.in_(_latest_sessions(model, limit).scalar_subquery())))
    if arm is not None:
        q = q.where(t.c.arm == arm)
    if model:
        q = q.where(func.lower(t.c.model).contains(model.lower(), autoescape=True))
    with store.tx() as tx:
        rows = [dict(r) for r in tx.execute(q.order_by(t.c.session_id, t.c.position)).mappings()]
    for r in rows:
        for f in _JSON_FIELDS:
            r[f] = _decode(r[f]) if r[f] is not None else None
    return rows
