"""Storage on SQLite and on a real PostgreSQL server, with the same results (issue 7 point 4).

Both backends get the same stored session (hostile output included), judged
by the real gates and read back through `report_data.build`; two observatory
processes writing into one database at once lose nothing.
"""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select

from observatory.commands.evaluate import evaluate
from observatory.model.probes import load_probe_file, resolve_suite
from observatory.model.read_model import SessionView, to_plain
from observatory.report.data import build
from observatory.store.db import ArmRow, Base, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store, storable


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    url: str = request.getfixturevalue("pg_url")
    return url


def write_session(store: Store, tag: str = "") -> int:
    """A session of two arms over the default probes, as a run would store it."""
    probes = load_probe_file(resolve_suite("default"))
    s = store.add(SessionRow(host=f"h{tag}", machine={"cpus": 2}, command=["observatory"], options={}, suite="default"))
    rows = [store.add(ProbeRow(session_id=s.id, position=i, name=p.name, category=p.category,
                               content_hash=p.content_hash, definition=p.to_dict(), params={}))
            for i, p in enumerate(probes)]
    for pos, (name, spec) in enumerate([("base", None), ("mtp1", {"method": "mtp", "num_speculative_tokens": 1})]):
        arm = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok",
                               launch={"speculative_config": spec, "argv": ["python", "--model", "m"], "env": {}}))
        for p, row in zip(probes, rows):
            text = (p.expect.get("exact") or "healthy varied output about rivers, cities and weather") + tag
            if name == "mtp1" and p.category == "prose_en":
                text = "hostile <script>alert(1)</script> \ud800 \x00 " + "ab" * 40
            clean = storable(text)
            ids = [ord(c) % 1000 for c in clean[:20]]
            store.add(ResultRow(arm_id=arm.id, probe_id=row.id, mode="stream", text=clean, content=clean,
                                text_raw=[ord(c) for c in text] if clean != text else None,
                                token_ids=ids, token_texts=list(clean[:20]),
                                top_logprobs=[[[t, -0.1], [t + 1, -2.5]] for t in ids], finish_reason="stop",
                                ttft_ms=10.0, duration_ms=50.0, chunks=[[10.0, 1], [50.0, len(ids) - 1]],
                                counters_delta={"drafts": 5, "draft_tokens": 5, "accepted": 3,
                                                "accepted_per_pos": [3]} if spec else {}))
    evaluate(store, s.id)
    store.finish_session(s.id, "complete")
    return int(s.id)


def _normalised(view: SessionView) -> dict[str, Any]:
    """What must match across backends (ids, times and versions aside)."""
    data = to_plain(view)
    return {
        "arms": [{"name": a["name"], "validity": a["validity"], "acceptance": a["acceptance"],
                  "results": [{k: r[k] for k in ("probe", "text", "token_ids", "top_logprobs", "verdict")}
                              | {"verdicts": {g: v["verdict"] for g, v in r["verdicts"].items()}}
                              for r in a["results"]]}
                 for a in data["arms"]],
        "probes": [(p["name"], p["hash"]) for p in data["probes"]],
    }


def test_schema_and_round_trip(db_url: str) -> None:
    with Store(db_url) as store:
        _check_round_trip(store)


def _check_round_trip(store: Store) -> None:
    insp = inspect(store.engine)
    for table in Base.metadata.sorted_tables:
        assert {c["name"] for c in insp.get_columns(table.name)} == {c.name for c in table.columns}
    sid = write_session(store)
    data = build(store, sid)
    assert [a.name for a in data.arms] == ["base", "mtp1"]
    hostile = next(r for r in data.arms[1].results if r.category == "prose_en")
    assert hostile.verdicts["token_diff"].verdict == "FAIL"
    (raw,) = [r.text_raw for r in store.results(store.arms(sid)[1].id) if r.text_raw]
    assert "".join(map(chr, raw)).startswith("hostile <script>alert(1)</script> \ud800 \x00")


def test_sqlite_and_postgresql_store_the_same(tmp_path: Path, pg_url: str) -> None:
    with Store(str(tmp_path / "a.db")) as a_store, Store(pg_url) as b_store:
        a = build(a_store, write_session(a_store))
        b = build(b_store, write_session(b_store))
    assert _normalised(a) == _normalised(b)


def _writer(url: str, tag: str, n: int) -> None:
    with Store(url) as store:
        for i in range(n):
            write_session(store, f"{tag}{i}")


def test_two_runs_writing_at_once_lose_nothing(db_url: str) -> None:
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(db_url, t, 3)) for t in ("x", "y")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    with Store(db_url) as store:
        _check_nothing_lost(store)


def _check_nothing_lost(store: Store) -> None:
    with store.tx() as s:
        hosts = sorted(s.scalars(select(SessionRow.host)))
        assert [h for h in hosts if h[1:2] in ("x", "y")] == [f"h{t}{i}" for t in "xy" for i in range(3)]
        n_results = s.scalar(select(func.count()).select_from(ResultRow))
        n_probes = len(load_probe_file(resolve_suite("default")))
        n_sessions = s.scalar(select(func.count()).select_from(SessionRow))
        assert n_results == n_sessions * 2 * n_probes
    for sess in store.sessions():
        assert build(store, sess.id).session.status == "complete"


def test_hostile_values_store_alike_on_both_backends(tmp_path: Path, pg_url: str) -> None:
    """Issue 19 item 2: PostgreSQL aborted on a NaN logprob, a /version over 64 characters and a
    finish_reason over 32 that SQLite accepted; one session's data must not depend on the backend."""
    long_version = "v" * 100
    long_finish = "stop_because_the_server_felt_like_it_" * 3
    stored = []
    for url in (str(tmp_path / "h.db"), pg_url):
        with Store(url) as store:
            s = store.add(SessionRow(host="h", machine={"x": float("nan")}, command=[], options={}, suite="s"))
            probe = store.add(ProbeRow(session_id=s.id, position=0, name="p", category="c", content_hash="h",
                                       definition={}, params={}))
            arm = store.add(ArmRow(session_id=s.id, position=0, name="base", status="ok", launch={}))
            store.update(ArmRow, arm.id, engine_version=long_version)
            r = store.add(ResultRow(arm_id=arm.id, probe_id=probe.id, text="t", token_ids=[1, 2],
                                    top_logprobs=[[[1, float("nan")], [3, -1.0]], [[2, float("-inf")]]],
                                    finish_reason=long_finish, ttft_ms=float("inf"), duration_ms=5.0,
                                    usage={"completion_tokens": float("nan")}))
            (row,) = store.results(arm.id)
            (arm_row,) = store.arms(s.id)
            stored.append((row.top_logprobs, row.finish_reason, row.ttft_ms, row.usage, arm_row.engine_version,
                           store.session(s.id).machine))
            assert r.id is not None
    assert stored[0] == stored[1]
    top, finish, ttft, usage, version, machine = stored[0]
    assert top == [[[3, -1.0]], []]  # unusable logprobs dropped, never NaN
    assert ttft is None and usage == {"completion_tokens": None} and machine == {"x": None}
    assert len(finish) == 32 and finish.endswith("[truncated]") and finish.startswith("stop_because")
    assert len(version) == 64 and version.endswith("[truncated]")
