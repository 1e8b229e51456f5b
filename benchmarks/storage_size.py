#!/usr/bin/env python
"""Bytes stored per default 4-arm session, as the store leaves the file (target: under 0.5 MB).

Two sessions, each measured as the file is left (no VACUUM: what a user and a
checker see), with its free pages and any -wal/-shm/-journal file beside it,
and after VACUUM:

- the real H200 session of ``examples/h200/h200-tiny.db.gz`` (4 arms
  base,base,mtp1,mtp2, the default suite), written again through the store
  into a new database as a default compare (concurrency 1) would store it
  today (`default_compare`: timed results as `EngineClient.run_timed`
  returns them, top logprobs only where a diff may use them) and judged with
  the current gates. Also the old file as run (concurrency 1 and 4) before
  and after rewriting its rows as the store writes them now, and the bytes
  per results column;
- `observatory compare --arms base=URL,base=URL,mtp1=URL,mtp2=URL` run as a
  fresh process against ``benchmarks/pacing_stub.py`` (every probe answered
  with max_tokens tokens and top-k logprobs), once and then N-1 more times
  into the same database: the first file, and what each further session adds;
  then the same with ``--random-top`` (random ids of a 151,936-token
  vocabulary, random float32 logprobs: the least compressible top-k).

What a session adds to a database that holds others: (file of N copies of
the H200 compare - file of one) / (N - 1), the database's own pages (one per
empty table and index) counted once.

    python benchmarks/storage_size.py [--work DIR] [--cli-sessions N]
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
COLUMNS = ("top_logprobs", "token_ids", "token_texts", "chunks", "text", "usage", "tool_calls")


def as_left(path: Path) -> str:
    """PATH as the store left it: size, free pages, page size, and any file SQLite keeps beside it."""
    side = [f"{suffix} {os.path.getsize(str(path) + suffix)} B" for suffix in ("-wal", "-shm", "-journal")
            if os.path.exists(str(path) + suffix)]
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    free, page = (c.execute(f"PRAGMA {p}").fetchone()[0] for p in ("freelist_count", "page_size"))
    c.close()
    return (f"{path.stat().st_size / 1e6:.3f} MB as left ({free} free pages of {page} B; "
            f"beside it: {', '.join(side) or 'nothing'})")


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
    """Rewrite PATH's results as this version stores them, every JSON and compressed column as it writes it now."""
    from sqlalchemy import JSON
    from sqlalchemy.orm.attributes import flag_modified

    from observatory.session.measure import REFERENCE_MODES
    from observatory.store.compressed import CompressedText
    from observatory.store.db import Base, ResultRow
    from observatory.store.session_store import Store

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
            json_cols = [c.key for c in mapper.columns if isinstance(c.type, (JSON, CompressedText)) or
                         isinstance(getattr(c.type, "impl_instance", None), JSON)]
            if json_cols:
                for row in tx.query(mapper.class_).all():
                    for col in json_cols:
                        flag_modified(row, col)
    store.close()


def default_compare(dst: Path) -> int:
    """Write into DST, through the store, the H200 session as a default compare stores it today; its id.

    Concurrency 1 only; timed results without token ids and logprobs, chunks
    without token counts (`EngineClient.run_timed`); top logprobs only on the
    results a diff may use as its reference; judged with the current gates.
    """
    from observatory.commands.evaluate import evaluate
    from observatory.session.measure import REFERENCE_MODES
    from observatory.store.session_store import Store

    src_path = dst.parent / (dst.name + ".src")
    _unpack(src_path)  # opening migrates: never touch the example itself
    src, out = Store(str(src_path)), Store(str(dst))

    def copy(row: object, **values: object) -> object:
        cols = {c.key: getattr(row, c.key) for c in type(row).__table__.columns if c.key != "id"}  # type: ignore[attr-defined]
        return out.add(type(row)(**(cols | values)))

    (session,) = src.sessions()
    sid: int = copy(session).id  # type: ignore[attr-defined]
    probes = {p.id: copy(p, session_id=sid).id for p in src.probes(session.id)}  # type: ignore[attr-defined]
    for arm in src.arms(session.id):
        arm_id = copy(arm, session_id=sid).id  # type: ignore[attr-defined]
        rows = [r for r in src.results(arm.id) if r.concurrency == 1 or r.mode not in ("timed",)]
        complete = {r.probe_id for r in rows if r.mode == "stream" and r.ok and r.token_ids and r.top_logprobs
                    and (r.usage or {}).get("completion_tokens") in (None, len(r.token_ids))}
        for r in rows:
            values: dict[str, object] = {"arm_id": arm_id, "probe_id": probes[r.probe_id]}
            if r.mode == "timed":
                values |= {"token_ids": [], "top_logprobs": [], "token_texts": [],
                           "chunks": [[ms, None] for ms, _ in r.chunks or []]}
            elif r.mode not in REFERENCE_MODES or (r.mode == "nonstream" and r.probe_id in complete):
                values["top_logprobs"] = []
            copy(r, **values)
        for m in src.measurements(arm.id):
            if m.concurrency == 1:
                copy(m, arm_id=arm_id)
    src.close()
    src_path.unlink()
    evaluate(out, sid)
    out.close()
    return sid


