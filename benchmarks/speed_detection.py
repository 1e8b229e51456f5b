"""Does the history channel catch a 5% slower spec step, and leave a clean one alone? (issue 29 item 5)

Servers stay up across sessions (started by the caller, e.g.
examples/gpu/run_speed_h200.sh): BASE, CLEAN (a spec arm) and FAULTED (the
same spec arm launched with ``OBSERVATORY_FAULT=slow_step``: every spec step
delayed by OBSERVATORY_SLOW_STEP_FRACTION of its own median time,
observatory/faults/field_speed.py). Each session is

    observatory compare --arms base=BASE,ARM=CLEAN|FAULTED --timing paired --no-diffs
                        --channels history --repeat R --suite SUITE --db DB

in one database, so the spec arm has the same name every night and the fault
is hidden from the observatory (the served config is the same). The schedule
is a string of ``c`` (clean) and ``f`` (faulted), or of other letters each
naming a faulted server of its own (``--fault d=URL``: several hidden faults,
one a night, as on the CPU engine in benchmarks/README.md); the first MIN_NIGHTS
sessions must be clean (the history's baseline). Per session one JSON line is
appended to OUT/results.jsonl as it ends: the spec arm's S, its intervals
(ci: over probes; ci_suite: on this suite), tau, and the history verdict with
its details. ``count`` reads those lines back and prints the detection table.

    python benchmarks/speed_detection.py run --base URL --clean URL --faulted URL --arm mtp2 \\
        --model /tmp/scaled --suite probes/field.toml --schedule cccfcfcfcf --db D --out OUT --deadline-s 500
    python benchmarks/speed_detection.py run --launch --arm spec2 --k 2 --fault-env d=OBSERVATORY_FAULT=draft_noise \\
        --model observatory/field_model --schedule cccdc --db D --out OUT      # engines launched per session
    python benchmarks/speed_detection.py count OUT/results.jsonl [...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from observatory.model.vocabulary import FAIL, SETUP_ERROR, WARN

REPO = Path(__file__).resolve().parent.parent
MIN_NIGHTS = 3  # observatory.channels.history.MIN_NIGHTS: fewer earlier sessions and the verdict is SKIP


def history_verdict(arm: dict[str, Any]) -> dict[str, Any] | None:
    """The arm's history channel verdict from `show --json` (None: the channel did not judge the arm)."""
    for gate, v in (arm.get("channel_verdicts") or {}).items():
        if gate.split(":", 1)[0] == "history":
            return {"gate": gate, **v}
    return None


def arms_file(args: argparse.Namespace, i: int, kind: str) -> Path:
    """--launch: session I's arms file, the spec arm ARM with KIND's hidden fault in its environment only."""
    env = {} if kind == "c" else dict(kv.split("=", 1) for kv in launched(args)[kind].split(","))
    body = (f'[arms.{args.arm}]\nspeculative_config = {{ method = "mtp", num_speculative_tokens = {args.k} }}\n'
            + ("env = { " + ", ".join(f'{k} = "{v}"' for k, v in sorted(env.items())) + " }\n" if env else ""))
    path = args.out / f"arms-{i}.toml"
    path.write_text(body)
    return path


def launched(args: argparse.Namespace) -> dict[str, str]:
    """--launch: each fault letter's environment (``LETTER=VAR=VALUE,VAR=VALUE``)."""
    return _by_letter(args.fault_env, "--fault-env", "LETTER=VAR=VALUE[,VAR=VALUE]", lambda v: "=" in v)


def _by_letter(specs: list[str], flag: str, form: str, ok: Callable[[str], bool]) -> dict[str, str]:
    """FLAG's LETTER=VALUE specs as {letter: value}; a spec not of FORM (OK(value) false) stops the run."""
    out = {}
    for spec in specs:
        letter, sep, value = spec.partition("=")
        if not sep or len(letter) != 1 or letter == "c" or not ok(value):
            sys.exit(f"{flag} takes {form} (one letter other than c), got {spec!r}")
        out[letter] = value
    return out


