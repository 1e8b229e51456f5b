"""Which arms of one session really ran together (docs/design.md section 2, mistake 6).

`compare --resume` adds arms to a stored session: hours later, or on another
host, or under another engine version. Such arms are not in the same session
in the sense that matters (same machine, same time), so the arms are split
into parts: sorted by start time, a new part begins after a pause of more than
``MAX_GAP_S`` between one arm's end and the next one's start, and arms whose
host, GPU models or engine version differ belong to different parts. An arm
outside the reference (base) arm's part gets the CROSS_SESSION validity code,
and its S against base is marked cross-session.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

MAX_GAP_S = 3600.0


def _key(arm: Any) -> tuple[Any, ...]:
    launch = arm.launch or {}
    return (launch.get("host"), tuple(launch.get("gpu_models") or ()), arm.engine_version)


def parts(arms: list[Any]) -> dict[int, tuple[int, tuple[Any, ...]]]:
    """Arm id -> its part (time cluster, machine key); arms that never started belong to no part."""
    started = sorted((a for a in arms if a.started_at is not None), key=lambda a: a.started_at)
    out: dict[int, tuple[int, tuple[Any, ...]]] = {}
    clock = 0
    last_end: datetime | None = None
    for a in started:
        if last_end is not None and (a.started_at - last_end).total_seconds() > MAX_GAP_S:
            clock += 1
        out[int(a.id)] = (clock, _key(a))
        end = a.finished_at or a.started_at
        last_end = end if last_end is None or end > last_end else last_end
    return out


def cross_session(arm: Any, ref: Any, arms: list[Any]) -> str | None:
    """Why ARM did not run in the same session as REF, or None when it did."""
    if ref is None or arm is ref:
        return None
    p = parts(arms)
    if arm.id not in p or ref.id not in p or p[arm.id] == p[ref.id]:
        return None
    why = []
    ka, kr = _key(arm), _key(ref)
    for name, a, r in zip(("host", "GPUs", "engine version"), ka, kr):
        if a != r:
            why.append(f"{name} {a or 'unknown'} vs {r or 'unknown'} on {ref.name}")
    if not why:
        why.append(f"started more than {MAX_GAP_S / 3600:g} h apart from {ref.name} with no arm in between")
    return "ran apart from the other arms (resumed?): " + "; ".join(why)
