"""A channel's stored session from rows a test gives per arm and probe, and its judge's verdicts by arm."""

from __future__ import annotations

from typing import Any

from observatory.channels.view import ChannelView
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store


def channel_view(store: Store, channel: str, probes: list[Probe], arms: list[tuple[str, str]],
                 rows: Any) -> ChannelView:
    """A session of ARMS (name, role) whose results ROWS(arm name, probe) gives as (repeat, ResultRow kwargs)."""
    s = store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t",
                             options={"channels": [channel]}))
    by_id: dict[int, Probe] = {}
    for i, p in enumerate(probes):
        pid = store.add(ProbeRow(session_id=s.id, position=i, name=p.name, category=p.category,
                                 content_hash=p.content_hash, definition=p.to_dict(), params={})).id
        by_id[pid] = p
    arm_rows, roles = [], {}
    for pos, (name, role) in enumerate(arms):
        a = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", launch={}))
        arm_rows.append(a)
        roles[name] = role
        for pid, p in by_id.items():
            for repeat, kw in rows(name, p):
                store.add(ResultRow(arm_id=a.id, probe_id=pid, mode=channel, repeat=repeat, **kw))
    return ChannelView(store=store, session_id=s.id, channel=channel, arms=arm_rows, roles=roles,
                       probes=by_id, registry=None)  # type: ignore[arg-type]


def verdicts(view: ChannelView, judge: Any) -> dict[tuple[str, str], tuple[str, str]]:
    """JUDGE's verdicts on VIEW as (arm name, gate) -> (verdict, reason)."""
    names = {a.id: a.name for a in view.arms}
    return {(names[v.arm_id], v.gate): (v.verdict, v.reason) for v in judge(view)}
