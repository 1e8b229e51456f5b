"""Engine counters: the one Prometheus reader and the counter record every engine maps onto.

`read_counters` reads counter families, `read_info` the labels of an info
gauge (e.g. vLLM's ``vllm:cache_config_info``); nothing else parses /metrics.

vLLM exposes, per engine and model label set (llama.cpp the same names under
``llamacpp:``):

- ``vllm:spec_decode_num_drafts_total``
- ``vllm:spec_decode_num_draft_tokens_total``
- ``vllm:spec_decode_num_accepted_tokens_total``
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``

Label sets other than ``position`` are summed (one engine may report several),
except those of another model: a sample whose ``model_name`` is not the arm's
served model is not this arm's and is left out (issue 32 item 2).

/metrics is untrusted input (issue 19 item 1): a NaN or infinite value, a
negative or fractional count, a family declared as something other than a
counter, or a counter that goes down between two reads makes the counters
*unusable*: `SpecCounters.problem` says why, the figures built on them are
unknown, and the session goes on. A counter the engine does not report is
None, never 0 (issue 13 item 8): "not reported" and "zero" stay distinct.

Issue 32 item 2 adds, each making the counters unusable the same way: two
samples with identical labels (a doubled series); a ``position`` label that
is not a position in 0..MAX_POSITION (bounded before anything is allocated
by it); and, per arm across its reads (`CounterWatch`), a server that
restarted (``process_start_time_seconds`` changed, or any counter lower than
at the previous read) and a label set that appeared after the first read
(another engine summed in). `impossible` holds the invariants a delta must
keep once k is known: accepted <= draft tokens (alpha <= 1), draft tokens
<= k x drafts, and no position at or beyond k.
"""

from __future__ import annotations

import math
import threading
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
# The largest per-position label parsed: positions index accepted_per_pos, so a server's
# position 1,000,000,000 must never size a list. 256 is far above any k a speculative
# method uses (vLLM's per-position series are 0..k-1, k a handful); a larger label is
# a lie, and one at or beyond the arm's own k is flagged by `impossible`.
MAX_POSITION = 256
# Prometheus values are doubles: above 2^53 a count is no longer exact (nor storable as JSON everywhere).
MAX_COUNTER = 2**53
# The most of one /metrics answer read (vLLM's is about 75 kB; with many LoRA adapters or engines a few
# hundred kB): a larger one makes the counters unusable instead of costing seconds per read.
MAX_METRICS_BYTES = 8 * 1024 * 1024
# prometheus_client's process collector (vLLM, SGLang): when the server process started
START_TIME = "process_start_time_seconds"