def one_session(args: argparse.Namespace, i: int, kind: str) -> dict[str, Any]:
    """Run session I (KIND "c" or a fault's letter) and return its line."""
    if args.launch:  # the observatory launches both engines, the fault hidden in the spec arm's environment
        arms = ["--arms", f"base,{args.arm}", "--arms-file", str(arms_file(args, i, kind))]
    else:
        url = args.clean if kind == "c" else servers(args)[kind]
        arms = ["--arms", f"base={args.base},{args.arm}={url}"]
    argv = [sys.executable, "-m", "observatory", "compare", *arms,
            "--timing", "paired", "--no-diffs", "--channels", "history", "--repeat", str(args.repeat),
            "--model", args.model, "--suite", args.suite, "--db", args.db, "--log-dir", str(args.out / "logs"),
            "--quiet", *args.extra]
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    row: dict[str, Any] = {"session": i, "kind": "clean" if kind == "c" else "faulted", "rc": r.returncode,
                           "fault": None if kind == "c" else kind,
                           "wall_s": round(time.monotonic() - t0, 1)}
    shown = subprocess.run([sys.executable, "-m", "observatory", "show", "--db", args.db, "--json"], cwd=REPO,
                           capture_output=True, text=True, check=False)
    try:
        data = json.loads(shown.stdout)
    except json.JSONDecodeError:
        row["error"] = (r.stdout + r.stderr + shown.stderr)[-800:]
        return row
    row["id"] = data.get("id")
    row["verdict"] = data.get("verdict")
    for a in data.get("arms", []):
        if a.get("name") != args.arm:
            continue
        vb = a.get("vs_base") or {}
        row.update({k: vb.get(k) for k in ("S", "ci", "ci_suite", "design", "r", "c", "detectable_change")})
        row["timed_s"] = vb.get("timed_s")  # seconds of timed traffic per side (the target: at most 60 s an arm)
        step = vb.get("step") or {}
        row["S_step"] = step.get("S")
        row["step_ms"] = {"arm": step.get("arm_step_ms"), **(step.get("base_blocks_ms") or {})}
        row["tau"] = (a.get("acceptance") or {}).get("tau")
        row["tok_s"] = (a.get("speed") or {}).get("single_stream_tok_s")
        row["history"] = history_verdict(a)
    if "history" not in row:
        row["error"] = f"no arm {args.arm!r} in the session; stderr: {r.stderr[-500:]}"
    return row


def servers(args: argparse.Namespace) -> dict[str, str]:
    """The faulted servers by schedule letter: ``f`` is --faulted, the others each --fault LETTER=URL."""
    return {**({"f": args.faulted} if args.faulted else {}),
            **_by_letter(args.fault, "--fault", "LETTER=URL", bool)}


def run(args: argparse.Namespace) -> None:
    known = {"c", *(launched(args) if args.launch else servers(args))}
    if set(args.schedule) - known or set(args.schedule[:MIN_NIGHTS]) != {"c"}:
        sys.exit(f"--schedule is a string of {''.join(sorted(known))} whose first {MIN_NIGHTS} are c "
                 f"(the baseline), got {args.schedule!r}")
    args.out.mkdir(parents=True, exist_ok=True)
    done = 0
    results = args.out / "results.jsonl"
    if results.exists():  # resumed in a later call: continue the schedule
        done = sum(1 for line in results.read_text().splitlines() if line.strip())
    t0 = time.monotonic()
    for i, kind in enumerate(args.schedule):
        if i < done:
            continue
        if time.monotonic() - t0 > args.deadline_s:
            print(f"deadline: {i} of {len(args.schedule)} sessions done", flush=True)
            return
        row = one_session(args, i, kind)
        if row["rc"] == SETUP_ERROR:  # a server is down or the flags are wrong: no session was judged
            print(f"session {i}: setup error, stopping: {row.get('error', '')[-300:]}", flush=True)
            return
        with results.open("a") as f:
            f.write(json.dumps(row) + "\n")
        h = row.get("history") or {}
        print(f"{i} {row['kind']}: rc={row['rc']} S={row.get('S')} ci_suite={row.get('ci_suite')} "
              f"history={h.get('verdict')} wall={row['wall_s']} s", flush=True)


