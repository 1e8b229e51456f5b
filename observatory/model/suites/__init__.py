"""Probe suites in any supported format: the library API behind ``--suite``, ``suite import/show/check``.

``read_suite(path, fmt=None)`` loads one file into a `SuiteRead`: the probes,
every record that did not load (`Dropped`: where, which kind, why, one line
each), notes (records kept in part, bounds reached) and which format was read
and how that was decided. A TOML suite (docs/probes.md) loads strictly, as
`observatory.model.probes.load_probe_file` does (one problem is an error);
a log or dataset file loads record by record, each bad record one line and
the rest still loading, deduplicated (the first of identical requests kept).

The format is the one given, else ``.toml`` for a TOML suite, else decided
from the file's first `DETECT` records by their shape
(`observatory.model.suites.formats.shape`): the shape most of them have,
stated in the result ("detected from 12 of 12 records"); a tie, or no
record of a known shape, is an error asking for ``--suite-format``. A record
of another known shape than the format read is dropped as ``other-format``.

`iter_suite` yields the same probes one at a time (`observatory suite import`
samples from it without holding a whole log); `observatory.model.suites.
importer` samples, deduplicates across files and writes suites.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from observatory.model.errors import ProbeFileError
from observatory.model.probe_schema import MAX_PROBES
from observatory.model.probes import Probe, load_probe_file
from observatory.model.redact import redact_traffic
from observatory.model.suites.formats import FORMATS, name_hint, shape, to_request
from observatory.model.suites.records import DROP_KINDS, Dropped, Limits, Record, first_byte, read_records, shown
from observatory.model.suites.requests import DEFAULT_MAX_TOKENS, Drop, to_probe

__all__ = ["DEFAULT_LIMITS", "DEFAULT_MAX_TOKENS", "DETECT", "DROP_KINDS", "FORMATS", "Dropped", "Limits", "SuiteRead", "detect_format",
           "iter_suite", "read_suite", "twin_key"]

DETECT = 1000  # records read to decide a file's format
DEFAULT_LIMITS = Limits()
_SLUG = re.compile(r"[^A-Za-z0-9_.\-]+")


@dataclass
class SuiteRead:
    """One suite file as read: its probes, what did not load and why, and which format was read."""

    path: str
    format: str
    how: str  # how the format was decided: "given", "the file's suffix", "detected from K of N records"
    probes: list[Probe] = field(default_factory=list)
    dropped: list[Dropped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: int = 0  # records read (for TOML: its probes)
    loaded: int | None = None  # requests that loaded, where the probes are not held here (suite import)

    def headline(self) -> str:
        """One line: the file, the format read and how it was decided, what loaded and what did not."""
        counts = Counter(d.kind for d in self.dropped)
        dropped = ", ".join(f"{counts[k]} {k}" for k in DROP_KINDS if counts[k])
        loaded = len(self.probes) if self.loaded is None else self.loaded
        return (f"{self.path}: read as {self.format} ({FORMATS[self.format]}; {self.how}): {loaded} "
                f"probe(s) from {self.records} record(s)" + (f"; dropped {len(self.dropped)}: {dropped}"
                                                              if self.dropped else ""))


def twin_key(probe: Probe) -> str:
    """What makes two probes the same request: everything but their name and source."""
    d = [probe.category, probe.messages, probe.prompt, probe.max_tokens, probe.gates, probe.tools, probe.tool_choice,
         probe.expect, probe.channel, probe.sampling, probe.meta, probe.original]
    return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def detect_format(path: Path, fmt: str | None = None, limits: Limits = DEFAULT_LIMITS) -> tuple[str, str]:
    """(format, how it was decided) for PATH: FMT when given, else by suffix or by its records' shapes."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise ProbeFileError(f"--suite-format {shown(fmt)!r}: not a format ({', '.join(FORMATS)})")
        return fmt, "given"
    if path.suffix == ".toml":
        return "toml", "the file's suffix"
    lead = first_byte(path)
    if not lead:
        raise ProbeFileError(f"{path}: empty: no records to read")
    if lead not in (b"{", b"[") and path.suffix not in (".json", ".jsonl", ".ndjson"):
        return "toml", "not JSON: its first character"
    counts: Counter[str | None] = Counter()
    first_drop: Dropped | None = None
    items = read_records(path, limits, [])
    try:
        for item in items:
            if isinstance(item, Record):
                counts[shape(item.value)] += 1
                if sum(counts.values()) >= DETECT:
                    break
            elif first_drop is None:
                first_drop = item
    finally:
        items.close()
    n = sum(counts.values())
    if n == 0:
        raise ProbeFileError(f"{path}: no record reads as JSON" + (f" ({first_drop.line()})" if first_drop else "")
                             + "; a suite is JSON Lines, a JSON array, or TOML (docs/probes.md)")
    known = sorted(((c, f) for f, c in counts.items() if f is not None), reverse=True)
    formats = ", ".join(f for f in FORMATS if f != "toml")
    if not known:
        raise ProbeFileError(f"{path}: no record of a supported format among the first {n} (formats: {formats}); "
                             "see docs/probes.md, or give --suite-format")
    if len(known) > 1 and known[0][0] == known[1][0]:
        raise ProbeFileError(f"{path}: {known[0][0]} records look like {known[0][1]} and {known[1][0]} like "
                             f"{known[1][1]}: give --suite-format")
    return known[0][1], f"detected from {known[0][0]} of {n} records"