def cli_sessions(work: Path, n: int, random_top: bool = False) -> list[int]:
    """File sizes after each of N `observatory compare` runs (4 URL arms on the pacing stub) into one database."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stub = subprocess.Popen([sys.executable, str(REPO / "benchmarks" / "pacing_stub.py"), "--rate", "5000",
                             *(["--random-top"] if random_top else [])], stdout=subprocess.PIPE, text=True, env=env)
    name = "cli-random" if random_top else "cli"
    try:
        assert stub.stdout is not None
        url = stub.stdout.readline().strip()
        db = work / f"{name}.db"
        arms = ",".join(f"{a}={url}" for a in ("base", "base", "mtp1", "mtp2"))
        sizes = []
        for i in range(n):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "observatory", "compare", "--arms", arms, "--db", str(db),
                            "--quiet"], env=env, check=True, stdout=subprocess.DEVNULL)
            sizes.append(db.stat().st_size)
            if i == 0:
                what = "random top-k" if random_top else "top-k as it sends it"
                print(f"a CLI compare on the pacing stub, {what} ({time.perf_counter() - t0:.1f} s): {as_left(db)}")
                shutil.copy(db, work / f"{name}-one.db")
                print(f"  the same after VACUUM: {_compact(work / f'{name}-one.db') / 1e6:.3f} MB")
        return sizes
    finally:
        stub.terminate()
        stub.wait()


def rejudge(path: Path) -> None:
    """Judge PATH's session again with the current gates (its verdicts and figures as stored today)."""
    from observatory.commands.evaluate import evaluate
    from observatory.store.session_store import Store

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
    p.add_argument("--cli-sessions", type=int, default=5, help="CLI compares into one database (0: none)")
    a = p.parse_args(argv)
    work = Path(a.work or tempfile.mkdtemp(prefix="storage-size-"))
    work.mkdir(parents=True, exist_ok=True)
    before, after, default = work / "before.db", work / "after.db", work / "default.db"
    _unpack(before)
    _unpack(after)
    restore(after)
    rejudge(after)
    default_compare(default)
    print(f"the H200 session as a default compare (concurrency 1), written through the store: {as_left(default)}")
    shutil.copy(default, work / "default-vacuumed.db")
    print(f"  the same after VACUUM: {_compact(work / 'default-vacuumed.db') / 1e6:.3f} MB")
    print(f"  each further such session in the same database: {per_session(default, work) / 1e6:.3f} MB")
    sizes = (_compact(before), _compact(after))
    cols = (_columns(before), _columns(after))
    print(f"file, as run (concurrency 1,4), after VACUUM: {sizes[0] / 1e6:.2f} MB before, {sizes[1] / 1e6:.2f} MB now")
    for col in COLUMNS:
        print(f"  results.{col:13s} {cols[0][col] / 1e3:8.1f} kB -> {cols[1][col] / 1e3:8.1f} kB")
    for random_top in (False, True) if a.cli_sessions else ():
        grown = cli_sessions(work, a.cli_sessions, random_top)
        if len(grown) > 1:
            print(f"  each further CLI compare in the same database: {(grown[-1] - grown[0]) / (len(grown) - 1) / 1e6:.3f} MB"
                  f" (file after {len(grown)}: {grown[-1] / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
