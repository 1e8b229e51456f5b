"""Engine counters from Prometheus text, parsed with prometheus-client's parser.

Only the speculative-decoding counters matter here (DESIGN.md mistake 9:
prove speculation ran). vLLM exposes, per engine and model label set:

- ``vllm:spec_decode_num_drafts_total``
- ``vllm:spec_decode_num_draft_tokens_total``
- ``vllm:spec_decode_num_accepted_tokens_total``
- ``vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}``

Label sets other than ``position`` are summed (one engine may report several).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from observatory.errors import ObservatoryError

_PREFIX = "vllm:spec_decode_"


@dataclass
class SpecCounters:
    """Cumulative (or delta) speculative-decoding counters."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)

    def _combine(self, other: SpecCounters, sign: int) -> SpecCounters:
        n = max(len(self.accepted_per_pos), len(other.accepted_per_pos))
        a = self.accepted_per_pos + [0] * (n - len(self.accepted_per_pos))
        b = other.accepted_per_pos + [0] * (n - len(other.accepted_per_pos))
        return SpecCounters(
            drafts=self.drafts + sign * other.drafts,
            draft_tokens=self.draft_tokens + sign * other.draft_tokens,
            accepted=self.accepted + sign * other.accepted,
            accepted_per_pos=[x + sign * y for x, y in zip(a, b)],
        )

    def __sub__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, -1)

    def __add__(self, other: SpecCounters) -> SpecCounters:
        return self._combine(other, +1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> SpecCounters:
        """From a stored dict (missing keys are zero)."""
        d = d or {}
        return cls(
            drafts=int(d.get("drafts", 0)),
            draft_tokens=int(d.get("draft_tokens", 0)),
            accepted=int(d.get("accepted", 0)),
            accepted_per_pos=[int(x) for x in d.get("accepted_per_pos", [])],
        )


def parse_spec_counters(text: str) -> SpecCounters:
    """Sum the spec-decode counters in a Prometheus exposition text."""
    c = SpecCounters()
    per_pos: dict[int, float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise ObservatoryError(f"Engine /metrics is not valid Prometheus text: {e}") from None
    for fam in families:
        if not fam.name.startswith(_PREFIX):
            continue
        for s in fam.samples:
            if not s.name.endswith("_total"):
                continue  # _created timestamps
            key = s.name[len(_PREFIX) : -len("_total")]
            if key == "num_drafts":
                c.drafts += int(s.value)
            elif key == "num_draft_tokens":
                c.draft_tokens += int(s.value)
            elif key == "num_accepted_tokens":
                c.accepted += int(s.value)
            elif key == "num_accepted_tokens_per_pos" and "position" in s.labels:
                try:
                    pos = int(s.labels["position"])
                except ValueError:
                    continue
                per_pos[pos] = per_pos.get(pos, 0) + s.value
    if per_pos:
        c.accepted_per_pos = [int(per_pos.get(i, 0)) for i in range(max(per_pos) + 1)]
    return c