def iter_suite(path: Path, fmt: str, max_tokens: int = DEFAULT_MAX_TOKENS, limits: Limits = DEFAULT_LIMITS,
               notes: list[str] | None = None, detected: bool = True) -> Iterator[tuple[str, Probe] | Dropped]:
    """(where, probe) for each record of PATH read as FMT (not toml), or the record's `Dropped`; file-level
    notes and records kept in part go to NOTES. DETECTED: the format was decided from the records, so a record
    of another known shape is dropped as other-format (a format given applies to every record)."""
    notes = notes if notes is not None else []
    stem = _slug(path.stem) or "record"
    for item in read_records(path, limits, notes):
        if isinstance(item, Dropped):
            yield item
            continue
        own = shape(item.value)
        if detected and own is not None and own != fmt:
            yield Dropped(item.where, "other-format", f"looks like {own}, not {fmt} (the format read)")
            continue
        hint = name_hint(item.value)
        name = (_slug(redact_traffic(hint)) if hint else None) or f"{stem}-{item.index}"
        try:
            body, endpoint, note = to_request(fmt, item.value)
            probe = to_probe(body, name, max_tokens, endpoint)
        except Drop as d:
            yield Dropped(item.where, d.kind, d.why)
            continue
        if note:
            notes.append(f"{item.where}: {note}")
        yield item.where, replace(probe, source=item.where)


def read_suite(path: Path | str, fmt: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS,
               limits: Limits = DEFAULT_LIMITS) -> SuiteRead:
    """PATH as a suite, in FMT or the format detected: a TOML suite strictly, a log record by record
    (deduplicated; at most MAX_PROBES probes, more is an error pointing at ``suite import --sample``)."""
    path = Path(path)
    fmt, how = detect_format(path, fmt, limits)
    if fmt == "toml":
        probes = load_probe_file(path)
        return SuiteRead(str(path), fmt, how, probes, records=len(probes))
    out = SuiteRead(str(path), fmt, how)
    seen: dict[str, str] = {}
    taken: set[str] = set()
    for item in iter_suite(path, fmt, max_tokens, limits, out.notes, detected=how != "given"):
        out.records += 1
        if isinstance(item, Dropped):
            out.dropped.append(item)
            continue
        where, probe = item
        first = seen.setdefault(twin_key(probe), where)
        if first != where:
            out.dropped.append(Dropped(where, "duplicate", f"the same request as {first}"))
            continue
        out.probes.append(unique_name(probe, taken))
        if len(out.probes) > MAX_PROBES:
            raise ProbeFileError(f"{path}: over {MAX_PROBES} requests load, the most a suite may hold: sample "
                                 f"it (observatory suite import {path} --sample N --out suite.toml)")
    if not out.probes:
        why = f"; the first: {out.dropped[0].line()}" if out.dropped else ""
        raise ProbeFileError(f"{path}: no request loads (read as {fmt}, {how}: {out.records} record(s)){why}")
    return out


def unique_name(probe: Probe, taken: set[str]) -> Probe:
    """PROBE under a name not in TAKEN (its own, else with -2, -3, ... after it), added to TAKEN."""
    name = probe.name
    n = 1
    while name in taken:
        n += 1
        name = f"{probe.name[:240]}-{n}"
    taken.add(name)
    return probe if name == probe.name else replace(probe, name=name)


def _slug(text: str, limit: int = 100) -> str:
    """TEXT as a probe name: runs of other characters as "-", at most LIMIT characters ('' when nothing is left)."""
    return _SLUG.sub("-", text[:4 * limit]).strip("-.")[:limit]
