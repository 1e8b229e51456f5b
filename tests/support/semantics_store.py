"""Synthetic sessions in a real store, for the semantics channels' and stream-integrity tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store

T0 = datetime(2026, 11, 1, 2, 0, 0)


def session(store: Store, probes: list[Probe], arms: list[str], options: dict[str, Any] | None = None,
            model: str = "m", version: str = "0.1", day: int = 0) -> tuple[int, dict[str, ArmRow], dict[str, int]]:
    """A session with PROBES and ARMS ("base", "base#2" an A/A copy, "mtpK" spec arms); (id, arms, probe ids)."""
    s = store.add(SessionRow(host="h", model=model, observatory_version="0", command=[], suite="t",
                             options=options or {}, status="complete", started_at=T0 + timedelta(days=day)))
    pids = {}
    for i, p in enumerate(probes):
        pids[p.name] = store.add(ProbeRow(session_id=s.id, position=i, name=p.name, category=p.category,
                                          content_hash=p.content_hash, definition=p.to_dict(), params={})).id
    out = {}
    for pos, name in enumerate(arms):
        k = int(name[3:]) if name.startswith("mtp") else None
        launch = {"speculative_config": {"method": "mtp", "num_speculative_tokens": k} if k else None,
                  "argv": [], "env": {}, "host": "h1", "copy_of": "base" if name.startswith("base#") else None}
        out[name] = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", model=model,
                                     engine_version=version, launch=launch,
                                     started_at=T0 + timedelta(days=day, minutes=pos)))
    return s.id, out, pids


def result(store: Store, arm: ArmRow, pid: int, mode: str, ids: list[int], texts: list[str], text: str | None = None,
           finish: str = "length", **kw: Any) -> ResultRow:
    """One stored result whose text is its token texts joined unless TEXT is given."""
    row: ResultRow = store.add(ResultRow(
        arm_id=arm.id, probe_id=pid, mode=mode, ok=True, text="".join(texts) if text is None else text,
        content="".join(texts) if text is None else text, token_ids=ids, token_texts=texts, finish_reason=finish,
        usage={"completion_tokens": len(ids)}, **kw))
    return row
