"""Known findings: the ledger of findings a team has triaged (issue 46 item 1; docs/known.md).

A ledger is TOML, one ``[[known]]`` table per finding, loaded strictly: an
unknown key, a bad glob, a bad version specifier, a duplicate id is one line
naming the file and the entry (`ObservatoryError`, exit 3)::

    [[known]]
    id = "vllm-0.26-ids-past-stop"              # unique: letters, digits, . _ -
    title = "token ids past a stop string under speculation"
    link = "https://github.com/vllm-project/vllm/pull/47616"   # http(s); and/or:
    reproduction = "docs/engines.md, 'vLLM for CUDA (0.26.0, H200): token ids past a stop string'"
    engine = "vllm"                             # the adapter's name: vllm, llama.cpp, sglang, ...
    versions = "==0.26.0"                       # a PEP 440 specifier, or a list of exact versions;
                                                # omitted: any version
    platform = "cuda"                           # optional: cpu or cuda
    dtype = "bfloat16"                          # optional: the dtype served
    checks = ["finish", "mixed_batch", "params:include_stop_str_in_output"]   # gate, channel, performance
                                                # check or validity code names; globs
    arms = ["spec"]                             # arm names, roles or repair=NAME, globs; "!GLOB" leaves
                                                # out; default all
    probes = ["*"]                              # probe names, globs; default all
    reason = ["stop_str", "stop=yes"]           # optional: the verdict's reason must contain one (any case)
    levels = ["WARN", "FAIL"]                   # the levels it may cover (the default); INVALID, UNJUDGED too
    expires = 2027-03-01                        # optional: covers sessions started before this date

This module is the format: parsing, validation, the stored form (a
session keeps the entries in effect, not a path) and the TOML text `observatory
known add` appends. Which verdicts an entry covers is the judge's
(`observatory.judge.ledger_match`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.tomlfile import read_toml
from observatory.model.vocabulary import FAIL, INVALID, INVALID_CODES, UNJUDGED, WARN

# The ledger a command reads from the working directory when no --known is given.
DEFAULT_FILE = "observatory-known.toml"
# The built-in ledger shipped with the package: the engine bugs docs/engines.md documents.
BUILTIN_FILE = Path(__file__).with_name("known_builtin.toml")
BUILTIN = "built-in"  # an entry's source when it comes from BUILTIN_FILE
COVERABLE_LEVELS = (FAIL, INVALID, UNJUDGED, WARN)
DEFAULT_LEVELS = (WARN, FAIL)
PLATFORMS = ("cpu", "cuda")
KEYS = ("id", "title", "link", "reproduction", "engine", "versions", "platform", "dtype", "checks", "arms",
        "probes", "reason", "levels", "expires")
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
_ENGINE = re.compile(r"[a-z0-9][a-z0-9._-]{0,39}")
_GLOB_CHARS = re.compile(r"[^\s\x00-\x1f\x7f]+")


class KnownError(ObservatoryError):
    """A ledger that does not load strictly."""


@dataclass(frozen=True)
class KnownEntry:
    """One triaged finding: what it is, where it applies, and which verdicts it covers."""

    id: str
    title: str
    engine: str
    checks: tuple[str, ...]
    link: str | None = None
    reproduction: str | None = None
    versions: str | tuple[str, ...] | None = None  # a PEP 440 specifier, exact versions, or None: any
    platform: str | None = None
    dtype: str | None = None
    arms: tuple[str, ...] = ("*",)
    probes: tuple[str, ...] = ("*",)
    reason: tuple[str, ...] = ()
    levels: tuple[str, ...] = DEFAULT_LEVELS
    expires: date | None = None
    source: str = ""  # where it was read (a path, BUILTIN, or a session's stored ledger); not stored

    def expired(self, on: date) -> bool:
        """Whether the entry has expired for a session started ON (it covers sessions before its date)."""
        return self.expires is not None and on >= self.expires

    def version_matches(self, version: str | None) -> bool:
        """Whether an engine VERSION is one the entry applies to (an unknown version only where any is)."""
        if self.versions is None:
            return True
        if version is None:
            return False
        if isinstance(self.versions, tuple):
            return version in self.versions
        from packaging.specifiers import SpecifierSet  # here: only a specifier needs packaging
        from packaging.version import InvalidVersion, Version

        try:
            return SpecifierSet(self.versions).contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False

    def about(self) -> dict[str, Any]:
        """What a covered verdict carries of the entry (its details' ``known``)."""
        return {"id": self.id, "title": self.title, "link": self.link, "reproduction": self.reproduction}

    def to_stored(self) -> dict[str, Any]:
        """The entry as a session stores it (the TOML keys; defaults left out)."""
        out: dict[str, Any] = {}
        for key in KEYS:
            value = getattr(self, key)
            if value is None or (key in _DEFAULTS and value == _DEFAULTS[key]):
                continue
            out[key] = value.isoformat() if isinstance(value, date) else list(value) if isinstance(value, tuple) \
                else value
        return out

    def to_toml(self) -> str:
        """The entry as one ``[[known]]`` table, to append to a ledger file."""
        lines = ["[[known]]"]
        for key, value in self.to_stored().items():
            if key == "expires":
                lines.append(f"{key} = {value}")
            elif isinstance(value, list):
                lines.append(f"{key} = [{', '.join(toml_string(v) for v in value)}]")
            else:
                lines.append(f"{key} = {toml_string(value)}")
        return "\n".join(lines) + "\n"


_DEFAULTS: dict[str, Any] = {"arms": ("*",), "probes": ("*",), "reason": (), "levels": DEFAULT_LEVELS}


@dataclass(frozen=True)
class Ledger:
    """The entries in effect for a session, in order (the first that covers a verdict is named)."""

    entries: tuple[KnownEntry, ...] = ()

    def to_stored(self) -> list[dict[str, Any]]:
        """The stored form: the entries themselves (a session is re-judged without the file)."""
        return [e.to_stored() for e in self.entries]

    @classmethod
    def from_stored(cls, stored: Any, where: str) -> Ledger:
        """The ledger a session stored (re-validated; WHERE names the session in an error)."""
        if not isinstance(stored, list):
            raise KnownError(f"{where}: the stored ledger is not a list of entries")
        return cls(tuple(parse_entries({"known": stored}, where)))

    def for_engines(self, engines: Collection[str]) -> Ledger:
        """The entries about ENGINES (a session stores those of its arms' engines: no other can apply)."""
        wanted = {e.lower() for e in engines}
        return Ledger(tuple(e for e in self.entries if e.engine in wanted))

    def get(self, entry_id: str) -> KnownEntry | None:
        """The entry with ENTRY_ID, if any."""
        return next((e for e in self.entries if e.id == entry_id), None)


def toml_string(value: str) -> str:
    """VALUE as a TOML basic string (quotes, backslashes and control characters escaped)."""
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def glob_matches(patterns: Sequence[str], names: Iterable[str | None]) -> bool:
    """Whether any of NAMES matches PATTERNS: a plain glob includes, ``!GLOB`` leaves out (only ``!`` globs:
    everything but those)."""
    shown = [n for n in names if n is not None]
    include = [p for p in patterns if not p.startswith("!")] or ["*"]
    exclude = [p[1:] for p in patterns if p.startswith("!")]
    if any(fnmatch.fnmatchcase(n, p) for n in shown for p in exclude):
        return False
    return any(fnmatch.fnmatchcase(n, p) for n in shown for p in include)


def _glob(value: str, where: str) -> str:
    """VALUE, checked as a glob: printable without spaces, every ``[`` closed, not a bare ``!``."""
    if not _GLOB_CHARS.fullmatch(value) or value in ("!", "!!") or value.startswith("!!"):
        raise KnownError(f"{where}: bad glob {value!r} (printable characters without spaces; '!GLOB' leaves out)")
    body = value[1:] if value.startswith("!") else value
    i = 0
    while i < len(body):
        if body[i] == "[":
            close = body.find("]", i + 2 if body[i + 1:i + 2] in ("!", "]") else i + 1)
            if close < 0:
                raise KnownError(f"{where}: bad glob {value!r}: '[' at {i} is never closed")
            i = close
        i += 1
    return value


def _strings(raw: Any, key: str, where: str, glob: bool = False) -> tuple[str, ...]:
    """A string or a non-empty list of strings, as a tuple."""
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items or not all(isinstance(x, str) and x for x in items):
        raise KnownError(f"{where}: {key} must be a string or a non-empty list of non-empty strings, got {raw!r}")
    return tuple(_glob(x, f"{where}: {key}") if glob else x for x in items)


def _text(raw: Any, key: str, where: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise KnownError(f"{where}: {key} must be a non-empty string, got {raw!r}")
    return raw


def _versions(raw: Any, where: str) -> str | tuple[str, ...]:
    """A PEP 440 specifier (``>=0.26,<0.27``), a bare version (exact) or a list of exact versions."""
    if isinstance(raw, str) and raw.strip():
        from packaging.specifiers import InvalidSpecifier, SpecifierSet  # here: only a string needs packaging
        from packaging.version import InvalidVersion, Version

        try:
            Version(raw)
            return (raw,)  # a bare version is that version exactly
        except InvalidVersion:
            pass
        try:
            SpecifierSet(raw)
        except InvalidSpecifier:
            raise KnownError(f"{where}: versions {raw!r} is not a PEP 440 specifier (e.g. '==0.26.0', "
                             "'>=0.26,<0.27') nor a list of exact versions (e.g. ['0.26.0', 'b0-unknown'])") from None
        return raw
    return _strings(raw, "versions", where)


def _expires(raw: Any, where: str) -> date:
    if isinstance(raw, datetime):
        raise KnownError(f"{where}: expires must be a date (2027-03-01), not a date and time")
    if isinstance(raw, date):
        return raw
    if isinstance(raw, str):
        try:
            return date.fromisoformat(raw)
        except ValueError:
            pass
    raise KnownError(f"{where}: expires must be a date like 2027-03-01, got {raw!r}")


def parse_entry(raw: Any, where: str, engines: Collection[str] | None = None, source: str = "") -> KnownEntry:
    """One ``[[known]]`` table as an entry (WHERE names the file and entry in an error; ENGINES, where given,
    the engine names it may name)."""
    if not isinstance(raw, Mapping):
        raise KnownError(f"{where}: an entry must be a table, got {type(raw).__name__}")
    if isinstance(raw.get("id"), str):
        where = f"{where} (id {raw['id']!r})"
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise KnownError(f"{where}: unknown key {unknown[0]!r} (the keys: {', '.join(KEYS)})")
    for key in ("id", "title", "engine", "checks"):
        if key not in raw:
            raise KnownError(f"{where}: {key} is required")
    entry_id = _text(raw["id"], "id", where)
    if not _ID.fullmatch(entry_id):
        raise KnownError(f"{where}: id {entry_id!r} must be letters, digits, '.', '_' or '-' (at most 80)")
    engine = _text(raw["engine"], "engine", where)
    if not _ENGINE.fullmatch(engine) or (engines is not None and engine not in engines):
        known = f" (known: {', '.join(sorted(engines))})" if engines is not None else ""
        raise KnownError(f"{where}: engine {engine!r} is not an engine's adapter name{known}")
    link = _text(raw["link"], "link", where) if "link" in raw else None
    if link is not None and not re.match(r"https?://\S+$", link):
        raise KnownError(f"{where}: link {link!r} must be an http(s) URL (a path or command goes in reproduction)")
    reproduction = _text(raw["reproduction"], "reproduction", where) if "reproduction" in raw else None
    if link is None and reproduction is None:
        raise KnownError(f"{where}: give a link, a reproduction, or both (how a reader checks the finding)")
    platform = raw.get("platform")
    if platform is not None and platform not in PLATFORMS:
        raise KnownError(f"{where}: platform must be one of {', '.join(PLATFORMS)}, got {platform!r}")
    levels = tuple(_strings(raw.get("levels", list(DEFAULT_LEVELS)), "levels", where))
    bad = [lv for lv in levels if lv not in COVERABLE_LEVELS]
    if bad:
        raise KnownError(f"{where}: levels {bad[0]!r} cannot be covered (levels: {', '.join(COVERABLE_LEVELS)})")
    checks = _strings(raw["checks"], "checks", where, glob=True)
    codes = [c for c in checks if c in INVALID_CODES]
    if codes and INVALID not in levels:
        raise KnownError(f"{where}: validity code {codes[0]} is INVALID: add \"INVALID\" to levels to cover it")
    arms = _strings(raw.get("arms", "*"), "arms", where, glob=True)
    return KnownEntry(
        id=entry_id, title=_text(raw["title"], "title", where), engine=engine, checks=checks, link=link,
        reproduction=reproduction, versions=_versions(raw["versions"], where) if "versions" in raw else None,
        platform=platform, dtype=_text(raw["dtype"], "dtype", where) if "dtype" in raw else None,
        arms=arms, probes=_strings(raw.get("probes", "*"), "probes", where, glob=True),
        reason=_strings(raw["reason"], "reason", where) if "reason" in raw else (), levels=levels,
        expires=_expires(raw["expires"], where) if "expires" in raw else None, source=source)


def parse_entries(data: Mapping[str, Any], where: str, engines: Collection[str] | None = None,
                  source: str = "") -> list[KnownEntry]:
    """The entries of a parsed ledger (``{"known": [...]}``), ids unique."""
    unknown = sorted(set(data) - {"known"})
    if unknown:
        raise KnownError(f"{where}: unknown top-level key {unknown[0]!r}; write each finding as a [[known]] table")
    raw = data.get("known", [])
    if not isinstance(raw, list):
        raise KnownError(f"{where}: known must be an array of tables ([[known]])")
    out: list[KnownEntry] = []
    seen: set[str] = set()
    for i, item in enumerate(raw, start=1):
        entry = parse_entry(item, f"{where}: entry {i}", engines, source or where)
        if entry.id in seen:
            raise KnownError(f"{where}: entry {i}: duplicate id {entry.id!r} (each finding once)")
        seen.add(entry.id)
        out.append(entry)
    return out


def load_file(path: Path | str, engines: Collection[str] | None = None) -> list[KnownEntry]:
    """The entries of one ledger file, loaded strictly."""
    path = Path(path)
    return parse_entries(read_toml(path, KnownError, "known-findings ledger"), str(path), engines, str(path))


def builtin(engines: Collection[str] | None = None) -> list[KnownEntry]:
    """The built-in ledger shipped with the package."""
    data = read_toml(BUILTIN_FILE, KnownError, "built-in known-findings ledger")
    return parse_entries(data, "the built-in ledger", engines, BUILTIN)


def combine(builtin_entries: Sequence[KnownEntry], files: Sequence[Sequence[KnownEntry]]) -> Ledger:
    """The ledger in effect: the files' entries in order, then the built-ins a file does not replace (an entry
    of a file with a built-in's id replaces it); one id in two files is an error naming both."""
    mine: dict[str, KnownEntry] = {}
    for entries in files:
        for e in entries:
            if e.id in mine:
                raise KnownError(f"{e.source}: id {e.id!r} is also in {mine[e.id].source}: keep one of them")
            mine[e.id] = e
    return Ledger(tuple(mine.values()) + tuple(e for e in builtin_entries if e.id not in mine))