def count(paths: list[Path]) -> None:
    rows = [json.loads(line) for p in paths for line in p.read_text().splitlines() if line.strip()]
    judged = [r for r in rows if r["session"] >= MIN_NIGHTS]
    print("| session | kind | S | ci_suite | ci (over probes) | S_step | timed s (arm) | history |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        h = r.get("history") or {}
        ci, cs = r.get("ci") or [None, None], r.get("ci_suite") or [None, None]
        print(f"| {r['session']} | {r['kind']} | {_f(r.get('S'))} | [{_f(cs[0])}, {_f(cs[1])}] | "
              f"[{_f(ci[0])}, {_f(ci[1])}] | {_f(r.get('S_step'))} | {_f((r.get('timed_s') or {}).get('arm'))} | "
              f"{h.get('verdict', r.get('error', '-'))} |")
    for kind in ("faulted", "clean"):
        got = [r for r in judged if r["kind"] == kind]
        flagged = [r for r in got if (r.get("history") or {}).get("verdict") in (WARN, FAIL)]
        fails = [r for r in got if (r.get("history") or {}).get("verdict") == FAIL]
        print(f"{kind}: flagged {len(flagged)} of {len(got)} (FAIL {len(fails)})")
    letters = sorted({r.get("fault") for r in judged if r.get("fault") not in (None, "f")})
    for letter in letters:  # several faults in one schedule: each one's count, and what history said
        got = [r for r in judged if r.get("fault") == letter]
        said = "; ".join(f"{r['session']}: {(r.get('history') or {}).get('verdict')} "
                         f"{((r.get('history') or {}).get('reason') or '')[:60]}" for r in got)
        print(f"fault {letter}: {said}")
    for key, what in (("S", "S"), ("S_step", "S_step"), ("tok_s", "spec single-stream tok/s")):
        by = {k: [float(r[key]) for r in rows if r["kind"] == k and isinstance(r.get(key), (int, float))]
              for k in ("clean", "faulted")}
        if len(by["clean"]) >= 2 and by["faulted"]:
            mean, sd = statistics.fmean(by["clean"]), statistics.stdev(by["clean"])
            move = statistics.fmean(by["faulted"]) / mean - 1
            print(f"{what}: clean sessions n={len(by['clean'])} mean {mean:.4g}, between-session SD {sd:.3g} "
                  f"({sd / mean:.1%}), range {min(by['clean']):.4g}-{max(by['clean']):.4g}; faulted n="
                  f"{len(by['faulted'])} mean {move:+.1%} against clean")
    moves = [t["band"] for r in judged for t in ((r.get("history") or {}).get("details") or {}).get("table", [])
             if t.get("figure") == "S" and t.get("band") and t.get("median")]
    if moves:
        print("history's allowed S band: " + ", ".join(f"[{lo:.3f}, {hi:.3f}]" for lo, hi in moves))
    halves = [(r["ci_suite"][1] - r["ci_suite"][0]) / 2 / r["S"] for r in rows if r.get("ci_suite") and r.get("S")]
    if halves:
        print(f"ci_suite half-width / S: median {sorted(halves)[len(halves) // 2]:.4f}, max {max(halves):.4f}")
    timed = [float(t) for r in rows for t in (r.get("timed_s") or {}).values() if isinstance(t, (int, float))]
    if timed:
        print(f"timed traffic per arm and session: median {statistics.median(timed):.1f} s, max {max(timed):.1f} s")


def _f(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, (int, float)) else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--base", help="base's server (not with --launch)")
    r.add_argument("--clean", help="the clean spec server (not with --launch)")
    r.add_argument("--launch", action="store_true",
                   help="the observatory launches base and ARM every session (ARM's K: --k; faults: --fault-env)")
    r.add_argument("--k", type=int, default=2, help="--launch: ARM's num_speculative_tokens")
    r.add_argument("--fault-env", action="append", default=[], metavar="LETTER=VAR=VALUE[,VAR=VALUE]",
                   help="--launch: a fault's schedule letter and the environment that injects it")
    r.add_argument("--faulted", help="the faulted server of schedule letter f")
    r.add_argument("--fault", action="append", default=[], metavar="LETTER=URL",
                   help="another faulted server, its schedule letter (several faults, one a night)")
    r.add_argument("--arm", default="mtp2")
    r.add_argument("--model", required=True)
    r.add_argument("--suite", default="field")
    r.add_argument("--repeat", type=int, default=2)
    r.add_argument("--schedule", default="ccc" + "fc" * 10)  # issue 29 item 5: 10 faulted, 10 clean
    r.add_argument("--db", required=True)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--deadline-s", type=float, default=1e9, help="start no session after this many seconds")
    r.add_argument("extra", nargs="*", help="after --: more `compare` flags")
    c = sub.add_parser("count")
    c.add_argument("paths", nargs="+", type=Path)
    a = ap.parse_args()
    if a.cmd == "run":
        run(a)
    else:
        count(a.paths)


if __name__ == "__main__":
    main()
