"""No orphan containers: every engine container dies with the observatory.

A container is not a child of the `docker run` client that started it:
killing the client (or the observatory above it) with SIGKILL leaves the
engine running, holding its port, CPU and GPU. So each container carries the
label ``observatory.owner=PID-STARTTICKS`` (the observatory's pid and its
start time, so a reused pid is not mistaken for the owner), and

- a watchdog process, started beside each container in its own session,
  polls the owner once a second and removes the container (and kills the
  `docker run` client) as soon as the owner is gone, however it died;
- every later launch first reaps containers whose owner is dead (in case a
  watchdog was killed too, or the host rebooted mid-session).

Both run automatically; an orderly stop removes the container itself and
ends the watchdog.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from observatory.model.paths import REPO_ROOT

OWNER_LABEL = "observatory.owner"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot, or None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: fields count from its closing paren
    return stat.rsplit(")", 1)[1].split()[19]


def owner_token(pid: int | None = None) -> str:
    """This process's (or PID's) owner label value: 'PID-STARTTICKS'."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_ticks(pid) or 0}"


def owner_alive(token: str) -> bool:
    """Whether the process a token names still runs (the same process, not a reused pid)."""
    pid, _, ticks = token.partition("-")
    if not pid.isdigit():
        return False
    return _start_ticks(int(pid)) == ticks


def _remove(names: list[str]) -> None:
    if names:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, timeout=60, check=False)


def reap_orphans() -> list[str]:
    """Remove the containers of observatories that are no longer running; return their names."""
    try:
        out = subprocess.run(
            ["docker", "ps", "-a", "--filter", f"label={OWNER_LABEL}",
             "--format", '{{.Names}}\t{{.Label "' + OWNER_LABEL + '"}}'],
            capture_output=True, text=True, timeout=60, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    dead = [name for name, _, token in (line.partition("\t") for line in out.stdout.splitlines())
            if name and not owner_alive(token)]
    _remove(dead)
    return dead


def spawn_watchdog(container: str, client_pid: int, token: str | None = None) -> subprocess.Popen[bytes]:
    """Start the watchdog that removes CONTAINER once the owner (this process by default) is gone."""
    # this very package, whatever sys.path the owner was started with
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "observatory.engines.containers", token or owner_token(), container, str(client_pid)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": path},
        start_new_session=True,  # outlives a SIGKILL of the owner's process group
    )


def watch(token: str, container: str, client_pid: int, interval_s: float = 1.0) -> None:
    """Wait for the owner to die, then kill the `docker run` client and remove the container."""
    while owner_alive(token):
        time.sleep(interval_s)
    try:
        os.killpg(client_pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    # the client may have been creating the container as the owner died: remove until it is gone
    for attempt in range(10):
        _remove([container])
        gone = subprocess.run(["docker", "container", "inspect", container], capture_output=True,
                              timeout=60, check=False).returncode != 0
        if gone and attempt >= 1:  # twice gone: no create request was still in flight
            return
        time.sleep(interval_s)


if __name__ == "__main__":  # the watchdog: python -m observatory.engines.containers TOKEN CONTAINER CLIENT_PID
    watch(sys.argv[1], sys.argv[2], int(sys.argv[3]))