@dataclass
class SpecCounters:
    """Cumulative (or delta) speculative-decoding counters; None = not reported by the engine."""

    drafts: int | None = 0
    draft_tokens: int | None = 0
    accepted: int | None = 0
    accepted_per_pos: list[int] | None = field(default_factory=list)
    # why these counters cannot be used (non-finite, decreasing, wrong type); None when they can
    problem: str | None = None
    # the engine's generated-token counter (vLLM ``vllm:generation_tokens_total``): every token it generated,
    # speculative or not; None when it is not read (another engine, an unusable family). Not a spec counter:
    # ``known`` leaves it out, and only `gates/answer_fields.py` reads it (usage against the engine's count)
    generated: int | None = None

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
            generated=one(self.generated, other.generated),
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
        if d.generated is not None and d.generated < 0:
            d.generated = None  # the generated-token counter went down (a restart): no delta to compare with
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
                            None if self.accepted_per_pos is None else list(self.accepted_per_pos), self.problem,
                            self.generated)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form; not reported is null (``generated`` only where it was read)."""
        d: dict[str, Any] = {
            "drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
            "accepted_per_pos": None if self.accepted_per_pos is None else list(self.accepted_per_pos),
            "problem": self.problem}
        if self.generated is not None:
            d["generated"] = self.generated
        return d

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
            generated=d["generated"] if type(d.get("generated")) is int else None,
        )


def not_reported() -> SpecCounters:
    """Counters of an engine that reports none of them."""
    return SpecCounters(None, None, None, None)


@dataclass
class PromCounts:
    """Counter families read from one /metrics text: {name: {position (-1 if none): summed value}}."""

    values: dict[str, dict[int, int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def lines_naming(text: str, *names: str) -> str:
    """The lines of TEXT that contain one of NAMES (a family's HELP, TYPE and sample lines all name it).

    /metrics is read around every correctness request and may be megabytes of
    other families (a hostile server's 50 MB took minutes per read through
    the full parser); only the lines naming what is read are parsed, so
    garbage elsewhere neither costs nor counts.
    """
    if not any(n in text for n in names):
        return ""
    return "".join(line + "\n" for line in text.splitlines() if any(n in line for n in names))


def _other_model(labels: dict[str, str], model: str | None) -> bool:
    """Whether a sample's labels name a model other than MODEL (no model_name label: the arm's own)."""
    return model is not None and "model_name" in labels and labels["model_name"] != model


def read_counters(text: str, prefix: str, engine: str, only: frozenset[str] | None = None,
                  model: str | None = None) -> PromCounts:
    """Every counter family named PREFIX* in a Prometheus text, checked (the one /metrics reader).

    Names lose PREFIX and any ``_total``; ``_created`` series, names outside
    ONLY when it is given, and samples of a model other than MODEL are skipped.
    A value that is not a finite non-negative integer, a family that is not a
    counter, a position outside 0..MAX_POSITION and a sample repeated with
    identical labels are recorded in `problems` and left out; so is text that
    does not parse at all.
    """
    out = PromCounts()
    try:
        families = list(text_string_to_metric_families(lines_naming(text, prefix)))
    except ValueError as e:
        out.problems.append(f"{engine} /metrics is not valid Prometheus text: {e}")
        return out
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
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
            if _other_model(s.labels, model):
                continue
            key = (s.name, tuple(sorted(s.labels.items())))
            if key in seen:
                out.problems.append(f"{s.name}{dict(s.labels)} appears twice with identical labels")
                continue
            seen.add(key)
            raw = s.labels.get("position")
            if raw is not None and not (raw.isascii() and raw.isdigit() and len(raw) <= 4
                                        and int(raw) <= MAX_POSITION):
                out.problems.append(f"{s.name} has position label {raw[:40]!r}, not a position in "
                                    f"0..{MAX_POSITION}")
                continue
            pos = -1 if raw is None else int(raw)
            v = s.value
            if not math.isfinite(v) or v < 0 or v != int(v) or v > MAX_COUNTER:
                out.problems.append(f"{s.name} = {v!r} is not a count (an integer in 0..2^53)")
                continue
            by_pos = out.values.setdefault(name, {})
            by_pos[pos] = by_pos.get(pos, 0) + int(v)
    return out


def read_info(text: str, name: str) -> dict[str, str] | None:
    """The labels of the first sample named NAME in a Prometheus text; None if absent or unparsable."""
    try:
        families = list(text_string_to_metric_families(lines_naming(text, name)))
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


def parse_spec_counters(text: str, model: str | None = None) -> SpecCounters:
    """The vLLM spec-decode counters in a Prometheus text (absent families: speculation off, zero)."""
    return counters_from(read_counters(text, _PREFIX, "Engine", only=SPEC_FAMILIES, model=model),
                         absent_is_zero=True)


def parse_generated(text: str, prefix: str = "vllm:", model: str | None = None) -> int | None:
    """The engine's generated-token counter (``PREFIX generation_tokens_total``) in a Prometheus text;
    None when absent or not a usable count (its problems never touch the spec counters)."""
    return parse_total(text, "generation_tokens", prefix, model)


def parse_preemptions(text: str, prefix: str = "vllm:", model: str | None = None) -> int | None:
    """The engine's preemption counter (vLLM ``vllm:num_preemptions_total``: requests the scheduler
    evicted from the KV cache to be recomputed); None when absent or not a usable count."""
    return parse_total(text, "num_preemptions", prefix, model)


def parse_total(text: str, name: str, prefix: str = "vllm:", model: str | None = None) -> int | None:
    """One counter family's total (``PREFIX NAME[_total]``, summed over its labels) in a Prometheus text;
    None when absent or not a usable count."""
    # Only the family's own lines are parsed (HELP, TYPE, samples): /metrics is read around every correctness
    # request, and parsing a vLLM text of ~75 kB a second time costs as much as the spec counters' read.
    family = f"{prefix}{name}"
    mine = "\n".join(line for line in text.splitlines() if family in line)
    counts = read_counters(mine + "\n", prefix, "Engine", only=frozenset({name}), model=model)
    if counts.problems or name not in counts.values:
        return None
    return sum(counts.values[name].values())


def impossible(c: SpecCounters, k: int | None) -> list[str]:
    """The invariants counters C (a delta or a sum of deltas) break; K: the arm's draft length, when known.

    Each is a count no engine can produce: more accepted than drafted tokens
    (alpha > 1), more draft tokens than k per draft, an accepted count at a
    position >= k (positions are 0..k-1).
    """
    out: list[str] = []
    d, dt, a, per = c.drafts, c.draft_tokens, c.accepted, c.accepted_per_pos
    if a is not None and dt is not None and a > dt:
        out.append(f"accepted {a} > draft tokens {dt}")
    if k is not None and d is not None and dt is not None and dt > k * d:
        out.append(f"draft tokens {dt} > k x drafts = {k} x {d}")
    if k is not None and per is not None and len(per) > k:
        out.append(f"per-position series up to position {len(per) - 1}, beyond k = {k} (positions 0..{k - 1})")
    return out


def _series(text: str, model: str | None) -> tuple[float | None, frozenset[tuple[str, ...]]]:
    """TEXT's process start time (None if not exposed) and the label sets of its spec-decode series."""
    start: float | None = None
    series: set[tuple[str, ...]] = set()
    try:
        families = list(text_string_to_metric_families(lines_naming(text, "spec_decode_", "spec_verify",
                                                                    START_TIME)))
    except ValueError:
        return None, frozenset()
    for fam in families:
        for s in fam.samples:
            if s.name == START_TIME and start is None:
                start = s.value
            elif ("spec_decode_" in s.name or "spec_verify" in s.name) and not s.name.endswith("_created") \
                    and not _other_model(s.labels, model):
                series.add(tuple(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "position"))
    return start, frozenset(series)


