"""The records of a request log or dataset file, read with bounds: JSON Lines, or one JSON array.

A record is one line of a JSONL file (named ``FILE:LINE``) or one element of
a JSON array (``FILE: record N``, as vLLM's ShareGPT file is). Each is read
on its own, so a bad one is one `Dropped` line and the rest still load:

- at most `Limits.record_bytes` bytes (an oversized record is skipped as it
  streams past, never held);
- UTF-8 text, JSON with no NaN or Infinity, no number beyond a float, no key
  twice in one object;
- nested at most `Limits.depth` levels (counted while scanning, before any
  parser recurses);
- at most `Limits.records` records and `Limits.total_bytes` bytes per file:
  past either the rest of the file is not read, and a note says so.

A JSON array is scanned in a stream (`_array_elements`): a regular
expression jumps from one structural character to the next, so a 600 MB
ShareGPT file is read in chunks, an element at a time. Only regular files
are read (a FIFO or a device is refused, as `observatory.model.safe_read`
does for suites).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from observatory.model.errors import ProbeFileError
from observatory.model.safe_read import MAX_DEPTH, too_deep

CHUNK = 1 << 20

# Kinds of dropped record, in the order a summary lists them.
DROP_KINDS = ("malformed", "oversized", "hostile", "unsupported", "other-format", "duplicate")


@dataclass(frozen=True)
class Limits:
    """What one file may hold (`observatory suite import` takes larger ones by its options)."""

    record_bytes: int = 1 << 20  # one request: 1 MiB (a long prompt of some 250,000 tokens)
    records: int = 1_000_000  # records read from one file
    total_bytes: int = 4 << 30  # bytes read from one file
    depth: int = MAX_DEPTH  # nesting of one record


@dataclass(frozen=True)
class Dropped:
    """A record that did not load: where (FILE:LINE), which kind (`DROP_KINDS`), why (shown as it is)."""

    where: str
    kind: str
    why: str

    def line(self) -> str:
        """One line naming the record."""
        return f"{self.where}: {self.why}"


@dataclass(frozen=True)
class Record:
    """One parsed record and where it was."""

    where: str
    index: int  # its line (JSONL) or position (JSON array), from 1
    value: Any


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """TEXT with every control character (terminal escapes) shown as \\xNN, newlines as spaces: one safe line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text.replace("\n", " "))


def shown(text: object, limit: int = 60) -> str:
    """TEXT as it may be printed: control characters (terminal escapes) as \\xNN, cut to LIMIT characters."""
    s = str(text)
    cut = s[:limit]
    cut = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", cut)
    cut = "".join(c if not 0xD800 <= ord(c) <= 0xDFFF else f"\\u{ord(c):04x}" for c in cut)
    return cut + ("..." if len(s) > limit else "")


def open_log(path: Path) -> IO[bytes]:
    """PATH opened for reading bytes; ProbeFileError when it is missing, not a regular file, or unreadable."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ProbeFileError(f"{path}: no such file") from None
    except OSError as e:
        raise ProbeFileError(f"{path}: cannot read it ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ProbeFileError(f"{path}: is a directory; give a file")
    if not stat.S_ISREG(st.st_mode):
        raise ProbeFileError(f"{path}: not a regular file (a device, FIFO or socket); give a file")
    if not st.st_mode & 0o444:
        raise ProbeFileError(f"{path}: not readable (mode {stat.filemode(st.st_mode)}); give it read permission")
    try:
        return open(path, "rb")
    except OSError as e:
        raise ProbeFileError(f"{path}: cannot read it ({e.strerror})") from None


def first_byte(path: Path) -> bytes:
    """The file's first non-blank byte (b"" for an empty file): ``[`` starts a JSON array."""
    with open_log(path) as f:
        while chunk := f.read(4096):
            stripped = chunk.lstrip(b" \t\r\n\xef\xbb\xbf")
            if stripped:
                return stripped[:1]
    return b""


def read_records(path: Path, limits: Limits, notes: list[str]) -> Generator[Record | Dropped, None, None]:
    """Every record of PATH (a JSON array when it starts with ``[``, else JSON Lines), or why it was dropped.
    File-level notes (the bounds reached, a broken array) are appended to NOTES."""
    array = first_byte(path) == b"["
    with open_log(path) as f:
        if array:
            yield from _array(path, f, limits, notes)
        else:
            yield from _lines(path, f, limits, notes)


def _lines(path: Path, f: IO[bytes], limits: Limits, notes: list[str]) -> Iterator[Record | Dropped]:
    total = 0
    number = 0
    records = 0
    while True:
        raw = f.readline(limits.record_bytes + 1)
        if not raw:
            return
        number += 1
        total += len(raw)
        where = f"{path}:{number}"
        if len(raw) > limits.record_bytes and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # skip the rest of the line as it streams past
                raw = f.readline(CHUNK)
                total += len(raw)
            yield Dropped(where, "oversized", f"over {limits.record_bytes} bytes: not read")
        elif raw.strip():
            records += 1
            yield _parse(where, number, raw, limits)
        if total > limits.total_bytes or records >= limits.records:
            what = f"{limits.total_bytes} bytes" if total > limits.total_bytes else f"{limits.records} records"
            notes.append(f"{path}: stopped after line {number} ({what}, the most read from one file): the rest "
                         "is not read")
            return


