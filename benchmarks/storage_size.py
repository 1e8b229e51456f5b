#!/usr/bin/env python
"""Bytes stored per default 4-arm session, before and after packing (target: under 0.5 MB).

Takes the real H200 session of ``examples/h200/h200-tiny.db`` (4 arms
base,base,mtp1,mtp2, the default suite, timed at concurrency 1 and 4) and
stores it again as this version would have: top logprobs packed
(`observatory.packed`), the timed results as `EngineClient.run_timed`
returns them (no token ids, no logprobs, chunks ``[ms, None]``), every JSON
column rewritten as the store writes it now (`observatory.db.compact_json`),
and judged again with the current gates (the verdicts and figures a session
gets today). Prints the file size after VACUUM, as run and as a default
compare (concurrency 1: the concurrency-4 timed rows and their verdicts
dropped), the bytes per results column, and what a session adds to a
database that holds others (the file of 10 copies of the default compare
minus the file of one, over 9: the database's own pages, one per empty table
and index, counted once).

    python benchmarks/storage_size.py [--work DIR]
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "examples" / "h200" / "h200-tiny.db"
COLUMNS = ("top_logprobs", "token_ids", "token_texts", "chunks", "text", "usage", "tool_calls")


def _compact(path: Path) -> int:
    c = sqlite3.connect(path)
    c.execute("PRAGMA journal_mode=DELETE")
    c.execute("VACUUM")
    c.close()
    return path.stat().st_size


def _columns(path: Path) -> dict[str, int]:
    c = sqlite3.connect(path)
    out = {col: int(c.execute(f"SELECT coalesce(sum(length({col})), 0) FROM results").fetchone()[0])
           for col in COLUMNS}
    c.close()
    return out


def restore(path: Path) -> None:
    """Rewrite PATH's results as this version stores them, every JSON column as it writes it now."""
    from sqlalchemy import JSON
    from sqlalchemy.orm.attributes import flag_modified

    from observatory.db import Base, ResultRow
    from observatory.measure import REFERENCE_MODES
    from observatory.store import Store

    store = Store(str(path))
    with store.tx() as tx:
        complete = {(r.arm_id, r.probe_id) for r in tx.query(ResultRow).filter_by(mode="stream").all()
                    if r.ok and r.token_ids and r.top_logprobs
                    and (r.usage or {}).get("completion_tokens") in (None, len(r.token_ids))}
        for r in tx.query(ResultRow).all():
            if r.mode == "timed":
                r.token_ids, r.top_logprobs, r.token_texts = [], [], []
                r.chunks = [[ms, None] for ms, _ in r.chunks or []]
            elif r.mode not in REFERENCE_MODES:  # warm-up and batch: compared only, never a reference
                r.top_logprobs = []
            elif r.mode == "nonstream" and (r.arm_id, r.probe_id) in complete:  # the stream is the reference
                r.top_logprobs = []
        for mapper in Base.registry.mappers:
            json_cols = [c.key for c in mapper.columns if isinstance(c.type, JSON) or
                         isinstance(getattr(c.type, "impl_instance", None), JSON)]
            if json_cols:
                for row in tx.query(mapper.class_).all():
                    for col in json_cols:
                        flag_modified(row, col)
    store.close()


def rejudge(path: Path) -> None:
    """Judge PATH's session again with the current gates (its verdicts and figures as stored today)."""
    from observatory.evaluate import evaluate
    from observatory.store import Store

    store = Store(str(path))
    evaluate(store, 1)
    store.close()


def per_session(one: Path, work: Path, n: int = 10) -> float:
    """Bytes one more session adds: (file of N copies of ONE's session - file of one) / (N - 1)."""
    from history_scale import replicate

    many = work / f"x{n}.db"
    replicate(one, many, n)
    return (_compact(many) - _compact(one)) / (n - 1)


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default=None)
    a = p.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="storage-size-"))
    work.mkdir(parents=True, exist_ok=True)
    before, after, default = work / "before.db", work / "after.db", work / "default.db"
    shutil.copy(SOURCE, before)
    shutil.copy(SOURCE, after)
    restore(after)
    rejudge(after)
    _compact(after)
    shutil.copy(after, default)
    c = sqlite3.connect(default)
    c.execute("DELETE FROM verdicts WHERE result_id IN "
              "(SELECT id FROM results WHERE mode = 'timed' AND concurrency > 1)")
    c.execute("DELETE FROM results WHERE mode = 'timed' AND concurrency > 1")
    c.execute("DELETE FROM measurements WHERE concurrency > 1")
    c.commit()
    c.close()
    rejudge(default)
    sizes = (_compact(before), _compact(after))
    cols = (_columns(before), _columns(after))
    print(f"file, as run (concurrency 1,4): {sizes[0] / 1e6:.2f} MB before, {sizes[1] / 1e6:.2f} MB now")
    print(f"file, a default compare (concurrency 1): {_compact(default) / 1e6:.2f} MB now")
    print(f"  each further such session in the same database: {per_session(default, work) / 1e6:.2f} MB")
    for col in COLUMNS:
        print(f"  results.{col:13s} {cols[0][col] / 1e3:8.1f} kB -> {cols[1][col] / 1e3:8.1f} kB")


if __name__ == "__main__":
    main()
