#!/usr/bin/env python
"""End to end: `observatory compare --arms base=URL --concurrency 64 --no-diffs` against the pacing stub.

Starts `benchmarks/pacing_stub.py` (RATE tok/s per stream, on an absolute
schedule), runs the real CLI in a fresh process against it RUNS times, and
prints the throughput each session stored at the level (the runner's own
figure: usage tokens of the timed batch / its wall time, `observatory.client.batch`)
against what the stub offers (LEVEL x RATE), with the load average at the
start of each run: the machine is shared, and its load moves the figure.

    python benchmarks/compare_throughput.py [--runs 3] [--level 64] [--rate 100]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from client_throughput import start_stub, stop_stub

REPO = Path(__file__).resolve().parent.parent


def one_run(url: str, level: int, db: Path, log_dir: Path) -> tuple[int, float]:
    """(tokens, wall seconds) of the timed batch at LEVEL stored by one `compare` against URL."""
    cmd = [sys.executable, "-m", "observatory", "compare", "--arms", f"base={url}", "--concurrency", str(level),
           "--no-diffs", "--db", str(db), "--log-dir", str(log_dir),
           "--suite", "default"]  # the suite its figures were measured with (a URL arm alone now runs generic)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    # 1: a probe FAILed on the stub's text; 2: the stub is a lone base, INVALID (compare exits as gate does):
    # neither is what is measured
    if done.returncode not in (0, 1, 2):
        raise SystemExit(f"compare exited {done.returncode}: {done.stderr[-2000:]}")
    c = sqlite3.connect(db)
    try:
        row = c.execute("SELECT completion_tokens, wall_s FROM measurements WHERE concurrency = ?", (level,)).fetchone()
    finally:
        c.close()
    if row is None:
        raise SystemExit(f"no measurement at concurrency {level} in {db}")
    return int(row[0]), float(row[1])


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--level", type=int, default=64, help="--concurrency of the compare")
    p.add_argument("--rate", type=float, default=100.0, help="tok/s the stub offers per stream")
    a = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="compare-throughput-"))
    proc, url = start_stub(a.rate)
    offered = a.level * a.rate
    try:
        for i in range(a.runs):
            load = os.getloadavg()[0]
            tokens, wall = one_run(url, a.level, work / f"run{i}.db", work / "logs")
            got = tokens / wall
            print(f"run {i + 1}: {tokens} tokens in {wall:.3f} s = {got:.0f} tok/s = {got / offered:.1%} of "
                  f"{offered:g} offered (load average {load:.2f})", flush=True)
    finally:
        stop_stub(proc)


if __name__ == "__main__":
    main()
