#!/usr/bin/env python
"""An instrument that keeps up (issue 48 item 4): the observatory's own CPU per request of the volume replay, and
storing and judging 10,000 requests per arm.

Two parts, both against the observatory's own code, never an engine:

1. **client** (`--client-requests`, default 2000): the volume channel's traffic (the field suite planned by
   `observatory.channels.volume_traffic`) sent by `observatory.channels.volume.measure` through the real
   `EngineClient` and stored through the real `ArmRun.store_result` into a fresh SQLite, against
   `benchmarks/pacing_stub.py` (a STUB server that paces tokens: it measures the client, not an engine; its
   teacher-forced answers carry no prompt logprobs, so forcing costs one short request each). CPU per request:
   ``process_time`` of this process (every client thread) over the traffic, the storing share by the main
   thread's ``thread_time`` around each store.
2. **judge** (`--requests`, default 10000 per arm): a session of base, base#2 and mtp1, each with that many
   answers of the planned traffic (token ids as long as each request's max_tokens, per-request counters on
   mtp1) and a teacher-forced row per distinct answer, written through the store (the write time per row);
   then the volume and speculates channels' judges timed (``process_time``), and the database's size.

    python benchmarks/volume_costs.py [--requests 10000] [--client-requests 2000] [--out result.json]

Prints one JSON object; docs/channels.md ("volume") and the README quote it, with the engine's own time per
request from a real CPU session beside it (the share of judging).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from observatory.channels import speculates, volume, volume_traffic  # noqa: E402
from observatory.channels.view import ChannelView  # noqa: E402
from observatory.client.send import EngineClient  # noqa: E402
from observatory.model.arms import Arm  # noqa: E402
from observatory.model.gates import default_registry  # noqa: E402
from observatory.model.paths import PROBES_DIR  # noqa: E402
from observatory.model.probes import Probe, load_probe_file  # noqa: E402
from observatory.session.measure import ArmRun  # noqa: E402
from observatory.session.options import SessionPlan  # noqa: E402
from observatory.session.runner import NullReporter  # noqa: E402
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow  # noqa: E402
from observatory.store.session_store import Store  # noqa: E402


def _session(store: Store, probes: list[Probe], arms: list[tuple[str, int | None, str | None]]) -> tuple[int, dict[str, ArmRow], dict[str, int]]:
    s = store.add(SessionRow(host="bench", model="field", observatory_version="0", command=[], suite="field",
                             options={"channels": ["volume", "speculates"]}, status="complete"))
    pids = {}
    for i, p in enumerate(probes):
        pids[p.name] = store.add(ProbeRow(session_id=s.id, position=i, name=p.name, category=p.category,
                                          content_hash=p.content_hash, definition=p.to_dict(), params={})).id
    rows = {}
    for pos, (name, k, copy_of) in enumerate(arms):
        launch = {"speculative_config": {"method": "mtp", "num_speculative_tokens": k} if k else None,
                  "argv": [], "env": {}, "copy_of": copy_of}
        rows[name] = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", model="field",
                                      launch=launch))
    return s.id, rows, pids


def client_part(n: int, work: Path) -> dict[str, Any]:
    """The volume traffic through the real client and store against the pacing stub: CPU per request."""
    proc = subprocess.Popen([sys.executable, str(HERE / "pacing_stub.py"), "--rate", "20000"], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    try:
        probes = volume_traffic.plan(load_probe_file(PROBES_DIR / "field.toml"), n)
        store = Store(str(work / "client.db"))
        _, arms, pids = _session(store, probes, [("mtp1", 1, None)])
        client = EngineClient(url, timeout=60)
        run = ArmRun(arm=Arm("mtp1", {"method": "mtp", "num_speculative_tokens": 1}), arm_id=arms["mtp1"].id,
                     store=store, probe_ids=pids, probes=[], reporter=NullReporter(), plan=SessionPlan(arms="mtp1"),
                     client=client)
        stored = [0.0]
        inner = run.store_result

        def timed_store(*a: Any, **k: Any) -> Any:
            t = time.thread_time()
            try:
                return inner(*a, **k)
            finally:
                stored[0] += time.thread_time() - t

        run.store_result = timed_store  # type: ignore[method-assign]
        c0, w0 = time.process_time(), time.perf_counter()
        volume.measure(run, probes)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        facts = run.extra.get("launch", {}).get("channel_facts", {}).get("volume", {})
        sent = volume_traffic.sends(probes)
        return {"requests": sent, "forced": facts.get("forced"), "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                "cpu_ms_per_request": round(1000 * cpu / sent, 2),
                "store_cpu_ms_per_row": round(1000 * stored[0] / (sent + (facts.get("forced") or 0)), 3),
                "note": "stub server (pacing_stub.py, 20000 tok/s per stream): the client's own cost"}
    finally:
        proc.terminate()
        proc.wait(10)


def judge_part(n: int, work: Path) -> dict[str, Any]:
    """A session of three arms x N answers of the planned traffic, written and then judged."""
    rnd = random.Random(48)
    probes = volume_traffic.plan(load_probe_file(PROBES_DIR / "field.toml"), n)
    db = work / "judge.db"
    store = Store(str(db))
    sid, arms, pids = _session(store, probes, [("base", None, None), ("base#2", None, "base"), ("mtp1", 1, None)])
    answers = {p.name: [rnd.randrange(4096) for _ in range(p.max_tokens)] for p in probes}
    rows = 0
    t0 = time.process_time()
    for name, arm in arms.items():
        spec = name == "mtp1"
        for p in probes:
            ids = answers[p.name]
            for copy in range(int(p.meta["copies"])):
                rc = ({"drafts": len(ids) // 2, "draft_tokens": len(ids) // 2, "accepted": len(ids) // 4,
                       "accepted_per_pos": [len(ids) // 4]} if spec else None)
                store.add(ResultRow(arm_id=arm.id, probe_id=pids[p.name], mode="volume", repeat=copy, ok=True,
                                    text="x" * len(ids), content="x" * len(ids), token_ids=ids,
                                    token_texts=["x"] * len(ids), logprobs=[-0.5] * len(ids),
                                    finish_reason="length", usage={"completion_tokens": len(ids),
                                                                   "prompt_tokens": 60},
                                    concurrency=int(p.meta["concurrency"]), request_counters=rc,
                                    duration_ms=400.0, ttft_ms=40.0))
                rows += 1
            store.add(ResultRow(arm_id=arm.id, probe_id=pids[p.name], mode="volume", repeat=-1, ok=True, text="",
                                token_ids=ids, top_logprobs=[[[t, -0.1], [t + 1, -2.0]] for t in ids],
                                concurrency=0))
            rows += 1
    write_s = time.process_time() - t0
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}  # stored with each arm (observatory.store.arm_facts)
    view = ChannelView(store, sid, "volume", all_arms, roles, {pids[p.name]: p for p in probes}, default_registry())
    t1 = time.process_time()
    verdicts = volume.judge(view)
    judge_s = time.process_time() - t1
    t2 = time.process_time()
    spec_verdicts = speculates.judge(ChannelView(store, sid, "speculates", all_arms, roles, {}, default_registry()))
    spec_s = time.process_time() - t2
    sent = volume_traffic.sends(probes)
    return {"requests_per_arm": sent, "arms": len(arms), "rows_written": rows,
            "write_cpu_s": round(write_s, 2), "write_cpu_ms_per_row": round(1000 * write_s / rows, 3),
            "volume_judge_cpu_s": round(judge_s, 2), "speculates_judge_cpu_s": round(spec_s, 2),
            "judge_cpu_ms_per_request": round(1000 * (judge_s + spec_s) / (sent * len(arms)), 3),
            "db_mb": round(db.stat().st_size / 1e6, 1),
            "verdicts": {f"{v.gate}@{v.arm_id}": v.verdict for v in verdicts + spec_verdicts}}


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000, help="answers per arm in the judged session")
    ap.add_argument("--client-requests", type=int, default=2000, help="requests sent through the client (0: skip)")
    ap.add_argument("--out", help="write the result here too")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        out = {"client": client_part(a.client_requests, Path(d)) if a.client_requests else None,
               "judge": judge_part(a.requests, Path(d))}
    text = json.dumps(out, indent=2)
    print(text)
    if a.out:
        Path(a.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
