"""Serving processes, treated as hostile children.

Each arm's engine runs in its own process group on a free loopback port,
logging to a file. Readiness comes from the server (GET /health, bounded);
liveness from the process handle we hold (docs/design.md mistake 8): a child that
exits while we wait is a failed start, a child still loading is not dead.
Stopping is terminate -> wait -> kill, on the whole group, always in
``finally``. What the child runs is its engine's business: `engine_argv` asks
the arm's adapter (`EngineAdapter.server_argv`, `observatory.engines.adapter`),
and nothing here names an engine.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from observatory.engines import containers
from observatory.engines.adapter import adapter_for
from observatory.engines.settings import EngineSettings
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError
from observatory.model.redact import redact_file

# EngineStartError.kind values: why the engine did not become ready
START_ERROR_KINDS = ("exited", "port_in_use", "hung", "not_found", "unhealthy")


class EngineStartError(ObservatoryError):
    """The engine exited, or never became healthy, before it was ready; `kind` is one of START_ERROR_KINDS."""

    def __init__(self, message: str, status: str = "failed", log_tail: str = "", kind: str = "exited"):
        super().__init__(message)
        self.status = status
        self.log_tail = log_tail
        self.kind = kind


def exit_kind(log_tail: str) -> str:
    """Why a child exited before it was ready, from its log: "port_in_use" (retry elsewhere) or "exited"."""
    # The one place the engine's own words are read: the port we picked was taken between
    # free_port() and the engine's bind (a race, not a fault of the arm).
    return "port_in_use" if "address already in use" in log_tail.lower() else "exited"


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PICKED = 10000  # below it: the well-known and commonly configured ports (8000, 8080, ...)


def _below_ephemeral(highest: int) -> int | None:
    """A bindable loopback port in [LOWEST_PICKED, the kernel's ephemeral range), at most HIGHEST, or None.

    A port the kernel hands out for a bind to port 0 (a test's stub server, another client) can be taken
    between `free_port` and the engine's own bind, seconds later; then the other server answers /health as if
    it were the engine (seen in CI, 2026-12-06: a spec arm "ready" on a stub's port, its engine dead at the
    bind). Ports below the ephemeral range are never handed out that way."""
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    top = min(highest, low - 1)
    if top <= LOWEST_PICKED:
        return None
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randint(LOWEST_PICKED, top)
        if _bindable(port):
            return port
    return None


def _bindable(port: int) -> bool:
    """Whether a loopback bind to PORT succeeds right now (the socket is closed again at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(highest: int = 65535) -> int:
    """A loopback port nobody listens on right now, at most HIGHEST (an engine that derives other ports
    from its own, `EngineAdapter.max_port`): below the kernel's ephemeral range where it can (`_below_ephemeral`),
    else one the kernel picks."""
    picked = _below_ephemeral(highest)
    if picked is not None:
        return picked
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port <= highest:
            return port
    for port in range(min(highest, 65535), 1023, -1):  # the kernel kept handing out high ports: look below
        if _bindable(port):
            return port
    raise EngineStartError(f"no free loopback port at or below {highest}", kind="port_in_use")


def engine_argv(arm: Arm, settings: EngineSettings, port: int, env: dict[str, str] | None = None,
                gpus: list[int] | None = None, container: str | None = None,
                labels: dict[str, str] | None = None) -> list[str]:
    """The full command line that launches ARM (in its image, if it has one and its engine runs in images):
    its engine's adapter says it (`EngineAdapter.server_argv`)."""
    adapter = adapter_for(arm.engine)
    image = arm_image_ref(arm, settings) if getattr(adapter, "runs_in_images", True) else None
    return adapter.server_argv(arm, settings, port, image, env, gpus, container, labels)


def arm_image_ref(arm: Arm, settings: EngineSettings) -> str | None:
    """The image ARM runs in: its own (ARM@IMG) or the session's --image; None to launch directly."""
    return arm.image or settings.image


def engine_env(arm: Arm, settings: EngineSettings) -> dict[str, str]:
    """The environment overrides for ARM (what is stored; never the whole environment)."""
    env = dict(settings.env)
    env.update(arm.env)
    if arm.fault:
        env["OBSERVATORY_FAULT"] = arm.fault
    return env


class EngineProcess:
    """One engine child process in its own process group."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, container: str | None = None):
        self.argv = argv
        self.env = env
        self.log_path = log_path
        # a docker container outlives its `docker run` client: removed by name on
        # stop, and by a watchdog if the observatory dies first (observatory.engines.containers)
        self.container = container
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Launch the child; output goes to the log file."""
        if self.argv[0] != "docker" and not Path(self.argv[0]).exists() and shutil.which(self.argv[0]) is None:
            raise EngineStartError(f"Engine interpreter {self.argv[0]!r} not found.", kind="not_found")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        if self.container:
            containers.reap_orphans()
        with open(self.log_path, "ab") as log:
            # the attached `docker run` client streams the container's output (its `docker logs`) here
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        if self.container:
            self.watchdog = containers.spawn_watchdog(self.container, self.proc.pid)

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id)."""
        return self.proc.pid if self.proc else None

    def exit_code(self) -> int | None:
        """None while the child runs."""
        return None if self.proc is None else self.proc.poll()

    def wait_ready(
        self, health: Callable[[], bool], timeout_s: float, tick: Callable[[float], None] | None = None
    ) -> float:
        """Block until HEALTH() is true; raise EngineStartError if the child dies or time runs out."""
        t0 = time.monotonic()
        while True:
            code = self.exit_code()
            if code is not None:
                tail = self.log_tail()
                raise EngineStartError(
                    f"engine exited with status {code} before it was ready", "failed", tail, exit_kind(tail)
                )
            if health():
                return time.monotonic() - t0
            elapsed = time.monotonic() - t0
            if elapsed > timeout_s:
                raise EngineStartError(
                    f"engine not healthy after {timeout_s:.0f} s (process still running)", "hung", self.log_tail(),
                    "hung",
                )
            if tick:
                tick(elapsed)
            time.sleep(0.5)

    def stop(self, grace_s: float = 20.0) -> None:
        """Terminate the whole group, wait, then kill it."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        if self.proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Children of the engine (its engine-core process) may outlive it.
        _signal_group(pgid, signal.SIGKILL)
        if self.container:
            subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, timeout=60, check=False)
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        redact_file(self.log_path)  # the engine wrote it unmasked (vLLM logs its --api-key): issue 32 item 1

    def log_tail(self, lines: int = 60, max_chars: int = 8000) -> str:
        """The last lines of the engine log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                data = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        tail = "\n".join(data.splitlines()[-lines:])
        return tail[-max_chars:]


    def fatal_error(self, max_bytes: int = 4 * 1024 * 1024) -> str | None:
        """The first exception an engine logged at ERROR level (its cause of death, where it died of one), e.g.
        "RuntimeError: index -13999504 is out of bounds for dimension 1 with size 4096"; None where none is
        logged. Read from the last MAX_BYTES of the log; what the process printed as it exited (leaked
        semaphores, nanobind reference counts) is never the cause."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - max_bytes))
                data = f.read().decode("utf-8", errors="replace")
        except OSError:
            return None
        for line in data.splitlines():
            if " ERROR " in line and (m := _EXCEPTION.search(line)):
                return m.group(0)[:500]
        return None


# an exception as a log line names it: "RuntimeError: ...", "torch.OutOfMemoryError: ..."
_EXCEPTION = re.compile(r"\b[\w.]*(?:Error|Exception): .+$")


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
