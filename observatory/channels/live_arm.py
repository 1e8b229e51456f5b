"""What a channel may use of one live arm: the measuring side `observatory.session.measure.ArmRun` provides.

A Protocol, so the channels (below the session in the layering) never import
the session: `ArmRun` satisfies it structurally, and mypy checks that it does
where the runner hands an `ArmRun` to a channel's ``measure``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from observatory.client.answer import Response
from observatory.client.send import EngineClient
from observatory.engines.metrics import SpecCounters
from observatory.model.arms import Arm
from observatory.model.probes import Probe
from observatory.store.stored import StoredResult


class StepReporter(Protocol):
    """Where an arm's progress goes (the runner's Reporter is one)."""

    def step(self, arm: Arm, label: str, done: int, total: int) -> None: ...


class LiveArm(Protocol):
    """One arm with a live engine, as a channel's ``measure`` sees it."""

    arm: Arm
    arm_id: int
    client: EngineClient | None
    reporter: StepReporter

    @property
    def live(self) -> bool: ...

    def check_alive(self, resp: Response | None, error: str | None = None, kind: str | None = None) -> None: ...

    def counters(self) -> SpecCounters: ...

    def store_result(self, probe: Probe, resp: Response, mode: str, delta: SpecCounters | None = None,
                     repeat: int = 0, concurrency: int = 1, keep_top: bool = True) -> StoredResult: ...

    def launch_facts(self) -> Mapping[str, Any]:
        """How the arm was launched, as stored: ``model`` (as the session was given it), ``argv`` (once its
        engine started; none for a URL arm), ``role``, ``engine``, ..."""
        ...

    def sibling(self, why: str, engine_args: Sequence[str] = (), env: Mapping[str, str] | None = None,
                model: str | None = None,
                reasoning_parser: str | None = None) -> AbstractContextManager[LiveArm | None]:
        """A second engine of this arm, launched with ENGINE_ARGS and ENV added, for one engine condition
        (a small KV cache, dev-mode endpoints), serving MODEL (None: the session's; a bundled model's variant)
        with REASONING_PARSER (None: the arm's own): a LiveArm whose results are stored on this arm, stopped
        when the block ends; None where the arm cannot be relaunched (a URL arm) or its launch failed.
        How it went is noted under WHY (`note`: key ``sibling``)."""
        ...

    def note(self, channel: str, **facts: object) -> None:
        """Keep FACTS a channel's judge needs beyond its results (an engine counter, the endpoints it
        found), stored at once in the arm's launch facts under ``channel_facts[CHANNEL]``."""
        ...
