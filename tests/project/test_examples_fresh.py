"""The committed examples are today's judge's (issue 50 item 6): re-judged, nothing a reader sees changes.

For each example database, its latest session's ``show --json`` before and
after a re-judge with this checkout (`observatory judge`) must be the same
bytes; for each committed report, its index page must be what today's
renderer makes of its database. When the judge or the report changes, run
``bash scripts/regen-examples.sh`` and commit what it rewrites. The control:
a stored verdict changed by hand is found stale. About 30 s on 2 cores.
"""

from __future__ import annotations

import gzip
import io
import re
import sqlite3
import tarfile
from pathlib import Path

import pytest

from observatory.commands.evaluate import evaluate
from observatory.report.data import build
from observatory.report.html import context, environment
from observatory.report.jsonout import to_json
from observatory.store.session_store import Store
from tests.support.paths import REPO

DATABASES = sorted((REPO / "examples").glob("*/*.db.gz"))
REGEN = "stale against today's judge: run `bash scripts/regen-examples.sh` and commit what it rewrites"


def _script_reports() -> list[tuple[str, str, str, int]]:
    """The (folder, report, database, session) rows of scripts/regen-examples.sh: the one list of them."""
    text = (REPO / "scripts" / "regen-examples.sh").read_text()
    rows = re.findall(r'^  "(\S+) (\S+) (\S+) (\d+)"$', text, re.M)
    return [(f, r, d, int(s)) for f, r, d, s in rows]


def _unpack(gz: Path, dest: Path) -> Path:
    dest.write_bytes(gzip.decompress(gz.read_bytes()))
    return dest


def _stale(db: Path) -> bool:
    store = Store(str(db), write=True)
    with store:
        sid = store.sessions(1)[0].id
        before = to_json(build(store, sid))
        evaluate(store, sid)
        return to_json(build(store, sid)) != before


@pytest.mark.parametrize("gz", DATABASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_each_example_database_is_todays(gz: Path, tmp_path: Path) -> None:
    assert not _stale(_unpack(gz, tmp_path / "x.db")), f"{gz.relative_to(REPO)}: {REGEN}"


def test_a_verdict_changed_by_hand_is_stale(tmp_path: Path) -> None:
    """The negative control: one stored gate verdict flipped, as an older judge would have left it."""
    db = _unpack(REPO / "examples" / "h200" / "h200-tiny.db.gz", tmp_path / "x.db")
    with sqlite3.connect(db) as c:
        (vid,) = c.execute("SELECT id FROM verdicts WHERE verdict = 'PASS' ORDER BY id LIMIT 1").fetchone()
        c.execute("UPDATE verdicts SET verdict = 'FAIL', reason = 'an older judge' WHERE id = ?", (vid,))
    assert _stale(db)


def _index(folder: str, report: str) -> str:
    path = REPO / "examples" / folder / report
    if report.endswith(".tgz"):
        with tarfile.open(fileobj=io.BytesIO(path.read_bytes())) as tar:
            member = tar.extractfile("report/index.html")
            assert member is not None
            return member.read().decode("utf-8")
    return (path / "index.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("row", _script_reports(), ids=lambda r: f"{r[0]}/{r[1]}")
def test_each_example_report_is_todays(row: tuple[str, str, str, int], tmp_path: Path) -> None:
    folder, report, dbname, sid = row
    data = build(Store(str(_unpack(REPO / "examples" / folder / f"{dbname}.gz", tmp_path / "x.db")), create=False), sid)
    page = environment().get_template("report.html").render(**context(data), root="")
    assert page == _index(folder, report), f"examples/{folder}/{report}: {REGEN}"


def test_the_script_lists_every_committed_report() -> None:
    listed = {f"{f}/{r}" for f, r, _, _ in _script_reports()}
    committed = {f"{p.parent.parent.name}/{p.parent.name}" for p in (REPO / "examples").glob("*/report-*/index.html")}
    committed |= {f"{p.parent.name}/{p.name}" for p in (REPO / "examples").glob("*/*-report.tgz")}
    assert listed == committed
