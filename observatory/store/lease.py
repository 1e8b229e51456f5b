"""The lease of a running session: which process runs it, on which host, and that it still does.

A session being run holds a lease (issue 19 item 6): the runner's process id
and host, refreshed every REFRESH_S by a background thread. A session stored
as "running" whose lease is dead (its process is gone on this host, or the
lease was not refreshed for STALE_S) was abandoned, e.g. its runner was
killed with SIGKILL: it is shown as "abandoned", and `compare --resume` may
take it over. Resuming a session whose lease is alive is refused. Taking a
lease is a compare-and-set on the values read, so two resumes cannot both win.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from observatory.store.clock import utcnow
from observatory.store.db import SessionRow

REFRESH_S = 30.0
STALE_S = 120.0
ABANDONED = "abandoned"


def holder() -> tuple[int, str]:
    """(process id, host) of this process, as a lease records them."""
    return os.getpid(), socket.gethostname()


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except OSError:
        return False
    return True


def is_live(s: SessionRow, now: datetime | None = None) -> bool:
    """Whether a running session's lease is held by a live process."""
    if s.lease_pid is None or s.lease_at is None:
        return False  # written before leases existed, or never started: nobody holds it
    now = now or utcnow()
    if now - s.lease_at > timedelta(seconds=STALE_S):
        return False
    if s.lease_host == socket.gethostname():
        return _process_alive(s.lease_pid)
    return True  # another host: trust a fresh lease


def shown_status(s: SessionRow) -> str:
    """The status to show: "abandoned" for a running session whose lease is dead."""
    if s.status == "running" and not is_live(s):
        return ABANDONED
    return s.status


def describe(s: SessionRow) -> str:
    """Who holds the lease, for messages."""
    age = (utcnow() - s.lease_at).total_seconds() if s.lease_at else None
    when = f", refreshed {age:.0f} s ago" if age is not None else ""
    return f"process {s.lease_pid} on {s.lease_host}{when}"


class Refresher:
    """Refreshes a lease every REFRESH_S in a daemon thread until stopped."""

    def __init__(self, refresh: Callable[[], None], every_s: float | None = None):
        self._refresh = refresh
        self._every = REFRESH_S if every_s is None else every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="observatory-lease", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._refresh()
            except Exception:
                pass

    def __enter__(self) -> Refresher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
