"""Launch one arm's engine and hold it: process handle + client, stopped in ``finally``.

The one place that turns an arm and the session's engine settings into a
live, healthy engine (docs/design.md mistake 8: readiness from /health,
bounded; liveness from the process handle). The runner, triage and the
benchmark against ``vllm bench`` all launch through `launch`. Use it as a context manager so the
engine's whole process group is stopped however the block ends::

    with launch(arm, settings, None, log_path) as engine:
        engine.client.run(probe)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from observatory.client.send import EngineClient
from observatory.engines.adapter import adapter_for
from observatory.engines.server import (
    EngineProcess,
    EngineStartError,
    engine_argv,
    engine_env,
    free_port,
)
from observatory.engines.settings import EngineSettings
from observatory.model.arms import Arm


@dataclass
class RunningEngine:
    """A healthy engine we launched: its process, a client, and exactly how it was launched."""

    proc: EngineProcess
    client: EngineClient
    argv: list[str]
    env: dict[str, str]
    port: int
    ready_s: float
    log_path: Path
    stopped: bool = field(default=False)

    @property
    def url(self) -> str:
        """The engine's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """Close the client and stop the process group (terminate, wait, kill); idempotent."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.client.close()
        finally:
            self.proc.stop()

    def __enter__(self) -> RunningEngine:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def launch(arm: Arm, settings: EngineSettings, gpus: list[int] | None, log_path: Path, *,
           request_timeout_s: float = 300.0, on_start: Callable[[EngineProcess, int], None] | None = None,
           on_wait: Callable[[float], None] | None = None, attempts: int = 3,
           container_prefix: str | None = None) -> RunningEngine:
    """Start ARM's engine and wait until /health answers; raise EngineStartError if it dies or hangs.

    ON_START(process, port) is called as soon as the child runs, so a caller
    can record its command line and pid, and stop it from another thread,
    before the wait. A port taken under us (EngineStartError kind
    "port_in_use") is retried, ATTEMPTS launches in all. The engine is
    stopped here on any failure, Ctrl-C included.
    """
    highest = int(getattr(adapter_for(arm.engine), "max_port", 65535))
    for attempt in range(1, attempts + 1):
        port = free_port(highest)
        env = engine_env(arm, settings)
        if gpus is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        container = f"{container_prefix}-{port}" if settings.image and container_prefix else None
        argv = engine_argv(arm, settings, port, env, gpus, container)
        proc = EngineProcess(argv, env, log_path, container)
        client = EngineClient(f"http://127.0.0.1:{port}", timeout=request_timeout_s, engine=arm.engine)
        t0 = time.monotonic()
        try:
            proc.start()
            if on_start is not None:
                on_start(proc, port)
            proc.wait_ready(client.health, settings.health_timeout_s, on_wait)
            return RunningEngine(proc, client, argv, env, port, time.monotonic() - t0, log_path)
        except EngineStartError as e:
            client.close()
            proc.stop()
            if attempt < attempts and e.kind == "port_in_use":
                continue
            raise
        except BaseException:
            client.close()
            proc.stop()
            raise
    raise AssertionError("unreachable")  # pragma: no cover
