"""What each phase of a stored session cost, per arm: engine start, suite passes, every field channel.

    python benchmarks/channel_costs.py runs.db [--session N] [--json]

Time to verdict (issue 29 item 7): the session's wall time in the store
(session ``started_at`` to ``finished_at``) split into the engines' start
(launch to ready, every arm), generation (every phase above: the engine
serving requests) and what the observatory adds inside the session (the rest:
stopping each engine, the gaps between arms, its own work between phases),
with the ratio wall / (start + generation) the issue bounds at 1.25. Judging
and the report come after ``finished_at`` and are not in the store; time them
on a copy (``observatory judge 1 --db COPY``; benchmarks/README.md).

Read from the store alone (results' ``created_at``, arms' ``started_at``,
``ready_at`` and ``finished_at``): results are stored as they arrive and the
runner runs an arm's phases one after another, so a phase's cost is the time
from the previous phase's last stored result (or the engine's readiness) to
its own last one. Phases in the order they ran; ``mode`` names them (the
suite's ``warmup``, ``stream``, ``nonstream``, ``batch``; a channel's own name;
``timed``). Stored timestamps have microsecond resolution; a phase that shares
its first second with the previous one is still told apart by order.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any


def _t(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def phase_costs(db: str, session: int | None = None) -> dict[str, Any]:
    """{"session": id, "arms": [{"name", "start_s", "phases": [{"mode", "requests", "seconds"}], "total_s"}]}."""
    if not Path(db).is_file():
        raise SystemExit(f"channel_costs: no database at {db}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    if session is None:
        session = con.execute("select max(id) from sessions").fetchone()[0]
    arms = []
    for arm_id, name, started, ready, finished in con.execute(
            "select id, name, started_at, ready_at, finished_at from arms where session_id = ? order by position",
            (session,)).fetchall():
        rows = con.execute("select mode, created_at from results where arm_id = ? order by created_at, id",
                           (arm_id,)).fetchall()
        phases: list[dict[str, Any]] = []
        last = _t(ready)
        for mode, created in rows:
            at = _t(created)
            if not phases or phases[-1]["mode"] != mode:
                phases.append({"mode": mode, "requests": 0, "from": last, "to": at})
            phases[-1]["requests"] += 1
            phases[-1]["to"] = at
            last = at
        out = [{"mode": p["mode"], "requests": p["requests"],
                "seconds": round((p["to"] - p["from"]).total_seconds(), 1) if p["from"] else None}
               for p in phases]
        t0, t1, tr = _t(started), _t(finished), _t(ready)
        arms.append({"name": name,
                     "start_s": round((tr - t0).total_seconds(), 1) if t0 and tr else None,
                     "phases": out,
                     "total_s": round((t1 - t0).total_seconds(), 1) if t0 and t1 else None})
    srow = con.execute("select started_at, finished_at from sessions where id = ?", (session,)).fetchone()
    con.close()
    return {"session": session, "arms": arms, "time_to_verdict": time_to_verdict(srow, arms)}


def time_to_verdict(srow: tuple[str | None, str | None] | None, arms: list[dict[str, Any]]) -> dict[str, Any]:
    """The session's wall time, the engines' start, generation, what the observatory added, and the ratio
    wall / (start + generation); None figures where the store lacks a timestamp (a URL arm has no start)."""
    t0, t1 = (_t(srow[0]), _t(srow[1])) if srow else (None, None)
    wall = (t1 - t0).total_seconds() if t0 and t1 else None
    start = sum(a["start_s"] or 0.0 for a in arms)
    generation = sum(p["seconds"] or 0.0 for a in arms for p in a["phases"])
    added = wall - start - generation if wall is not None else None
    return {"wall_s": None if wall is None else round(wall, 1), "start_s": round(start, 1),
            "generation_s": round(generation, 1), "observatory_s": None if added is None else round(added, 1),
            "ratio": round(wall / (start + generation), 3) if wall and start + generation > 0 else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("db")
    ap.add_argument("--session", type=int)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    data = phase_costs(a.db, a.session)
    if a.json:
        print(json.dumps(data, indent=1))
        return
    for arm in data["arms"]:
        print(f"{arm['name']}: engine start {arm['start_s']} s, arm total {arm['total_s']} s")
        for p in arm["phases"]:
            print(f"  {p['mode']:<14} {p['requests']:>5} requests  {p['seconds']} s")
    t = data["time_to_verdict"]
    print(f"session: wall {t['wall_s']} s = engine start {t['start_s']} s + generation {t['generation_s']} s "
          f"+ observatory {t['observatory_s']} s; wall / (start + generation) = {t['ratio']} "
          "(judging and the report come after, not in the store)")


if __name__ == "__main__":
    main()
