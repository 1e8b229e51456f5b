"""A default session's database under 0.5 MB, and nothing lost on the way (issue 20 item 5).

The session is the real H200 one of examples/h200/h200-tiny.db.gz (4 arms
base,base,mtp1,mtp2, the default suite), written again through the real
store as a default compare stores it (`benchmarks/storage_size.py`
`default_compare`) and judged with the current gates.
"""

from __future__ import annotations

import importlib.util
import json
import random
import sqlite3
import sys
import zlib
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from sqlalchemy import text

from observatory.cli import cli
from observatory.store.compressed import MIN_BYTES, squeeze, unsqueeze
from observatory.store.db import PAGE_SIZE, ArmRow, ProbeRow, ResultRow, SessionRow, VerdictRow
from observatory.store.session_store import Store
from tests.support.paths import REPO, example_db
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer


def _storage_size() -> Any:
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("storage_size", REPO / "benchmarks" / "storage_size.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _show(db: Path) -> str:
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_a_default_session_is_stored_in_under_half_a_megabyte(tmp_path: Path) -> None:
    """Issue 20 item 5: a default 4-arm session must stay under 0.5 MB, as the store leaves the file.

    The bound is the issue's target, not a measured figure: the store left
    0.541 MB before (4 kB pages, columns uncompressed) and 0.371 MB now
    (2026-12-01). The 129 kB margin (26%) is room for sessions less
    compressible than this one: a CLI compare on the pacing stub answering
    with random ids of a 151,936-token vocabulary and random float32
    logprobs (the least compressible top-k) took 0.412 MB. The file is
    measured as left, no VACUUM, and nothing may stay beside it (a -wal
    file would be part of what a user keeps).
    """
    db = tmp_path / "default.db"
    _storage_size().default_compare(db)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("default.db-")]
    assert db.stat().st_size < 500_000


def _plain(db: Path) -> int:
    """Rewrite every compressed value in DB as the plain JSON or text the store wrote before; how many."""
    c = sqlite3.connect(db)
    n = 0
    for table, cols in {"results": ("token_ids", "token_texts", "top_logprobs", "chunks"),
                        "verdicts": ("details",), "arms": ("figures", "log_tail")}.items():
        for col in cols:
            for rowid, value in c.execute(f"SELECT id, {col} FROM {table} WHERE typeof({col}) = 'blob'").fetchall():
                c.execute(f"UPDATE {table} SET {col} = ? WHERE id = ?", (zlib.decompress(value).decode(), rowid))
                n += 1
    c.commit()
    c.close()
    return n


def test_a_session_reads_back_the_same_compressed_or_as_stored_before(tmp_path: Path) -> None:
    """Issue 20 item 5: compression loses nothing `show --json` prints (ids, texts, top logprobs, chunks,
    verdicts and their details, figures, log tails), and rows written before it read the same."""
    db = tmp_path / "default.db"
    _storage_size().default_compare(db)
    compressed = _show(db)
    assert _plain(db) > 300  # most large values were stored compressed
    assert _show(db) == compressed
    data = json.loads(compressed)
    results = [r for a in data["arms"] for r in a["results"]]
    assert sum(len(r["top_logprobs"] or []) for r in results) > 1000


def test_every_compressed_column_round_trips_exactly(tmp_path: Path) -> None:
    """Issue 20 item 5: each compressed column reads back the value written, big (stored as a zlib
    BLOB) or small (stored as JSON text), Chinese text and float32/float64 logprobs included."""
    rnd = random.Random(3)
    ids = [rnd.randrange(150000) for _ in range(300)]
    top = [[[t, -rnd.random() * 20], [t + 1, -1 / 3]] for t in ids]
    texts = ["月亮", " the", "\n", "<script>"] * 75
    chunks = [[12.345678901234 + i, 1 + i % 3] for i in range(300)]
    details = {"first_divergence": 17, "margin": 0.0123, "spec": ids[:50], "note": "月" * 100}
    figures = {"speed": {"tok_s": 41.5, "requests": 10}, "acceptance": None, "per_pos": [0.9, 0.7] * 50}
    log_tail = "INFO 12-01 GET /v1/models 200\n" * 40
    store = Store(str(tmp_path / "t.db"))
    s = store.add(SessionRow(host="h", command=[], options={}, machine={}, suite="d"))
    arm = store.add(ArmRow(session_id=s.id, position=0, name="base", figures=figures, log_tail=log_tail))
    p = store.add(ProbeRow(session_id=s.id, position=0, name="p", category="c", content_hash="x", definition={}))
    big = store.add(ResultRow(arm_id=arm.id, probe_id=p.id, token_ids=ids, token_texts=texts, top_logprobs=top,
                              chunks=chunks))
    store.add(ResultRow(arm_id=arm.id, probe_id=p.id, token_ids=[5], token_texts=["ok"],
                        top_logprobs=[[[5, -0.5]]], chunks=[[1.5, 1]]))
    store.add(VerdictRow(arm_id=arm.id, result_id=big.id, gate="token_diff", verdict="FAIL", details=details))
    store.close()
    store = Store(str(tmp_path / "t.db"))
    got_big, got_small = store.results(arm.id)
    assert (got_big.token_ids, got_big.token_texts, got_big.top_logprobs, got_big.chunks) == (ids, texts, top, chunks)
    assert (got_small.token_ids, got_small.top_logprobs, got_small.chunks) == ([5], [[[5, -0.5]]], [[1.5, 1]])
    assert store.verdicts(arm.id)[0].details == details
    (got_arm,) = store.arms(s.id)
    assert (got_arm.figures, got_arm.log_tail) == (figures, log_tail)
    with store.engine.connect() as c:
        kinds = c.execute(text("SELECT typeof(token_ids), typeof(top_logprobs) FROM results ORDER BY id")).all()
        tail = c.execute(text("SELECT typeof(log_tail) FROM arms")).scalar()
    assert [tuple(k) for k in kinds] == [("blob", "blob"), ("text", "text")] and tail == "blob"


