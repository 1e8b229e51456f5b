"""GPUs on one host: how many, and which arms run at once on which of them.

`plan_waves` gives each arm a disjoint set of `per_arm` GPUs and groups arms
into waves that run concurrently; without `parallel`, every arm is its own
wave (and gets the first `per_arm` GPUs). `OBSERVATORY_GPU_COUNT` overrides
detection (tests use it to plan for a host they do not have).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from observatory.model.errors import ObservatoryError

# NVLink multicast stays off in every environment we start: on shared hosts a
# program that uses it can put the GPUs out of service (device README).
NO_MULTICAST_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def gpu_count() -> int:
    """GPUs visible on this host."""
    forced = os.environ.get("OBSERVATORY_GPU_COUNT")
    if forced is not None:
        try:
            return max(0, int(forced))
        except ValueError:
            raise ObservatoryError(f"OBSERVATORY_GPU_COUNT={forced!r} is not a number") from None
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def plan_waves(n_arms: int, n_gpus: int, per_arm: int, parallel: bool) -> list[list[tuple[int, list[int] | None]]]:
    """Waves of (arm index, its GPU ids or None) in run order."""
    if per_arm < 1:
        raise ObservatoryError("--gpus-per-arm must be at least 1")
    if n_gpus == 0:
        if parallel:
            raise ObservatoryError("--parallel-arms needs GPUs to split between arms; this host has none")
        return [[(i, None)] for i in range(n_arms)]
    if per_arm > n_gpus:
        raise ObservatoryError(f"--gpus-per-arm {per_arm} but this host has {n_gpus} GPU(s)")
    if not parallel:
        return [[(i, list(range(per_arm)))] for i in range(n_arms)]
    slots = n_gpus // per_arm
    waves: list[list[tuple[int, list[int] | None]]] = []
    for start in range(0, n_arms, slots):
        waves.append([(i, list(range(j * per_arm, (j + 1) * per_arm)))
                      for j, i in enumerate(range(start, min(start + slots, n_arms)))])
    return waves
