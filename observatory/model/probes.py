"""Probes: prompts plus what to check, loaded strictly from TOML files.

A suite is one TOML file in `probes/` (``probes/default.toml`` is the default
suite). Layout::

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
    [probe.expect]                    # optional
    exact = "..."                     # the whole output, after stripping surrounding whitespace
    regex = "..."                     # a full match on the stripped output (the regex module, time-bounded)
    contains = ["...", "..."]         # substrings that must all appear
    tool_names = ["get_weather"]      # expected tool names, in order
    tool_count = 1                    # expected number of tool calls

Unknown keys anywhere are errors naming the file, the probe and the key; so
are fields of the wrong type (every `expect` field included) and gate names
that are not registered result gates (the closest known name is suggested).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import regex

from observatory.model.errors import ProbeFileError
from observatory.model.gates import default_registry
from observatory.model.paths import PROBES_DIR
from observatory.model.tomlfile import read_toml

CATEGORIES = (
    "recitation",
    "counting",
    "sequence",
    "tool_call",
    "json",
    "code",
    "prose_en",
    "prose_zh",
)

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

_PROBE_KEYS = {
    "name",
    "category",
    "messages",
    "prompt",
    "max_tokens",
    "gates",
    "tools",
    "tool_choice",
    "expect",
}
_EXPECT_KEYS = {"exact", "regex", "contains", "tool_names", "tool_count"}
_SUITE_KEYS = {"suite", "description", "probe"}
# The most probes one suite may hold: the bundled ones hold 5 to 30, and each probe is a request per arm
# and pass; 100,000 took minutes just to load and hours to run (hostile round three), so it is refused.
MAX_PROBES = 10_000
_MESSAGE_ROLES = {"system", "user", "assistant", "tool"}


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
    channel: str = ""
    sampling: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

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
        for key in ("channel", "sampling", "meta"):  # absent when empty: older sessions keep their hashes
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


def _check_probe(path: Path, index: int, raw: Any) -> Probe:
    where = f"probe #{index + 1}"
    if not isinstance(raw, dict):
        raise _fail(path, where, "each [[probe]] must be a table")
    if isinstance(raw.get("name"), str):
        where = f"probe {raw['name']!r}"
    unknown = sorted(set(raw) - _PROBE_KEYS)
    if unknown:
        raise _fail(
            path, where, f"unknown key {unknown[0]!r} (allowed: {', '.join(sorted(_PROBE_KEYS))})"
        )
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name or ""):
        raise _fail(path, where, "'name' is required: letters, digits, '.', '_' or '-'")
    if len(name) > 255:  # ProbeRow.name is String(255): stored whole or refused, never cut
        raise _fail(path, where, f"'name' has {len(name)} characters; at most 255 are stored")
    category = raw.get("category")
    if category not in CATEGORIES:
        raise _fail(path, where, f"'category' must be one of {', '.join(CATEGORIES)}; got {category!r}")
    messages, prompt = raw.get("messages"), raw.get("prompt")
    if (messages is None) == (prompt is None):
        raise _fail(path, where, "give exactly one of 'messages' (chat) or 'prompt' (completion)")
    if messages is not None:
        if not isinstance(messages, list) or not messages:
            raise _fail(path, where, "'messages' must be a non-empty list of tables")
        for m in messages:
            if not isinstance(m, dict) or m.get("role") not in _MESSAGE_ROLES:
                raise _fail(path, where, f"each message needs a 'role' in {sorted(_MESSAGE_ROLES)}")
            if not isinstance(m.get("content"), str):
                raise _fail(path, where, "each message needs a string 'content'")
    if prompt is not None and not isinstance(prompt, str):
        raise _fail(path, where, "'prompt' must be a string")
    max_tokens = raw.get("max_tokens", 64)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= 32768:
        raise _fail(path, where, "'max_tokens' must be an integer from 1 to 32768")
    gates = raw.get("gates", DEFAULT_GATES[category])
    if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
        raise _fail(path, where, "'gates' must be a list of gate names")
    tools = raw.get("tools")
    if tools is not None:
        if messages is None:
            raise _fail(path, where, "'tools' needs a chat probe ('messages')")
        if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
            for t in tools
        ):
            raise _fail(path, where, "'tools' must be OpenAI tool definitions with function.name")
    tool_choice = raw.get("tool_choice")
    if tool_choice is not None and not (
        tool_choice in ("auto", "required", "none")
        or (isinstance(tool_choice, dict) and isinstance(tool_choice.get("function"), dict)
            and isinstance(tool_choice["function"].get("name"), str))
    ):
        raise _fail(path, where, "'tool_choice' must be auto, required, none or a named-function table")
    expect = raw.get("expect", {})
    if not isinstance(expect, dict):
        raise _fail(path, where, "'expect' must be a table")
    unknown = sorted(set(expect) - _EXPECT_KEYS)
    if unknown:
        raise _fail(
            path, where, f"unknown key 'expect.{unknown[0]}' (allowed: {', '.join(sorted(_EXPECT_KEYS))})"
        )
    _check_expect(path, where, expect)
    _check_gate_names(path, where, gates)
    return Probe(
        name=name,
        category=category,
        messages=messages,
        prompt=prompt,
        max_tokens=max_tokens,
        gates=list(gates),
        tools=tools,
        tool_choice=tool_choice,
        expect=dict(expect),
        source=str(path),
    )


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _check_expect(path: Path, where: str, expect: dict[str, Any]) -> None:
    """Every expect field has its type now, not a judge-time error on the base arm (issue 19 item 8)."""
    checks: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
        ("exact", lambda v: isinstance(v, str), "a string"),
        ("regex", lambda v: isinstance(v, str), "a string"),
        ("contains", lambda v: _is_str_list(v) and len(v) > 0, "a non-empty list of strings"),
        ("tool_names", _is_str_list, "a list of strings"),
        ("tool_count", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0,
         "a non-negative integer"),
    )
    for key, ok, what in checks:
        if key in expect and not ok(expect[key]):
            raise _fail(path, where, f"'expect.{key}' must be {what}; got {expect[key]!r}")
    if "regex" in expect:
        try:
            regex.compile(expect["regex"])  # the engine gates/expect.py matches with
        except regex.error as e:
            raise _fail(path, where, f"'expect.regex' does not compile: {e}") from None


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
    unknown = sorted(set(data) - _SUITE_KEYS)
    if unknown:
        raise ProbeFileError(
            f"{path}: unknown top-level key {unknown[0]!r} (allowed: {', '.join(sorted(_SUITE_KEYS))})"
        )
    raw_probes = data.get("probe")
    if not isinstance(raw_probes, list) or not raw_probes:
        raise ProbeFileError(f"{path}: no [[probe]] tables")
    if len(raw_probes) > MAX_PROBES:
        raise ProbeFileError(f"{path}: {len(raw_probes)} probes, over the {MAX_PROBES} a suite may hold")
    probes = [_check_probe(path, i, raw) for i, raw in enumerate(raw_probes)]
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
