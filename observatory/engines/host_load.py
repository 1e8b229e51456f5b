"""The share of the host's CPU that other work took while one arm was timed (issue 46 item 3).

Bracketed timing measures the host's drift as base's rate before against
after a spec arm's block. A competing load that comes and goes faster than a
block, or that slows one engine more than the other, escapes that: on the
2-core CPU host with other work running (load 10-17) a clean mtp2 read S 0.37
[0.25, 0.53] with base steady within 1.5% around it, where the same arm reads
0.59-0.72 on a quieter host. So each timed block also counts, from Linux's
``/proc``, the CPU time the whole host spent (``/proc/stat``) and the part of it
the arm's own engine (its process group) and this observatory process (the
client) spent; the rest is **foreign**: other work competing for the cores.
``foreign_share`` is that time over the host's CPU capacity during the block
(cores x wall), 0 on an idle host, 1 with every core taken by other work.

The judge (observatory/judge/perf_gates.py) does not FAIL the speed floor on an
arm timed while foreign work held `BUSY_HOST_SHARE` of the host or more: the
speed measured is the host's. Where ``/proc`` cannot be read (not Linux, a URL
arm whose server is elsewhere) the record says "not measurable".
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from observatory.engines.gpu_clocks import NOT_MEASURABLE_WHY

__all__ = ["BUSY_HOST_SHARE", "HostLoad", "busy_share"]

# Other work holding half of the host's cores or more while an arm is timed: on the 2-core host that is a whole
# core of the engine's two threads (vLLM's CPU build runs one OpenMP thread per core and every step waits for
# the slowest); docs/design.md section 3.3a gives the blocks measured on quiet and loaded nights
BUSY_HOST_SHARE = 0.5

PROC = Path("/proc")


def _host_busy() -> tuple[int, int] | None:
    """(busy jiffies, all jiffies) of every core since boot, from /proc/stat's first line; None off Linux."""
    try:
        fields = [int(x) for x in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return total - idle, total


def _group_jiffies(pgids: set[int], pids: set[int]) -> int:
    """utime + stime of every live process whose process group is in PGIDS or whose pid is in PIDS."""
    total = 0
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        rest = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        try:
            pgrp, utime, stime = int(rest[2]), int(rest[11]), int(rest[12])
        except (IndexError, ValueError):
            continue
        if pgrp in pgids or int(entry.name) in pids:
            total += utime + stime
    return total


class HostLoad:
    """Counts the host's foreign CPU time during one timed block (a context manager); `record` is stored.

    ENGINE_PGID: the timed arm's engine process group (None: a URL arm, whose server is not on this host,
    records "not measurable").
    """

    def __init__(self, engine_pgid: int | None):
        self.pgids = {engine_pgid} if engine_pgid else set()
        self.why: str | None = None if engine_pgid else "the arm's server is not a process of this host"
        self._start: tuple[tuple[int, int], int, float] | None = None
        self._record: dict[str, Any] | None = None

    def _read(self) -> tuple[tuple[int, int], int, float] | None:
        host = _host_busy()
        if host is None:
            self.why = self.why or "/proc/stat cannot be read (not Linux)"
            return None
        return host, _group_jiffies(self.pgids, {os.getpid()}), time.monotonic()

    def __enter__(self) -> HostLoad:
        if self.why is None:
            self._start = self._read()
        return self

    def __exit__(self, *exc: Any) -> None:
        end = self._read() if self._start is not None else None
        if self._start is None or end is None:
            return
        (busy0, all0), own0, t0 = self._start
        (busy1, all1), own1, t1 = end
        if all1 <= all0 or t1 <= t0:
            self.why = "no CPU time passed"
            return
        capacity = all1 - all0  # every core's jiffies over the block
        foreign = max(0, (busy1 - busy0) - max(0, own1 - own0))
        self._record = {"measurable": True, "cpus": os.cpu_count(), "wall_s": round(t1 - t0, 3),
                        "busy_share": round((busy1 - busy0) / capacity, 4),
                        "foreign_share": round(foreign / capacity, 4)}

    def record(self) -> dict[str, Any]:
        """What the measurement row stores (beside the GPU clocks): the shares, or "not measurable" and why."""
        if self._record is not None:
            return self._record
        return {"measurable": False, "why": f"{NOT_MEASURABLE_WHY}: {self.why or 'not read'}"}


def busy_share(records: list[dict[str, Any] | None]) -> float | None:
    """The largest foreign share over an arm's timed blocks' host records (None: none measured)."""
    shares = [float(r["foreign_share"]) for r in records if r and r.get("measurable")]
    return max(shares) if shares else None
