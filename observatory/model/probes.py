"""Probes: prompts plus what to check, loaded strictly from TOML files.

A suite is one TOML file in `probes/` (``probes/default.toml`` is the default
suite; docs/probes.md describes the format, docs/probes.schema.json is its
JSON Schema). Layout::

    suite = "default"                 # optional; defaults to the file stem
    description = "..."               # optional

    [[probe]]
    name = "recite-cat-4"             # unique within the suite
    category = "recitation"           # one of CATEGORIES
    messages = [{ role = "user", content = "..." }]   # a chat probe, or
    # prompt = "..."                  # a completion probe (exactly one of the two)
    max_tokens = 64                   # optional, default 64
    gates = ["content", "expect"]     # optional; default: DEFAULT_GATES[category]
    tools = [ ... OpenAI tool definitions ... ]        # optional (chat only)
    tool_choice = "auto"              # optional: "auto" | "required" | "none" | {"type": "function", "function": {"name": ...}}
    params = { stop = ["\\n\\n"] }      # optional: request fields sent over the greedy defaults (PARAMS)
    original = { temperature = 0.7 }  # optional: the logged request's own sampling fields, kept, not sent
    [probe.expect]                    # optional
    exact = "..."                     # the whole output, after stripping surrounding whitespace
    regex = "..."                     # a full match on the stripped output (the regex module, time-bounded)
    contains = ["...", "..."]         # substrings that must all appear
    tool_names = ["get_weather"]      # expected tool names, in order
    tool_count = 1                    # expected number of tool calls

The shape of every key is checked by the suite's JSON Schema
(`observatory.model.probe_schema`, with jsonschema); unknown keys anywhere
are errors naming the file, the probe and the key; so are fields of the
wrong type (every `expect` field included) and gate names that are not
registered result gates (the closest known name is suggested). Suites in
other formats (OpenAI request logs, ShareGPT, vLLM's and AIPerf's dataset
files) are read by `observatory.model.suites`, which makes the same probes.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import regex

from observatory.model.errors import ProbeFileError
from observatory.model.gates import default_registry
from observatory.model.paths import PROBES_DIR
from observatory.model.probe_schema import CATEGORIES, MAX_PROBES, ORDER, SAMPLING_FIELDS, suite_schema
from observatory.model.schema_check import Path as SchemaPath
from observatory.model.schema_check import dotted, first_problem, validator
from observatory.model.tomlfile import read_toml

__all__ = ["CATEGORIES", "DEFAULT_GATES", "MAX_PROBES", "Probe", "check_probes", "load_probe_file", "resolve_suite"]

# A recitation's healthy answer is repetitive by design, so degeneracy does
# not apply to it (docs/design.md, section 3); nor to counting/sequence outputs,
# whose 3-grams repeat digits legitimately.
DEFAULT_GATES: dict[str, list[str]] = {
    "recitation": ["content", "expect"],
    "counting": ["content", "expect"],
    "sequence": ["content", "expect"],
    "tool_call": ["content", "tool_calls", "expect"],
    "json": ["content", "expect", "degeneracy"],
    "code": ["content", "expect", "degeneracy"],
    "prose_en": ["content", "expect", "degeneracy"],
    "prose_zh": ["content", "expect", "degeneracy"],
}


@cache
def suite_check() -> Any:
    """The suite schema's validator (made once, when a suite is first read)."""
    return validator(suite_schema())


@dataclass
class Probe:
    """A prompt plus what to check about its output."""

    name: str
    category: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None  # a completion's text, or its token ids (a length sweep)
    max_tokens: int = 64
    gates: list[str] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # Field channels (observatory.channels) make probes of their own: the channel's
    # name, request parameters over the greedy defaults (stop, stop_token_ids,
    # temperature, top_p, seed, ...) and what the channel needs to judge them.
    # A suite probe's ``params`` table (stop, penalties, response_format, ...:
    # probe_schema.PARAMS) is its ``sampling``: sent over the greedy defaults too.
    channel: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    # A logged request's own sampling and stopping fields (temperature, top_p, seed, n, max_tokens as logged,
    # ...), kept whole and never sent by the greedy correctness pass: a replay that samples, or that verifies a
    # sampled output by teacher forcing, reads them here (docs/probes.md, "Greedy is the reference").
    original: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """"chat" or "completion"."""
        return "chat" if self.messages is not None else "completion"

    def to_dict(self) -> dict[str, Any]:
        """The full definition, JSON-able (what is stored with every result)."""
        return asdict(self)

    @property
    def content_hash(self) -> str:
        """Hash of everything that defines the probe (not its source path)."""
        d = self.to_dict()
        d.pop("source")
        for key in ("channel", "sampling", "meta", "original"):  # absent when empty: older sessions keep their hashes
            if not d[key]:
                d.pop(key)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Probe:
        """Rebuild a stored probe."""
        return cls(**d)

    @property
    def greedy(self) -> bool:
        """Whether its requests decode greedily (temperature 0: the token diff applies)."""
        return not self.sampling.get("temperature")


def _fail(path: Path, where: str, msg: str) -> ProbeFileError:
    return ProbeFileError(f"{path}: {where}: {msg}")


