"""The level each injected fault got: per fault arm, its worst counted level and the checks that gave it.

    python benchmarks/fault_levels.py selftest.db nights.db.gz ... [--json]

Issue 46 item 6 asks, beside the clean sessions' table (benchmarks/false_alarms.py), for the project's own
faults with the level each got: the goal is FAIL on every fault that breaks output or makes the arm clearly
slower. Each session is read as a user reads it, through ``observatory show --json`` (the stored verdicts: run
``observatory judge`` first for today's judge); a fault arm is one launched with a fault (``launch.fault``, or an
arm whose name says ``+fault=``). An arm whose environment carries a fault's variables without declaring it
(examples/cpu-fault-nights) is named with ``--fault-arm SESSION:ARM=FAULT``. Databases may be gzipped.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from false_alarms import _cli, _plain  # the same reading of a database (this folder is on sys.path)

from observatory.model.vocabulary import FAIL, INVALID, KNOWN, NOTE, PASS, WARN

ORDER = (FAIL, INVALID, WARN, KNOWN, NOTE)


def levels(db: Path, named: dict[tuple[int, str], str]) -> list[dict[str, Any]]:
    """One row per fault arm of every session of DB."""
    rows = []
    for s in sorted(x["id"] for x in _cli("sessions", "--db", str(db), "--json", "--limit", "100000")):
        data = _cli("show", str(s), "--db", str(db), "--json")
        for arm in data["arms"]:
            fault = (arm.get("launch") or {}).get("fault") or named.get((s, arm["name"]))
            if not fault:
                continue
            mine = [r for r in data["verdict"]["reasons"] if r.get("arm") == arm["name"]]
            worst = next((lv for lv in ORDER if any(r["level"] == lv for r in mine)), PASS)
            gates = sorted({str(r.get("gate") or r.get("code") or "validity") for r in mine if r["level"] == worst})
            rows.append({"db": db.name, "session": s, "arm": arm["name"], "fault": fault, "level": worst,
                         "by": gates, "session_verdict": data["verdict"]["verdict"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dbs", nargs="+", type=Path)
    ap.add_argument("--fault-arm", action="append", default=[], metavar="SESSION:ARM=FAULT")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    named = {}
    for spec in a.fault_arm:
        where, _, fault = spec.partition("=")
        sid, _, arm = where.partition(":")
        named[(int(sid), arm)] = fault
    with tempfile.TemporaryDirectory() as tmp:
        rows = [r for db in a.dbs for r in levels(_plain(db, Path(tmp)), named)]
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("| fault | database, session, arm | level | by |\n| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['fault']} | {r['db']} #{r['session']} {r['arm']} | {r['level']} | {', '.join(r['by'])} |")


if __name__ == "__main__":
    main()
