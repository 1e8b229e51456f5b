"""What a channel's judge reads: one session's arms, roles and the channel's stored results, as typed views
(`observatory.store.stored`: no ORM row reaches a channel)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from observatory.model.gates import GateRegistry
from observatory.model.probes import Probe
from observatory.model.vocabulary import BASE
from observatory.store.session_store import Store
from observatory.store.stored import StoredArm, StoredMeasurement, StoredResult, Verdict


@dataclass
class ChannelView:
    """One channel of one session, read from the store (a channel's `judge` gets this)."""

    store: Store
    session_id: int
    channel: str
    arms: Sequence[StoredArm]
    roles: dict[str, str]  # arm name -> role (observatory.model.roles)
    probes: dict[int, Probe]  # this channel's probes, by probe id
    registry: GateRegistry
    _results: dict[int, list[StoredResult]] = field(default_factory=dict)

    @property
    def base(self) -> StoredArm | None:
        """The arm every other arm is judged against (role base), if any."""
        return next((a for a in self.arms if self.roles.get(a.name) == BASE), None)

    def role(self, arm: StoredArm) -> str:
        """An arm's role."""
        return self.roles.get(arm.name, "")

    def results(self, arm: StoredArm) -> list[StoredResult]:
        """The arm's results of this channel, in the order they were stored."""
        if arm.id not in self._results:
            self._results[arm.id] = [r for r in self.store.results(arm.id, self.channel) if r.probe_id in self.probes]
        return self._results[arm.id]

    def stored(self, arm: StoredArm, mode: str | None = None) -> list[StoredResult]:
        """The arm's stored results of MODE (every mode: None), this channel's or not, in the order stored."""
        return list(self.store.results(arm.id, mode))

    def measurements(self, arm: StoredArm) -> list[StoredMeasurement]:
        """The arm's timed blocks (throughput per concurrency level and repeat)."""
        return list(self.store.measurements(arm.id))

    def probe(self, r: StoredResult) -> Probe:
        """The probe a result answered."""
        return self.probes[r.probe_id]

    def verdict(self, arm: StoredArm, verdict: str, reason: str, details: dict[str, Any] | None = None,
                part: str | None = None, version: str = "1") -> Verdict:
        """An arm-level verdict of this channel (gate ``CHANNEL`` or ``CHANNEL:PART``)."""
        gate = self.channel if part is None else f"{self.channel}:{part}"
        return Verdict(arm_id=arm.id, gate=gate, gate_version=version, verdict=verdict, reason=reason,
                       details=details or {})
