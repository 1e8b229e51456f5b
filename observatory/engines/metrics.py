"""Engine counters: the one Prometheus reader and the counter record every engine maps onto.

`read_counters` reads counter families, `read_info` the labels of an info
gauge (e.g. vLLM's ``vllm:cache_config_info``); nothing else parses /metrics.

vLLM exposes, per engine and model label set (llama.cpp the same names under
``llamacpp:``):

- ``vllm:spec_decode_num_drafts_total``
- ``vllm:spec_decode_num_draft_tokens_total``
- ``vllm:spec_decode_num_accepted_tokens_total``
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``

Label sets other than ``position`` are summed (one engine may report several).

/metrics is untrusted input (issue 19 item 1): a NaN or infinite value, a
negative or fractional count, a family declared as something other than a
counter, or a counter that goes down between two reads makes the counters
*unusable*: `SpecCounters.problem` says why, the figures built on them are
unknown, and the session goes on. A counter the engine does not report is
None, never 0 (issue 13 item 8): "not reported" and "zero" stay distinct.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

_PREFIX = "vllm:spec_decode_"
COUNTS = ("drafts", "draft_tokens", "accepted")
# The vLLM-schema counter families (names less prefix and _total); other families under the
# prefix (e.g. vLLM v0's acceptance-rate gauges) are not counters and are not read.
SPEC_FAMILIES = frozenset({"num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos"})
# Prometheus family types a cumulative count may carry ("unknown": no TYPE line).
_COUNTER_TYPES = frozenset({"counter", "unknown", "untyped"})


@dataclass
class SpecCounters:
    """Cumulative (or delta) speculative-decoding counters; None = not reported by the engine."""

    drafts: int | None = 0
    draft_tokens: int | None = 0
    accepted: int | None = 0
    accepted_per_pos: list[int] | None = field(default_factory=list)
    # why these counters cannot be used (non-finite, decreasing, wrong type); None when they can
    problem: str | None = None

    def _combine(self, other: SpecCounters, sign: int) -> SpecCounters:
        def one(a: int | None, b: int | None) -> int | None:
            return None if a is None or b is None else a + sign * b

        per_pos: list[int] | None = None
        if self.accepted_per_pos is not None and other.accepted_per_pos is not None:
            n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
            a = self.accepted_per_pos + [0] * (n - len(self.accepted_per_pos))
            b = other.accepted_per_pos + [0] * (n - len(other.accepted_per_pos))
            per_pos = [x + sign * y for x, y in zip(a, b)]
        problems = [p for p in (self.problem, other.problem) if p]
        return SpecCounters(
            drafts=one(self.drafts, other.drafts),
            draft_tokens=one(self.draft_tokens, other.draft_tokens),
            accepted=one(self.accepted, other.accepted),
            accepted_per_pos=per_pos,
            problem="; ".join(dict.fromkeys(problems)) or None,
        )

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        """The delta SELF - OTHER; a counter that went down makes the delta unusable."""
        d = self._combine(other, -1)
        if d.problem is None:
            fell = [f"{name} {getattr(other, name)} -> {getattr(self, name)}" for name in COUNTS
                    if (getattr(d, name) or 0) < 0]
            if any(x < 0 for x in d.accepted_per_pos or []):
                fell.append(f"accepted_per_pos {other.accepted_per_pos} -> {self.accepted_per_pos}")
            if fell:
                d.problem = "counters decreased between two reads (" + ", ".join(fell) + ")"
        return d

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, +1)

    @property
    def known(self) -> frozenset[str]:
        """The counter fields the engine reported (not None)."""
        return frozenset(f for f in (*COUNTS, "accepted_per_pos") if getattr(self, f) is not None)

    def plain(self) -> SpecCounters:
        """These counters as a plain SpecCounters (engine extras dropped)."""
        return SpecCounters(self.drafts, self.draft_tokens, self.accepted,
                            None if self.accepted_per_pos is None else list(self.accepted_per_pos), self.problem)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; not reported is null."""
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_pos": None if self.accepted_per_pos is None else list(self.accepted_per_pos),
                "problem": self.problem}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SpecCounters:
        """From a stored dict: null stays None (not reported); a key absent from an older row is 0."""
        d = d or {}

        def count(key: str) -> int | None:
            v = d.get(key, 0)
            return None if v is None else int(v)

        per_pos = d.get("accepted_per_pos", [])
        return cls(
            drafts=count("drafts"), draft_tokens=count("draft_tokens"), accepted=count("accepted"),
            accepted_per_pos=None if per_pos is None else [int(x) for x in per_pos],
            problem=d.get("problem"),
        )


