"""The gates' false-alarm rate over clean sessions: each gate's WARN, FAIL and INVALID count on clean arms.

    python benchmarks/false_alarms.py night1.db night2.db.gz ... [--known-bug GATE[@ARM]=WHERE ...] [--json]

Issue 27 item 4 asks for this table over clean nightly sessions (base,base,mtp1,mtp2 on the field model,
no fault): every WARN, FAIL or INVALID there is a false alarm, or an engine bug; issue 46 item 6 adds the
NOTE (an event within its control's rate) and KNOWN (a finding the ledger covers) counts, and each session's
verdict (the goal: PASS on every clean session). It reads each session as a user
does, through ``observatory show --json`` (every non-PASS verdict is in ``verdict.reasons``, with its gate
and arm), and counts per gate and arm role (base, aa_copy, spec: the session's own roles). A session with a fault arm
(``launch.fault``) or an arm that did not run to its end is not clean: it is listed and left out, not
counted. ``--known-bug GATE=WHERE`` (or ``GATE@ARM=WHERE``: gate names hold colons, ``params:top_k``)
counts that gate's FAILs apart, as a known
engine bug whose reproduction WHERE names (docs/engines.md): issue 27 wants those beside the table, not
in it. Databases may be gzipped (``.db.gz``, as examples/ keeps them).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from observatory.model.vocabulary import AA_COPY, BASE, FAIL, INVALID, KNOWN, NOTE, SPEC, WARN

# every level a reason can have (issue 46 item 6): NOTE and KNOWN are shown, never counted in the verdict
LEVELS = (NOTE, KNOWN, WARN, FAIL, INVALID)


def _cli(*args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "observatory", *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _plain(db: Path, tmp: Path) -> Path:
    if db.suffix != ".gz":
        return db
    dest = tmp / db.stem
    with gzip.open(db, "rb") as src, open(dest, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return dest


def not_clean(data: dict[str, Any]) -> str | None:
    """Why a session cannot count as a clean night, or None."""
    for a in data["arms"]:
        if (a.get("launch") or {}).get("fault"):
            return f"arm {a['name']} carries fault {a['launch']['fault']!r}"
        if a.get("status") != "ok":
            return f"arm {a['name']} ended {a.get('status')!r} ({a.get('reason') or 'no reason'})"
    if data["session"].get("status") != "complete":
        return f"session {data['session'].get('status')!r}"
    return None


def _known(reason: dict[str, Any], known: list[tuple[str, str | None, str]]) -> str | None:
    for gate, arm, where in known:
        if reason.get("gate") == gate and reason["level"] == FAIL and arm in (None, reason.get("arm")):
            return where
    return None


def tally(sessions: list[dict[str, Any]], known: list[tuple[str, str | None, str]]) -> dict[str, Any]:
    """{"sessions", "skipped", "arms": {role: n}, "gates": {gate: {role: {level: n}}}, "known": {...}}; roles are
    `show --json`'s (observatory.model.roles: base, aa_copy, spec, ...), "session" for a session-wide reason."""
    gates: dict[str, dict[str, collections.Counter[str]]] = collections.defaultdict(
        lambda: collections.defaultdict(collections.Counter))
    bugs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    arms: collections.Counter[str] = collections.Counter()
    counted, skipped, verdicts = [], [], []
    for data in sessions:
        why = not_clean(data)
        label = f"{data['_db']}#{data['session']['id']}"
        if why:
            skipped.append({"session": label, "why": why})
            continue
        counted.append(label)
        verdicts.append({"session": label, "verdict": data["verdict"].get("verdict")})
        kinds = {a["name"]: a.get("role") or "unknown" for a in data["arms"]}  # the session's own roles
        arms.update(kinds.values())
        for r in data["verdict"]["reasons"]:
            if r["level"] not in LEVELS:
                continue
            kind = kinds.get(r.get("arm") or "", "session")
            where = _known(r, known)
            if where:
                bugs[f"{r.get('gate')} ({where})"][kind] += 1
            else:
                gates[r.get("gate") or (r.get("code") or "(arm validity)")][kind][r["level"]] += 1
    return {"sessions": counted, "verdicts": verdicts, "skipped": skipped, "arms": dict(arms),
            "gates": {g: {k: dict(c) for k, c in by.items()} for g, by in sorted(gates.items())},
            "known": {g: dict(c) for g, c in sorted(bugs.items())}}


def markdown(t: dict[str, Any]) -> str:
    kinds = (BASE, AA_COPY, SPEC, "session")
    lines = [f"{len(t['sessions'])} clean session(s); arms: "
             + ", ".join(f"{t['arms'].get(k, 0)} {k}" for k in kinds[:3]), "",
             "| gate | " + " | ".join(f"{k} {' / '.join(LEVELS)}" for k in kinds) + " |",
             "| --- |" + " --- |" * len(kinds)]
    for gate, by in t["gates"].items():
        cells = [" / ".join(str(by.get(k, {}).get(lv, 0)) for lv in LEVELS) for k in kinds]
        lines.append(f"| {gate} | " + " | ".join(cells) + " |")
    if not t["gates"]:
        lines.append("| (none) |" + (" " + " / ".join("0" for _ in LEVELS) + " |") * len(kinds))
    for gate, by in t["known"].items():
        lines.append(f"\nknown engine bug, counted apart: {gate}: "
                     + ", ".join(f"{n} FAIL on {k}" for k, n in by.items()))
    lines.append("\nsession verdicts: " + ", ".join(f"{v['session']} {v['verdict']}" for v in t["verdicts"]))
    for s in t["skipped"]:
        lines.append(f"\nnot clean, left out: {s['session']}: {s['why']}")
    return "\n".join(lines)


def _known_arg(text: str) -> tuple[str, str | None, str]:
    key, sep, where = text.partition("=")
    if not sep or not key or not where:
        raise argparse.ArgumentTypeError(f"--known-bug {text!r}: expected GATE=WHERE or GATE@ARM=WHERE")
    gate, _, arm = key.partition("@")
    return gate, arm or None, where


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dbs", nargs="+", type=Path)
    ap.add_argument("--known-bug", action="append", type=_known_arg, default=[])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    sessions = []
    with tempfile.TemporaryDirectory() as tmp:
        for db in args.dbs:
            if not db.is_file():
                ap.error(f"{db}: no such file")
            plain = str(_plain(db, Path(tmp)))
            for s in _cli("sessions", "--db", plain, "--json"):
                data = _cli("show", str(s["id"]), "--db", plain, "--json")
                data["_db"] = db.name
                sessions.append(data)
    t = tally(sessions, args.known_bug)
    print(json.dumps(t, indent=1) if args.json else markdown(t))
    return 0


if __name__ == "__main__":
    sys.exit(main())
