"""GPU clocks and utilisation beside each timed block (issue 29 item 3), read with nvidia-smi.

`ClockSampler` polls ``nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,
utilization.gpu,temperature.gpu,power.draw`` for the arm's GPUs every
``INTERVAL_S`` while a timed block runs (one read as it starts, one as it
ends), and `record` is what the measurement row stores. Where nothing can be
read (no nvidia-smi, a CPU arm, a URL arm whose server's GPUs are not this
host's, nvidia-smi failing) the record says "not measurable" and why: never
an error, and the block is timed all the same.

`drift` judges one record: the SM clock's range over the samples taken while
the GPU was busy (``utilization.gpu`` above 0: an idle sample's clock says
nothing about the work) beyond ``SM_TOLERANCE`` of its highest value means
the block ran at more than one speed (docs/design.md section 4, "Steady state
before the clock": the tolerance is the +-2% precision target of issue 29).
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import Any

QUERY = "index,clocks.sm,clocks.mem,utilization.gpu,temperature.gpu,power.draw"
FIELDS = ("index", "sm_mhz", "mem_mhz", "util_pct", "temp_c", "power_w")
INTERVAL_S = 0.5
SM_TOLERANCE = 0.02
NOT_MEASURABLE_WHY = "not measurable"


def read_once(gpus: list[int], timeout_s: float = 5.0) -> list[list[float | None]] | str:
    """One nvidia-smi read of GPUS: [[seconds (monotonic), index, sm, mem, util, temp, power], ...], or why not."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "no nvidia-smi on this host"
    argv = [exe, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-i", ",".join(str(g) for g in gpus)]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=True).stdout
    except (subprocess.SubprocessError, OSError) as e:
        return f"nvidia-smi failed: {type(e).__name__}"
    now = time.monotonic()
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(FIELDS):
            continue
        rows.append([now, *(_number(c) for c in cells)])
    return rows or "nvidia-smi printed no GPU rows"


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


class ClockSampler:
    """Samples GPUS during one timed block (a context manager); `record` is the stored result.

    GPUS None (a CPU arm) or WHY_NOT set (a URL arm) records "not measurable" without running nvidia-smi.
    """

    def __init__(self, gpus: list[int] | None, why_not: str | None = None, interval_s: float = INTERVAL_S):
        self.gpus = gpus
        self.why = why_not or (None if gpus else "no GPU on this arm")
        self.interval_s = interval_s
        self.samples: list[list[float | None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def _take(self) -> None:
        assert self.gpus
        got = read_once(self.gpus)
        if isinstance(got, str):
            self.why = self.why or got
            self._stop.set()
            return
        self.samples.extend([[round(float(s[0] or 0.0) - self._t0, 3), *s[1:]] for s in got])

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._take()

    def __enter__(self) -> ClockSampler:
        self._t0 = time.monotonic()
        if self.why is None:
            self._take()
            if self.why is None:
                self._thread = threading.Thread(target=self._loop, name="gpu-clocks", daemon=True)
                self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            if not self.samples or self.why is None:
                self._take()

    def record(self) -> dict[str, Any]:
        """What the measurement row stores: the samples, or "not measurable" and why."""
        if not self.samples:
            return {"measurable": False, "why": f"{NOT_MEASURABLE_WHY}: {self.why or 'no sample taken'}"}
        return {"measurable": True, "gpus": self.gpus, "fields": ["t_s", *FIELDS], "samples": self.samples}


def drift(record: dict[str, Any] | None) -> dict[str, Any]:
    """Per-block summary of a `ClockSampler.record`: each metric's min/median/max over busy samples, whether the
    SM clock moved beyond SM_TOLERANCE; ``measurable`` False (with why) where nothing was read."""
    if not record or not record.get("measurable"):
        return {"measurable": False, "why": (record or {}).get("why") or f"{NOT_MEASURABLE_WHY}: not recorded "
                "(a session from before this version)"}
    samples = [s for s in record.get("samples") or [] if isinstance(s, list) and len(s) == len(FIELDS) + 1]
    busy = [s for s in samples if (s[4] or 0) > 0]
    out: dict[str, Any] = {"measurable": True, "samples": len(samples), "busy_samples": len(busy),
                           "tolerance": SM_TOLERANCE}
    for k, name in enumerate(FIELDS[1:], start=2):
        vals = sorted(float(v) for s in busy if (v := s[k]) is not None)
        out[name] = ({"min": vals[0], "median": vals[len(vals) // 2], "max": vals[-1]} if vals else None)
    ranges = []  # each GPU's own SM clock range (GPUs of one arm may hold different clocks)
    for gpu in sorted({s[1] for s in busy}, key=lambda g: -1 if g is None else g):
        sm = [float(v) for s in busy if s[1] == gpu and (v := s[2]) is not None]
        if sm and max(sm) > 0:
            ranges.append((max(sm) - min(sm)) / max(sm))
    if not ranges:
        return {**out, "moved": None, "why": "no sample with the GPU busy: the clocks under load were not seen"}
    return {**out, "sm_range": max(ranges), "moved": max(ranges) > SM_TOLERANCE}