def _parse(where: str, index: int, raw: bytes, limits: Limits) -> Record | Dropped:
    """One record's bytes as JSON, or why not."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Dropped(where, "malformed", f"not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start})")
    text = text.strip().lstrip("\ufeff")
    if _depth(text) > limits.depth:
        return Dropped(where, "hostile", f"nested deeper than {limits.depth} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite, object_pairs_hook=_pairs)
    except RecursionError:
        return Dropped(where, "hostile", f"nested deeper than {limits.depth} levels")
    except _BadJSON as e:
        return Dropped(where, "malformed", str(e))
    except ValueError as e:  # JSONDecodeError, an integer of thousands of digits
        return Dropped(where, "malformed", f"not JSON ({shown(e, 100)})")
    if too_deep(value, limits.depth):
        return Dropped(where, "hostile", f"nested deeper than {limits.depth} levels")
    return Record(where, index, value)


class _BadJSON(ValueError):
    """JSON that Python would read but a request body cannot be."""


def _no_constant(name: str) -> Any:
    raise _BadJSON(f"holds {name}, which is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadJSON(f"holds the number {shown(text, 20)}, beyond a float")
    return value


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _BadJSON(f"key {shown(key)!r} appears twice in one object (which one was sent?)")
        out[key] = value
    return out


_OPEN_CLOSE = re.compile(r'[\[\]{}"\\]')


def _depth(text: str) -> int:
    """The deepest nesting of TEXT's arrays and objects, strings skipped (a linear scan, no recursion)."""
    depth = deepest = 0
    in_string = False
    pos = 0
    while (m := _OPEN_CLOSE.search(text, pos)) is not None:
        c = m.group()
        pos = m.end()
        if in_string:
            if c == "\\":
                pos += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


_STRUCTURE = re.compile(rb'[\[\]{}",]')
_OPENS = {b"]": b"[", b"}": b"{"}
_IN_STRING = re.compile(rb'[\\"]')


def _array(path: Path, f: IO[bytes], limits: Limits, notes: list[str]) -> Iterator[Record | Dropped]:
    """The elements of the JSON array in F, each parsed on its own (`_array_elements` finds their bounds)."""
    for index, raw, problem in _array_elements(f, limits, notes, path):
        where = f"{path}: record {index}"
        if problem is not None:
            yield Dropped(where, *problem)
        elif raw is not None:
            yield _parse(where, index, raw, limits)


def _array_elements(f: IO[bytes], limits: Limits, notes: list[str],
                    path: Path) -> Iterator[tuple[int, bytes | None, tuple[str, str] | None]]:
    """(position, the element's bytes, or (kind, why) it was skipped) for each element of the top array."""
    total = index = 0
    depth = deepest = 0  # depth 1: inside the top array, between elements
    in_string = escape = started = False
    stack: list[bytes] = []  # the open brackets of the current element (as deep as the limit lets it matter)
    unchecked = 0
    element = bytearray()
    oversized = False

    def element_done() -> tuple[int, bytes | None, tuple[str, str] | None]:
        nonlocal element, oversized, deepest, index
        raw = bytes(element).strip()
        index += 1
        problem = (("oversized", f"over {limits.record_bytes} bytes: not read") if oversized else
                   ("hostile", f"nested deeper than {limits.depth} levels") if deepest > limits.depth else
                   ("malformed", "an empty element") if not raw else None)
        element, oversized, deepest = bytearray(), False, 0
        return index, None if problem else raw, problem

    def keep(part: bytes) -> None:
        nonlocal element, oversized
        if not oversized:
            element += part
            if len(element) > limits.record_bytes:
                oversized, element = True, bytearray()

    while chunk := f.read(CHUNK):
        total += len(chunk)
        buf, pos = chunk, 0
        if not started:
            buf = buf.lstrip(b" \t\r\n\xef\xbb\xbf")
            if not buf:
                continue
            buf, depth, started = buf[1:], 1, True  # past the opening "["
        start = 0  # where the current element's bytes begin in BUF
        while pos < len(buf):
            if escape:
                pos, escape = pos + 1, False
                continue
            m = (_IN_STRING if in_string else _STRUCTURE).search(buf, pos)
            if m is None:
                pos = len(buf)
                break
            c, pos = m.group(), m.end()
            if in_string:
                escape, in_string = c == b"\\", c == b"\\"
            elif c == b'"':
                in_string = True
            elif c in b"[{":
                depth += 1
                deepest = max(deepest, depth - 1)
                if len(stack) < limits.depth + 2:
                    stack.append(c)
                else:
                    unchecked += 1  # deeper than the limit: dropped as hostile, its brackets not matched
            elif c in b"]}" and depth > 1:
                depth -= 1
                if unchecked:
                    unchecked -= 1
                elif stack and stack.pop() != _OPENS[c]:  # "}" closing a "[": the array's structure is lost
                    index += 1
                    yield index, None, ("malformed", "a bracket closes what it did not open")
                    notes.append(f"{path}: the JSON array is broken at record {index}: the records after it "
                                 "cannot be told apart and are not read")
                    return
            elif c == b"]" or (c == b"," and depth == 1):  # an element ends (the last one at the array's end)
                keep(buf[start:m.start()])
                start = pos
                if c == b"]" and not bytes(element).strip() and not oversized and index == 0:
                    return  # an empty array
                yield element_done()
                if c == b"]":
                    return
                if index >= limits.records:
                    notes.append(f"{path}: stopped after record {index} ({limits.records} records, the most read "
                                 "from one file): the rest is not read")
                    return
        keep(buf[start:pos])
        if total > limits.total_bytes:
            notes.append(f"{path}: stopped after record {index} ({limits.total_bytes} bytes, the most read from one "
                         "file): the rest is not read")
            return
    notes.append(f"{path}: the JSON array does not close (a cut or broken file): what follows record {index} is "
                 "not read")
