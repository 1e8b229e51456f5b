"""Top logprobs stored packed, read back as [[token_id, logprob], ...] (issue "A fast instrument")."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow, compact_json
from observatory.store.packed import pack, unpack
from observatory.store.session_store import Store


def _result(store: Store, top: Any) -> int:
    s = store.add(SessionRow(host="h", observatory_version="0", command=[], options={}, machine={}, suite="d"))
    a = store.add(ArmRow(session_id=s.id, position=0, name="base"))
    p = store.add(ProbeRow(session_id=s.id, position=0, name="p", category="c", content_hash="x", definition={}))
    return int(store.add(ResultRow(arm_id=a.id, probe_id=p.id, top_logprobs=top)).id)


def _vllm_like(n: int, k: int = 10, seed: int = 0) -> list[list[list[Any]]]:
    import struct

    rnd = random.Random(seed)
    f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]  # noqa: E731  vLLM's logprobs are float32
    return [[[rnd.randrange(150000), f32(-rnd.random() * 20)] for _ in range(k)] for _ in range(n)]


def test_packed_rows_read_back_exactly_and_take_less_than_half_the_space(tmp_path: Path) -> None:
    """3.2 MB per 4-arm session, 80% of it top logprobs as JSON: now packed, nothing lost."""
    store = Store(str(tmp_path / "t.db"))
    top = _vllm_like(200)
    rid = _result(store, top)
    assert store.results(1)[0].top_logprobs == top
    with store.engine.connect() as c:
        stored = c.execute(text("SELECT top_logprobs FROM results WHERE id = :i"), {"i": rid}).scalar()
    assert len(stored) * 2 < len(json.dumps(top))


def test_doubles_that_are_not_float32_are_kept_exactly() -> None:
    top = [[[1, -0.1], [2, -1 / 3]], [], [[70000, 0]]]
    packed = pack(top)
    assert isinstance(packed, dict) and packed["logprobs"][0] == "d"
    assert unpack(json.loads(json.dumps(packed))) == top


def test_rows_written_before_packing_still_read(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "t.db"))
    rid = _result(store, [])
    old = [[[5, -0.5], [6, -1.25]]]
    with store.engine.begin() as c:
        c.execute(text("UPDATE results SET top_logprobs = :v WHERE id = :i"), {"v": json.dumps(old), "i": rid})
    assert store.results(1)[0].top_logprobs == old


@pytest.mark.parametrize("odd", [[["a", 1.0]], [[[1, "x"]]], [[[-1, 0.5]]], [[[True, 0.5]]]],
                         ids=["not-pairs", "string-logprob", "negative-id", "bool-id"])
def test_values_that_are_not_id_logprob_pairs_are_stored_as_given(odd: Any) -> None:
    assert pack(odd) == odd and unpack(odd) == odd


def test_chunk_timelines_round_trip_exactly() -> None:
    """Issue 20 item 5: chunk timelines are stored packed and read back unchanged (None counts kept as None)."""
    from observatory.store.packed import pack_chunks, unpack_chunks

    cases = [
        [[12.345678901234, 1], [13.5, 3], [20.25, None]],
        [[0.1, None], [0.30000000000000004, None]],
        [[1.5, 2], [2.5, 2]],
    ]
    for rows in cases:
        packed = pack_chunks(rows)
        assert isinstance(packed, dict)
        assert unpack_chunks(packed) == rows
    odd = [[1, 2], [2.5, 3]]  # an int ms would read back as a float: stored as given
    assert pack_chunks(odd) == odd
    assert pack_chunks([[1.0, True]]) == [[1.0, True]]
    assert unpack_chunks([[1.0, 2]]) == [[1.0, 2]]  # rows written before packing read unchanged


def test_json_columns_are_stored_compact_and_read_back_the_same(tmp_path: Path) -> None:
    """Issue 20 item 5: JSON columns were written with ", " / ": " and \\uXXXX escapes (a Chinese
    character took 6 bytes, not 3); now compact UTF-8, the same values read back."""
    store = Store(str(tmp_path / "t.db"))
    rid = _result(store, [])
    store.update(ResultRow, rid, token_texts=["月亮", " the"], usage={"completion_tokens": 2, "prompt_tokens": 3})
    with store.engine.connect() as c:
        texts = c.execute(text("SELECT token_texts FROM results WHERE id = :i"), {"i": rid}).scalar()
        usage = c.execute(text("SELECT usage FROM results WHERE id = :i"), {"i": rid}).scalar()
    assert texts == '["月亮"," the"]' and usage == '{"completion_tokens":2,"prompt_tokens":3}'
    row = store.results(1)[0]
    assert row.token_texts == ["月亮", " the"] and row.usage == {"completion_tokens": 2, "prompt_tokens": 3}


def test_compact_json_keeps_escapes_for_text_that_cannot_be_utf8() -> None:
    value = {"t": ["月", "\ud800"]}  # a lone surrogate: SQLite could not store it as UTF-8
    assert compact_json(value) == '{"t":["\\u6708","\\ud800"]}' and json.loads(compact_json(value)) == value
    assert compact_json({"t": "月"}) == '{"t":"月"}'


def test_rows_packed_before_byte_shuffling_still_read() -> None:
    """Issue 20 item 5: format 1 (arrays as in memory) was written until 2026-12-01; format 2
    byte-shuffles them for zlib. Both read back the same lists."""
    import base64
    from array import array

    def b64(code: str, values: list[Any]) -> str:
        return code + base64.b64encode(array(code, values).tobytes()).decode()

    old = {"packed": 1, "counts": b64("H", [2, 1]), "ids": b64("I", [70000, 6, 7]), "logprobs": b64("f", [-0.5, -1.25, 0.0])}
    want = [[[70000, -0.5], [6, -1.25]], [[7, 0.0]]]
    assert unpack(old) == want
    new = pack(want)
    assert isinstance(new, dict) and new["packed"] == 2 and new["ids"] != old["ids"]
    assert unpack(json.loads(json.dumps(new))) == want