def _where(data: dict[str, Any], at: SchemaPath) -> str:
    """"probe 'NAME'" or "probe #N" for a path into the suite's probes ('' for a top-level one)."""
    if len(at) < 2 or at[0] != "probe" or not isinstance(at[1], int):
        return ""
    raw = data["probe"][at[1]]
    name = raw.get("name") if isinstance(raw, dict) else None
    return f"probe {name!r}" if isinstance(name, str) else f"probe #{at[1] + 1}"


def _unknown(at: SchemaPath, extra: list[str], allowed: list[str]) -> str:
    """The message for unknown keys EXTRA where ALLOWED are known (at the top, in a probe, or deeper)."""
    listed = f"(allowed: {', '.join(allowed)})"
    if not at:
        return f"unknown top-level key {extra[0]!r} {listed}"
    inner = dotted((*at[2:], extra[0]))
    hint = ""
    if extra[0] in SAMPLING_FIELDS and at[2:] in ((), ("params",)):
        hint = ("; a sampling field is not sent (the correctness pass decodes greedily): keep it in the "
                "'original' table (docs/probes.md)")
    return f"unknown key {inner!r} {listed}{hint}"


def check_suite_shape(path: Path, data: dict[str, Any]) -> None:
    """DATA (a parsed suite) against the suite's JSON Schema: the first problem, named, as ProbeFileError."""
    raw = data.get("probe")
    if isinstance(raw, list) and len(raw) > MAX_PROBES:
        raise ProbeFileError(f"{path}: {len(raw)} probes, over the {MAX_PROBES} a suite may hold")
    problem = first_problem(suite_check(), data, ORDER, _unknown, base=2)
    if problem is None:
        return
    where = _where(data, problem.path)
    raise _fail(path, where, problem.message) if where else ProbeFileError(f"{path}: {problem.message}")


def _probe(path: Path, raw: dict[str, Any]) -> Probe:
    """One [[probe]] table whose shape the schema passed: the checks across keys, then the Probe."""
    where = f"probe {raw['name']!r}"
    messages, prompt = raw.get("messages"), raw.get("prompt")
    if (messages is None) == (prompt is None):
        raise _fail(path, where, "give exactly one of 'messages' (chat) or 'prompt' (completion)")
    if raw.get("tools") is not None and messages is None:
        raise _fail(path, where, "'tools' needs a chat probe ('messages')")
    category = raw["category"]
    gates = list(raw.get("gates", DEFAULT_GATES[category]))
    expect = dict(raw.get("expect", {}))
    if "regex" in expect:
        try:
            regex.compile(expect["regex"])  # the engine gates/expect.py matches with
        except regex.error as e:
            raise _fail(path, where, f"'expect.regex' does not compile: {e}") from None
    _check_gate_names(path, where, gates)
    return Probe(name=raw["name"], category=category, messages=messages, prompt=prompt,
                 max_tokens=raw.get("max_tokens", 64), gates=gates, tools=raw.get("tools"),
                 tool_choice=raw.get("tool_choice"), expect=expect, source=str(path),
                 sampling=dict(raw.get("params", {})), original=dict(raw.get("original", {})))


def _check_gate_names(path: Path, where: str, gates: list[str]) -> None:
    """Every listed gate is a registered result gate; a typo names the closest one (issue 13 item 5)."""
    registry = default_registry()
    usable = sorted(g.name for g in registry if g.kind == "result")
    for name in gates:
        if name in usable:
            continue
        if name in registry:
            raise _fail(path, where, f"gate {name!r} in 'gates' is a {registry.get(name).kind} gate, which runs "
                                     f"on every probe by itself; list only result gates ({', '.join(usable)})")
        close = difflib.get_close_matches(name, usable, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise _fail(path, where, f"unknown gate {name!r} in 'gates' ({hint}known: {', '.join(usable)})")


def load_probe_file(path: Path | str) -> list[Probe]:
    """Load one suite file strictly; every problem names the file."""
    path = Path(path)
    data = read_toml(path, ProbeFileError, "probe file")
    check_suite_shape(path, data)
    return check_probes(path, [_probe(path, raw) for raw in data["probe"]])


def check_probes(path: Path | str, probes: list[Probe]) -> list[Probe]:
    """PROBES, whose names must be unique in the suite at PATH."""
    seen: set[str] = set()
    for p in probes:
        if p.name in seen:
            raise ProbeFileError(f"{path}: probe name {p.name!r} appears twice")
        seen.add(p.name)
    return probes


def resolve_suite(spec: str | None) -> Path:
    """A suite name (file stem in probes/) or a path to a TOML file."""
    if spec is None:
        spec = "default"
    p = Path(spec)
    if p.suffix == ".toml" or p.exists():
        return p
    candidate = PROBES_DIR / f"{spec}.toml"
    if not candidate.is_file():
        known = sorted(x.stem for x in PROBES_DIR.glob("*.toml"))
        raise ProbeFileError(
            f"No probe suite {spec!r}. Known suites: {', '.join(known) or 'none'}; "
            "or pass a path to a .toml file."
        )
    return candidate
