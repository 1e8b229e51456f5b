"""Top logprobs stored compactly: packed arrays inside the JSON column, lists for every reader.

A result's top logprobs are, per generated position, ``[[token_id, logprob],
...]``: stored as JSON that was about 280 bytes a position (top-10), 80% of a
session's database. `PackedLogprobs` stores them as one JSON object of
base64 strings (token ids, logprobs, and the pair count of each position, or
``=KxN`` when all N positions have K) and hands every reader the same
``[[token_id, logprob], ...]`` lists back.

Nothing is lost: ids take the smallest unsigned width that holds them, and
logprobs are packed as float32 only when every value survives the round trip
exactly (vLLM computes them in float32), else as float64. Each array is
byte-shuffled (format 2: all first bytes, then all second bytes, ...), so
the near-constant high bytes of ids and the exponents of logprobs form runs
the SQLite column's zlib (`observatory.store.compressed`) finds: 11-27% fewer
bytes than format 1, which still reads. Rows written before packing (plain
JSON lists) read unchanged. The column stays JSON, so no
migration is needed and PostgreSQL keeps its JSON type.
"""

from __future__ import annotations

import base64
from array import array
from typing import Any

from observatory.store.compressed import CompressedJSON

# Top logprobs: 1 = arrays as they are in memory; 2 = the same arrays byte-shuffled (written now).
FORMAT = 2
CHUNKS_FORMAT = 1


def _b64(a: array, shuffle: bool = False) -> str:  # type: ignore[type-arg]
    data = a.tobytes()
    if shuffle and a.itemsize > 1:  # all first bytes, then all second bytes, ...: zlib finds the runs
        data = b"".join(data[j::a.itemsize] for j in range(a.itemsize))
    return base64.b64encode(data).decode("ascii")


def _unb64(code: str, s: str, shuffle: bool = False) -> array:  # type: ignore[type-arg]
    a = array(code)
    data = base64.b64decode(s)
    if shuffle and a.itemsize > 1:
        w, n = a.itemsize, len(data) // a.itemsize
        out = bytearray(len(data))
        for j in range(w):
            out[j::w] = data[j * n:(j + 1) * n]
        data = bytes(out)
    a.frombytes(data)
    return a


def pack(rows: list[Any]) -> dict[str, Any] | list[Any]:
    """[[[id, logprob], ...], ...] -> the packed object (ROWS unchanged if they are not id/logprob pairs)."""
    counts: list[int] = []
    ids: list[int] = []
    lps: list[float] = []
    try:
        for pos in rows:
            counts.append(len(pos))
            for t, lp in pos:
                ids.append(t)
                lps.append(lp)
        id_code = "H" if not ids or max(ids) < 1 << 16 else "I" if max(ids) < 1 << 32 else "Q"
        packed_ids = array(id_code, ids)
        count_code = "H" if not counts or max(counts) < 1 << 16 else "I"
        packed_counts = array(count_code, counts)
        f32 = array("f", lps)
        lp_code = "f" if f32.tolist() == lps else "d"
        packed_lps = f32 if lp_code == "f" else array("d", lps)
    except (TypeError, ValueError, OverflowError):
        return rows  # not [id, logprob] pairs of numbers: stored as given
    if any(isinstance(t, bool) or not isinstance(t, int) for t in ids) or min(ids, default=0) < 0:
        return rows
    uniform = len(set(counts)) == 1
    return {"packed": FORMAT,
            "counts": f"={counts[0]}x{len(counts)}" if uniform else count_code + _b64(packed_counts, True),
            "ids": id_code + _b64(packed_ids, True),
            "logprobs": lp_code + _b64(packed_lps, True)}


def unpack(value: Any) -> Any:
    """The packed object -> [[[id, logprob], ...], ...]; anything else (old rows) as it is."""
    if not isinstance(value, dict) or value.get("packed") not in (1, FORMAT):
        return value
    shuffled = value["packed"] == 2
    c = value["counts"]
    if c.startswith("="):  # every position has the same number of pairs: "=KxN"
        k, n = c[1:].split("x")
        counts: Any = [int(k)] * int(n)
    else:
        counts = _unb64(c[0], c[1:], shuffled)
    ids = _unb64(value["ids"][0], value["ids"][1:], shuffled).tolist()
    lps = _unb64(value["logprobs"][0], value["logprobs"][1:], shuffled).tolist()
    pairs = list(map(list, zip(ids, lps)))
    if c.startswith("="):
        k = counts[0] if counts else 0
        return [pairs[i:i + k] for i in range(0, k * len(counts), k)] if k else [[] for _ in counts]
    out: list[list[list[Any]]] = []
    i = 0
    for n in counts:
        out.append(pairs[i:i + n])
        i += n
    return out


class PackedLogprobs(CompressedJSON):
    """A JSON column whose top-logprob lists are stored packed (see the module docstring), compressed on SQLite."""

    cache_ok = True

    def encode(self, value: Any) -> Any:
        """Pack on the way in."""
        return pack(value) if isinstance(value, list) and value else value

    def decode(self, value: Any) -> Any:
        """Unpack on the way out."""
        return unpack(value)


def pack_chunks(rows: list[Any]) -> dict[str, Any] | list[Any]:
    """[[ms, tokens or None], ...] -> {"chunks": CHUNKS_FORMAT, "ms": ..., "n": ...} (ROWS unchanged if not that shape).

    ms are float64 (or float32 when every value survives the round trip);
    the token counts are int16 with -1 for "not known", or ``=K`` / ``=None``
    when every chunk has the same count. Nothing is lost.
    """
    try:
        ms = [float(r[0]) for r in rows]
        ns = [r[1] for r in rows]
        if any(len(r) != 2 or isinstance(r[0], bool) or not isinstance(r[0], (int, float)) for r in rows):
            return rows
    except (TypeError, ValueError, IndexError):
        return rows
    if any(n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < 1 << 15) for n in ns):
        return rows
    if any(isinstance(r[0], int) for r in rows):
        return rows  # ints would read back as floats: keep them as given
    f32 = array("f", ms)
    ms_code = "f" if f32.tolist() == ms else "d"
    packed_ms = f32 if ms_code == "f" else array("d", ms)
    if len(set(ns)) == 1:
        n_field = f"={ns[0]}"
    else:
        n_field = "h" + _b64(array("h", [-1 if n is None else n for n in ns]))
    return {"chunks": CHUNKS_FORMAT, "ms": ms_code + _b64(packed_ms), "n": n_field}


def unpack_chunks(value: Any) -> Any:
    """The packed object -> [[ms, tokens or None], ...]; anything else (old rows) as it is."""
    if not isinstance(value, dict) or value.get("chunks") != CHUNKS_FORMAT:
        return value
    ms = _unb64(value["ms"][0], value["ms"][1:]).tolist()
    n = value["n"]
    if n.startswith("="):
        same = None if n[1:] == "None" else int(n[1:])
        return [[m, same] for m in ms]
    ns = _unb64(n[0], n[1:]).tolist()
    return [[m, None if k < 0 else k] for m, k in zip(ms, ns)]


class PackedChunks(CompressedJSON):
    """A JSON column whose chunk timelines are stored packed (`pack_chunks`), compressed on SQLite."""

    cache_ok = True

    def encode(self, value: Any) -> Any:
        """Pack on the way in."""
        return pack_chunks(value) if isinstance(value, list) and value else value

    def decode(self, value: Any) -> Any:
        """Unpack on the way out."""
        return unpack_chunks(value)
