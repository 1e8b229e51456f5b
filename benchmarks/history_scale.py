#!/usr/bin/env python
"""History and one-session reports over databases of 10 to 1,000 sessions (targets: < 5 s and < 2 s).

Each database holds N copies of the real H200 session in
``examples/h200/h200-tiny.db.gz`` (4 arms, 10 probes, judged): its session,
arms, probes, streamed results (packed and compressed as the store now writes them),
verdicts and measurements, copied with fresh ids. Timed per N:

- ``history``: `observatory history --limit N` as a fresh process (start-up
  included), with the summaries written as `evaluate` writes them, printing
  the table (``history s``) or JSON (``--json s``);
- ``history, first run on an old database``: the same with no summaries, so
  the first run builds them all (once);
- ``report``: `observatory report LAST --out DIR` as a fresh process;
- ``points``, ``alerts``: `load_points` and `find_alerts` in this process.

    python benchmarks/history_scale.py [--sizes 10,100,1000] [--work DIR]
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "examples" / "h200" / "h200-tiny.db.gz"  # committed gzipped (examples/h200/README.md)


def _unpack(dest: Path) -> None:
    """The example session, gunzipped to DEST."""
    dest.write_bytes(gzip.decompress(SOURCE.read_bytes()))
# table -> (foreign keys to remap: column -> table it points at)
TABLES = {
    "sessions": {},
    "arms": {"session_id": "sessions"},
    "probes": {"session_id": "sessions"},
    "results": {"arm_id": "arms", "probe_id": "probes"},
    "verdicts": {"arm_id": "arms", "result_id": "results", "probe_id": "probes"},
    "measurements": {"arm_id": "arms"},
    "summaries": {"session_id": "sessions", "arm_id": "arms"},
}


def template(work: Path) -> Path:
    """The source session migrated, its non-stream results dropped, judged (summaries written)."""
    sys.path.insert(0, str(REPO))
    from observatory.commands.evaluate import evaluate
    from observatory.store.db import PAGE_SIZE
    from observatory.store.session_store import Store

    path = work / "template.db"
    _unpack(path)
    store = Store(str(path))  # migrates: results.reasoning, summaries
    c = sqlite3.connect(path)
    c.execute("DELETE FROM verdicts")
    c.execute("DELETE FROM results WHERE mode != 'stream'")
    c.commit()
    c.close()
    from sqlalchemy.orm.attributes import flag_modified

    from observatory.store.compressed import CompressedJSON, CompressedText
    from observatory.store.db import ArmRow, ResultRow

    with store.tx() as tx:  # rewrite packed and compressed columns as new sessions are stored
        for cls in (ResultRow, ArmRow):
            cols = [c.key for c in cls.__table__.columns if isinstance(c.type, (CompressedJSON, CompressedText))]
            for r in tx.query(cls).all():
                for col in cols:
                    flag_modified(r, col)
    evaluate(store, 1)
    store.close()
    c = sqlite3.connect(path)
    c.execute("PRAGMA journal_mode=DELETE")  # one file, safe to copy
    c.execute(f"PRAGMA page_size={PAGE_SIZE}")  # the page size of a database the store creates now
    c.execute("VACUUM")
    c.close()
    return path


def replicate(src: Path, dst: Path, n: int, summaries: bool = True) -> None:
    """DST with N copies of SRC's one session."""
    shutil.copy(src, dst)
    c = sqlite3.connect(dst)
    rows = {t: c.execute(f"SELECT * FROM {t}").fetchall() for t in TABLES}
    cols = {t: [d[1] for d in c.execute(f"PRAGMA table_info({t})")] for t in TABLES}
    stride = {t: max((r[0] for r in rows[t]), default=0) for t in TABLES}
    for t in ("summaries", "measurements", "verdicts", "results", "probes", "arms", "sessions"):
        c.execute(f"DELETE FROM {t}")
    for t, fks in TABLES.items():
        if t == "summaries" and not summaries:
            continue
        idx = {col: cols[t].index(col) for col in fks}
        marks = ",".join("?" * len(cols[t]))
        batch = []
        for i in range(n):
            for r in rows[t]:
                r = list(r)
                r[0] += i * stride[t]
                for col, target in fks.items():
                    if r[idx[col]] is not None:
                        r[idx[col]] += i * stride[target]
                batch.append(r)
        c.executemany(f"INSERT INTO {t} VALUES ({marks})", batch)
    c.commit()
    c.close()


def cli(*args: str) -> float:
    """Wall seconds of one fresh `python -m observatory ARGS` process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "observatory", *args], env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10,100,1000")
    p.add_argument("--work", default=None)
    a = p.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="history-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    src = template(work)
    from observatory.report.trends import find_alerts, load_points
    from observatory.store.session_store import Store

    print(f"{'sessions':>8} {'db MB':>7} {'history s':>9} {'--json s':>8} {'first run s':>11} {'report s':>8} "
          f"{'points ms':>9} {'alerts ms':>9}")
    for n in (int(x) for x in a.sizes.split(",")):
        db = work / f"s{n}.db"
        replicate(src, db, n)
        hist = cli("history", "--db", str(db), "--limit", str(n))
        hist_json = cli("history", "--db", str(db), "--limit", str(n), "--json")
        report = cli("report", str(n), "--db", str(db), "--out", str(work / f"r{n}"))
        t0 = time.perf_counter()
        points = load_points(Store(str(db), create=False), limit=n)
        t1 = time.perf_counter()
        find_alerts(points)
        points_ms, alerts_ms = (t1 - t0) * 1000, (time.perf_counter() - t1) * 1000
        old = work / f"old{n}.db"
        replicate(src, old, n, summaries=False)
        first = cli("history", "--db", str(old), "--limit", str(n), "--json")
        mb = db.stat().st_size / 1e6
        print(f"{n:>8} {mb:>7.1f} {hist:>9.2f} {hist_json:>8.2f} {first:>11.2f} {report:>8.2f} {points_ms:>9.1f} {alerts_ms:>9.1f}")
        old.unlink()


if __name__ == "__main__":
    main()