def not_reported() -> SpecCounters:
    """Counters of an engine that reports none of them."""
    return SpecCounters(None, None, None, None)


@dataclass
class PromCounts:
    """Counter families read from one /metrics text: {name: {position (-1 if none): summed value}}."""

    values: dict[str, dict[int, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_counters(text: str, prefix: str, engine: str, only: frozenset[str] | None = None) -> PromCounts:
    """Every counter family named PREFIX* in a Prometheus text, checked (the one /metrics reader).

    Names lose PREFIX and any ``_total``; ``_created`` series, and names outside
    ONLY when it is given, are skipped. A value
    that is not a finite non-negative integer, or a family that is not a counter,
    is recorded in `problems` and left out; so is text that does not parse at all.
    """
    out = PromCounts()
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        out.problems.append(f"{engine} /metrics is not valid Prometheus text: {e}")
        return out
    for fam in families:
        for s in fam.samples:
            if not s.name.startswith(prefix) or s.name.endswith("_created"):
                continue
            name = s.name[len(prefix):].removesuffix("_total")
            if only is not None and name not in only:
                continue
            if fam.type not in _COUNTER_TYPES:
                out.problems.append(f"{s.name} is a {fam.type}, not a counter")
                continue
            try:
                pos = int(s.labels.get("position", -1))
            except ValueError:
                out.problems.append(f"{s.name} has position label {s.labels['position']!r}, not an integer")
                continue
            v = s.value
            if not math.isfinite(v) or v < 0 or v != int(v):
                out.problems.append(f"{s.name} = {v!r} is not a count (a finite non-negative integer)")
                continue
            by_pos = out.values.setdefault(name, {})
            by_pos[pos] = by_pos.get(pos, 0) + int(v)
    return out


def read_info(text: str, name: str) -> dict[str, str] | None:
    """The labels of the first sample named NAME in a Prometheus text; None if absent or unparsable."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for fam in families:
        for s in fam.samples:
            if s.name == name:
                return dict(s.labels)
    return None


def counters_from(counts: PromCounts, absent_is_zero: bool) -> SpecCounters:
    """SpecCounters from vLLM-schema families; a family not there is 0 if ABSENT_IS_ZERO, else None."""
    def total(key: str) -> int | None:
        if key in counts.values:
            return sum(counts.values[key].values())
        return 0 if absent_is_zero else None

    per = {p: v for p, v in counts.values.get("num_accepted_tokens_per_pos", {}).items() if p >= 0}
    per_pos: list[int] | None = [per.get(i, 0) for i in range(max(per) + 1)] if per else None
    if per_pos is None and absent_is_zero:
        per_pos = []
    c = SpecCounters(total("num_drafts"), total("num_draft_tokens"), total("num_accepted_tokens"), per_pos)
    if counts.problems:
        c = SpecCounters(None, None, None, None, "; ".join(counts.problems))
    return c


def parse_spec_counters(text: str) -> SpecCounters:
    """The vLLM spec-decode counters in a Prometheus text (absent families: speculation off, zero)."""
    return counters_from(read_counters(text, _PREFIX, "Engine", only=SPEC_FAMILIES), absent_is_zero=True)