class CounterWatch:
    """One server's successive /metrics reads: counters that fail across reads are marked unusable for good.

    A restart (``process_start_time_seconds`` changed, or any counter lower
    than at the previous read: a restarted server's counters may overtake the
    old ones before the next read, so a delta alone cannot see it), and a
    label set that appears after the first read (another engine's series
    summed in), set a problem that every later read carries.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start: float | None = None
        self._series: frozenset[tuple[str, ...]] | None = None
        self._last: SpecCounters | None = None
        self.problem: str | None = None

    def check(self, c: SpecCounters, text: str, model: str | None = None) -> SpecCounters:
        """C (read from TEXT) with this server's lasting problem, if it has one."""
        start, series = _series(text, model)
        with self._lock:
            found: list[str] = []
            if start is not None and self._start is not None and start != self._start:
                found.append(f"the server restarted between reads ({START_TIME} {self._start!r} -> {start!r})")
            if start is not None and self._start is None:
                self._start = start
            if self._series and series - self._series:
                new = sorted(series - self._series)[:3]
                found.append(f"label sets {[','.join(x) for x in new]} appeared after the first read "
                             "(another engine or model summed in)")
            if self._series is None and series:
                self._series = series
            last = self._last
            if last is not None and c.problem is None and last.problem is None:
                fell = [f"{n} {getattr(last, n)} -> {getattr(c, n)}" for n in COUNTS
                        if getattr(c, n) is not None and getattr(last, n) is not None
                        and getattr(c, n) < getattr(last, n)]
                if fell:
                    found.append("counters decreased since the previous read, the server restarted? ("
                                 + ", ".join(fell) + ")")
            self._last = c
            if found and self.problem is None:
                self.problem = "; ".join(found)
            if self.problem is None:
                return c
            c.problem = "; ".join(dict.fromkeys(p for p in (c.problem, self.problem) if p))
            return c
