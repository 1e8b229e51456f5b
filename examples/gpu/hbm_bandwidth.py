"""Measure the GPU's memory bandwidth the way a decode step uses it, in the same call.

A device-to-device copy of a large bf16 tensor, timed with CUDA events after
warm-ups; bytes moved = bytes read + bytes written. Prints one JSON line.
"""

from __future__ import annotations

import json

import torch


def main(gib: float = 4.0, iters: int = 20) -> None:
    n = int(gib * 2**30) // 2
    x = torch.empty(n, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        y.copy_(x)
    end.record()
    torch.cuda.synchronize()
    secs = start.elapsed_time(end) / 1000.0 / iters
    moved = 2 * x.numel() * x.element_size()
    print(json.dumps({"device": torch.cuda.get_device_name(), "bytes_per_copy": moved, "seconds": secs,
                      "bandwidth_bytes_per_s": moved / secs}))


if __name__ == "__main__":
    main()
