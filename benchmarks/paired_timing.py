"""Sequential against paired timing: the spread of S between sessions, beside the intervals they state.

Runs N sessions of each design, interleaved (sequential, paired, sequential,
...), of the same arms on the same engine, and prints per session S and its
stated 95% interval, then per design the mean stated half-width against the
standard deviation of S actually seen between sessions. A design whose
sessions disagree by more than their intervals say is blind to drift.

    python benchmarks/paired_timing.py --sessions 3 --arms base,mtp1 --repeat 2 --out /tmp/paired

Each session is `observatory compare ... --timing DESIGN --no-diffs` in its
own database under OUT; figures come from `show --json`. Results are written
as they come (OUT/results.jsonl), so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_session(out: Path, design: str, i: int, arms: str, repeat: int, extra: list[str]) -> dict[str, object]:
    d = out / f"{design}-{i}"
    d.mkdir(parents=True, exist_ok=True)
    db = d / "runs.db"
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "observatory", "compare", "--arms", arms, "--timing", design,
                        "--no-diffs", "--repeat", str(repeat), "--db", str(db), "--log-dir", str(d / "logs"),
                        "--quiet", *extra], cwd=REPO, capture_output=True, text=True, check=False)
    shown = subprocess.run([sys.executable, "-m", "observatory", "show", "--db", str(db), "--json"], cwd=REPO,
                           capture_output=True, text=True, check=False)
    row: dict[str, object] = {"design": design, "session": i, "rc": r.returncode, "wall_s": time.monotonic() - t0}
    try:
        data = json.loads(shown.stdout)
    except json.JSONDecodeError:
        row["error"] = (r.stdout + r.stderr)[-500:]
        return row
    for a in data["arms"]:
        vb = a.get("vs_base")
        if vb:
            row[a["name"]] = {"S": vb.get("S"), "ci": vb.get("ci"), "unpaired": (vb.get("unpaired") or {}).get("S")}
    return row


def summary(rows: list[dict[str, object]], arm: str) -> None:
    for design in ("sequential", "paired"):
        got = [r[arm] for r in rows if r["design"] == design and isinstance(r.get(arm), dict)]
        s = [float(g["S"]) for g in got if g.get("S") is not None]  # type: ignore[index, arg-type]
        halves = [(float(g["ci"][1]) - float(g["ci"][0])) / 2 for g in got if g.get("ci")]  # type: ignore[index]
        if len(s) < 2:
            print(f"{arm} {design}: {len(s)} sessions with S: spread not measurable")
            continue
        print(f"{arm} {design}: S {', '.join(f'{x:.3f}' for x in s)}; between-session SD {statistics.stdev(s):.3f} "
              f"(x1.96 = {1.96 * statistics.stdev(s):.3f}) vs mean stated half-width "
              f"{statistics.mean(halves) if halves else float('nan'):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--arms", default="base,mtp1")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("extra", nargs="*", help="more compare flags, after --")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, object]] = []
    with (a.out / "results.jsonl").open("a") as log:
        for i in range(a.sessions):
            for design in ("sequential", "paired"):
                row = one_session(a.out, design, i, a.arms, a.repeat, a.extra)
                rows.append(row)
                log.write(json.dumps(row) + "\n")
                log.flush()
                print(json.dumps(row), flush=True)
    for arm in a.arms.split(","):
        if arm != "base":
            summary(rows, arm)


if __name__ == "__main__":
    main()
