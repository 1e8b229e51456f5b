#!/usr/bin/env python
"""How long `observatory` takes to answer simple commands, each in a fresh interpreter (target: under 0.5 s).

    python benchmarks/cli_startup.py [--runs 5]

Runs ``python -m observatory --version``, ``gates list`` and ``--help`` RUNS
times each with this interpreter and prints the median and worst wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = (["--version"], ["gates", "list"], ["--help"])


def time_command(args: list[str], runs: int) -> list[float]:
    """Wall seconds of RUNS fresh `python -m observatory ARGS` processes."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "observatory", *args], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args(argv)
    for args in COMMANDS:
        t = time_command(args, a.runs)
        print(f"observatory {' '.join(args):12s} median {statistics.median(t):.2f} s, worst {max(t):.2f} s")


if __name__ == "__main__":
    main()
