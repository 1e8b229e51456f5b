"""Facts about the machine a session runs on (stored with the session)."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from typing import Any


def _gpus() -> tuple[list[str], str | None]:
    if shutil.which("nvidia-smi") is None:
        return [], None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return [], None
    rows = [[x.strip() for x in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    return [r[0] for r in rows], (rows[0][1] if rows and len(rows[0]) > 1 else None)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def describe() -> dict[str, Any]:
    """Host, CPU, memory, GPUs and driver, Python and platform."""
    gpus, driver = _gpus()
    return {
        "host": socket.gethostname(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "gpus": gpus,
        "driver": driver,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
