"""What a channel's judge reads: one session's arms, roles and the channel's stored results."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from observatory.engines.launches import base_arm
from observatory.model.gates import GateRegistry
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ResultRow, VerdictRow
from observatory.store.session_store import Store


@dataclass
class ChannelView:
    """One channel of one session, read from the store (a channel's `judge` gets this)."""

    store: Store
    session_id: int
    channel: str
    arms: list[ArmRow]
    roles: dict[str, str]  # arm name -> role (observatory.model.roles)
    probes: dict[int, Probe]  # this channel's probes, by probe id
    registry: GateRegistry
    _results: dict[int, list[ResultRow]] = field(default_factory=dict)

    @property
    def base(self) -> ArmRow | None:
        """The arm every other arm is judged against (role base), if any."""
        base: ArmRow | None = base_arm(self.arms, roles=self.roles)
        return base

    def role(self, arm: ArmRow) -> str:
        """An arm's role."""
        return self.roles.get(arm.name, "")

    def results(self, arm: ArmRow) -> list[ResultRow]:
        """The arm's results of this channel, in the order they were stored."""
        if arm.id not in self._results:
            self._results[arm.id] = [r for r in self.store.results(arm.id, self.channel) if r.probe_id in self.probes]
        return self._results[arm.id]

    def probe(self, r: ResultRow) -> Probe:
        """The probe a result answered."""
        return self.probes[r.probe_id]

    def verdict(self, arm: ArmRow, verdict: str, reason: str, details: dict[str, Any] | None = None,
                part: str | None = None, version: str = "1") -> VerdictRow:
        """An arm-level verdict of this channel (gate ``CHANNEL`` or ``CHANNEL:PART``)."""
        gate = self.channel if part is None else f"{self.channel}:{part}"
        return VerdictRow(arm_id=arm.id, result_id=None, probe_id=None, gate=gate, gate_version=version,
                          verdict=verdict, reason=reason, details=details or {})