def test_squeeze_keeps_text_it_cannot_shrink() -> None:
    """Short text and text that is not UTF-8 (a lone surrogate) are stored as given; the rest compressed."""
    assert squeeze("[1,2,3]") == "[1,2,3]"
    lone = "\ud800" * MIN_BYTES
    assert squeeze(lone) == lone and unsqueeze(lone) == lone
    long = "abc" * MIN_BYTES
    assert isinstance(squeeze(long), bytes) and unsqueeze(squeeze(long)) == long


def test_a_cli_compare_leaves_no_free_pages_and_nothing_beside_the_file(tmp_path: Path) -> None:
    """Issue 20 item 5: the file a compare leaves is the file measured: every page in use (verdicts are
    replaced after each wave; freed pages are reused), no -wal or -shm file left next to it."""
    probes = tmp_path / "p.toml"
    probes.write_text('[[probe]]\nname = "one"\ncategory = "prose_en"\n'
                      'messages = [{role = "user", content = "Say ok."}]\nmax_tokens = 4\n')
    db = tmp_path / "runs.db"
    with StubServer("ok") as a, StubServer("ok") as b:
        for _ in range(2):
            r = CliRunner().invoke(cli, ["compare", "--arms", f"base={a.url},mtp1={b.url}", "--suite", str(probes),
                                         "--db", str(db), "--quiet"], catch_exceptions=False)
            assert r.exit_code == verdict_exit(db), r.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("runs.db")) == ["runs.db"]
    c = sqlite3.connect(db)
    assert c.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert c.execute("SELECT count(*) FROM sessions").fetchone()[0] == 2
    c.close()


def test_a_new_database_gets_small_pages_and_an_old_one_keeps_its_own(tmp_path: Path) -> None:
    """Issue 20 item 5: new databases get 2 kB pages; a database written before (4 kB pages, plain
    JSON rows) keeps its page size, reads its old rows as before and stores new ones compressed."""
    with Store(str(tmp_path / "new.db")) as store, store.engine.connect() as c:
        assert c.execute(text("PRAGMA page_size")).scalar() == PAGE_SIZE == 2048
    old = tmp_path / "old.db"
    example_db("h200/h200-tiny.db", old)
    before = _show(old)
    top = [[[70000 + i, -0.5], [i, -1.25]] for i in range(400)]
    with Store(str(old)) as store:
        arm_id = store.arms(1)[0].id
        probe_id = store.probes(1)[0].id
        rid = store.add(ResultRow(arm_id=arm_id, probe_id=probe_id, mode="extra", token_ids=list(range(400)),
                                  top_logprobs=top)).id
        (row,) = [r for r in store.results(arm_id) if r.id == rid]
        assert (row.token_ids, row.top_logprobs) == (list(range(400)), top)
        with store.engine.connect() as c:
            assert c.execute(text("PRAGMA page_size")).scalar() == 4096
            assert c.execute(text("SELECT typeof(top_logprobs) FROM results WHERE id = :i"), {"i": rid}).scalar() == "blob"
    with sqlite3.connect(old) as c:
        c.execute("DELETE FROM results WHERE id = ?", (rid,))
    assert _show(old) == before


def test_bare_json_numbers_and_nulls_read_back(tmp_path: Path) -> None:
    """A JSON column declared JSON has NUMERIC affinity in SQLite: a bare number written as text comes
    back as a number, and must still read as that value; JSON null reads as None."""
    store = Store(str(tmp_path / "t.db"))
    s = store.add(SessionRow(host="h", command=[], options={}, machine={}, suite="d"))
    arm = store.add(ArmRow(session_id=s.id, position=0, name="base"))
    with store.engine.begin() as c:
        c.execute(text("UPDATE arms SET figures = '5' WHERE id = :i"), {"i": arm.id})
    assert store.arms(s.id)[0].figures == 5
    store.update(ArmRow, arm.id, figures=None)
    assert store.arms(s.id)[0].figures is None
