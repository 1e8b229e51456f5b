"""What an engine counts, as the adapters report it: `EngineCounters` and the helpers that build them.

Adapters (`observatory.engines.adapter`; each engine's in its own module: `observatory.engines.vllm`,
`observatory.engines.sglang`, `observatory.engines.llamacpp`) map an engine's numbers onto SpecCounters
(drafts = verify steps, draft_tokens = drafted tokens tested, accepted = accepted draft tokens,
accepted_per_pos[j] = drafts whose first j+1 tokens were all accepted) and return EngineCounters:
SpecCounters plus the engine's own mean accept length. A field the engine does not report is None
(`known` lists the others); figures.acceptance() is the one formula over them. Nothing is estimated.
Per-request statistics that are missing give None; present but malformed ones raise ObservatoryError.
/metrics goes through the one reader, metrics.read_counters.

Sources and recorded responses: tests/fixtures/engines/SOURCES.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from observatory.engines.metrics import MAX_COUNTER, SpecCounters
from observatory.model.errors import ObservatoryError

FIELDS = frozenset({"drafts", "draft_tokens", "accepted", "accepted_per_pos"})


@dataclass
class EngineCounters(SpecCounters):
    """SpecCounters plus the engine's own mean accept length.

    `reported_tau` is what the engine itself states as tokens per verify step (bonus
    included), kept for cross-checking only; it is dropped by sums and differences.
    """

    reported_tau: float | None = None

    def __sub__(self, other: SpecCounters) -> EngineCounters:
        return engine_counters(super().__sub__(other))

    def __add__(self, other: SpecCounters) -> EngineCounters:
        return engine_counters(super().__add__(other))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, `known` as a sorted list."""
        return {**super().to_dict(), "known": sorted(self.known)}


def engine_counters(c: SpecCounters) -> EngineCounters:
    """C as EngineCounters (no reported accept length)."""
    return EngineCounters(c.drafts, c.draft_tokens, c.accepted,
                          None if c.accepted_per_pos is None else list(c.accepted_per_pos), c.problem, c.generated)


def json_object(x: Any, where: str) -> Mapping[str, Any]:
    """X, which must be a JSON object (ObservatoryError naming WHERE otherwise)."""
    if not isinstance(x, Mapping):
        raise ObservatoryError(f"{where} must be a JSON object, got {type(x).__name__}")
    return x


def first_count(d: Mapping[str, Any], keys: Iterable[str], where: str) -> int | None:
    """The first of KEYS present in D, as a non-negative integer; None if none is."""
    for key in keys:
        v = d.get(key)
        if v is not None:
            if type(v) is not int or v < 0 or v > MAX_COUNTER:  # bools and floats rejected too
                raise ObservatoryError(f"{where}: {key} must be a non-negative integer up to 2^53, "
                                       f"got {repr(v)[:60]}")
            return v
    return None


def build_counters(where: str, drafts: int | None, drafted: int | None, accepted: int | None,
                   histogram: Any = None, reported_tau: float | None = None) -> EngineCounters:
    """EngineCounters from what an engine gave; histogram[j] = drafts accepting exactly j tokens."""
    per_pos: list[int] | None = None
    if histogram is not None and histogram != []:
        if not isinstance(histogram, list) or not all(type(n) is int and n >= 0 for n in histogram):
            raise ObservatoryError(f"{where}: acceptance histogram must be a list of counts, got {histogram!r}")
        drafts = sum(histogram) if drafts is None else drafts
        weighted = sum(j * n for j, n in enumerate(histogram))
        accepted = weighted if accepted is None else accepted
        if sum(histogram) != drafts or weighted != accepted:
            raise ObservatoryError(
                f"{where}: histogram {histogram} disagrees with {drafts} drafts / {accepted} accepted")
        per_pos = [sum(histogram[j + 1:]) for j in range(len(histogram) - 1)]
    if accepted is not None and drafted is not None and accepted > drafted:
        raise ObservatoryError(f"{where}: {accepted} accepted of only {drafted} drafted tokens")
    return EngineCounters(drafts, drafted, accepted, per_pos or None, reported_tau=reported_tau)


def number(x: Any) -> float | None:
    """X as a float when it is a JSON number (never a bool), else None."""
    return float(x) if type(x) in (int, float) else None
