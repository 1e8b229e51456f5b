"""Triage's experiment: relaunch the arm under one change, replay its failing requests, judge them.

The replay sends what the session sent around each failure (DESIGN.md
mistake 6: same requests, same order): the warm-up request (the session's
first probe), then each failing probe alone, streamed or not as it failed;
and for a failure seen inside the concurrent batch, the whole batch of the
session's probes at once. Each failing probe's output is judged against
base's stored output with the session's ``token_diff`` gate. An engine that
does not start, or a request that errors, makes the run INVALID (not
measurable), never a PASS.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from observatory.client.answer import Response
from observatory.client.send import EngineClient
from observatory.engines.knobs import apply_change, candidate_values, knobs_for, not_applicable, platform_of
from observatory.engines.server import EngineStartError
from observatory.judge.apply_gates import to_output
from observatory.model.errors import ObservatoryError
from observatory.model.gates import Output
from observatory.model.vocabulary import FAIL, INVALID, PASS, WARN, worst
from observatory.session.depths import deployed_depth
from observatory.session.launch import launch
from observatory.session.runner import Interrupted, install_sigterm, restore_sigterm
from observatory.store.db import TriageRow
from observatory.store.session_store import Store
from observatory.triage import store as triage_store
from observatory.triage.search import TriageRun, knob_names, narrow
from observatory.triage.source import Target


def replay(client: EngineClient, target: Target) -> dict[str, Response]:
    """Send the failing requests in the session's order; return each failing probe's response."""
    by_name = {p.name: p for p in target.probes}
    client.run(target.probes[0], stream=True)  # the session's warm-up (it fills caches; prefix caching sees it)
    got: dict[str, Response] = {}
    for f in target.failures:
        if f.channel != "batch":
            got[f.probe] = client.run(by_name[f.probe], stream=f.channel == "stream")
    if any(f.channel == "batch" for f in target.failures):
        probes = target.probes
        with ThreadPoolExecutor(max_workers=len(probes)) as ex:
            resps = list(ex.map(lambda p: client.run(p, stream=True), probes))
        for p, r in zip(probes, resps):
            if any(f.probe == p.name and f.channel == "batch" for f in target.failures):
                got[p.name] = r
    return got


def judge_replay(target: Target, got: dict[str, Response]) -> tuple[str, int | None, dict[str, Any]]:
    """(verdict, first divergence, per-probe details) of one replay against base's stored outputs."""
    by_name = {p.name: p for p in target.probes}
    per: list[dict[str, Any]] = []
    for f in target.failures:
        r = got.get(f.probe)
        if r is None or not r.ok:
            per.append({"probe": f.probe, "channel": f.channel, "verdict": INVALID,
                        "reason": (r.error if r else "not sent") or "", "first_divergence": None})
            continue
        out = Output(text=r.text, token_ids=list(r.token_ids), finish_reason=r.finish_reason)
        res = target.gate.check(out, to_output(target.references[f.probe]), by_name[f.probe])
        d = res.details or {}
        per.append({"probe": f.probe, "channel": f.channel, "verdict": res.verdict, "reason": res.reason,
                    "first_divergence": d.get("position"), "margin": d.get("margin"),
                    "token_ids": list(r.token_ids), "text": r.text})
    verdicts = [p["verdict"] for p in per]
    # the one order (observatory.model.vocabulary): a failure seen outranks a request that could not be judged
    verdict = worst(v for v in verdicts if v in (INVALID, FAIL, WARN)) or PASS
    positions = [p["first_divergence"] for p in per if p.get("first_divergence") is not None]
    return verdict, (min(positions) if positions else None), {"probes": per}


class EngineCheck:
    """The experiment of `observatory.triage.search.narrow`, on a real engine: launch, replay, judge, stop."""

    def __init__(self, target: Target, log_dir: Path, label: str, request_timeout_s: float = 300.0,
                 on_wait: Any = None, on_start: Any = None):
        self.target, self.log_dir, self.label = target, log_dir, label
        self.request_timeout_s = request_timeout_s
        self.on_wait, self.on_start = on_wait, on_start
        self.n = 0

    def __call__(self, change: dict[str, Any]) -> TriageRun:
        """Run the arm with CHANGE and judge its failing probes."""
        self.n += 1
        t = self.target
        arm, settings = apply_change(t.arm, t.settings, change, t.engine)
        log_path = self.log_dir / f"{self.label}-run{self.n}.log"
        t0 = time.monotonic()
        if self.on_start:
            self.on_start(change, log_path)
        try:
            with launch(arm, settings, t.gpus, log_path, request_timeout_s=self.request_timeout_s,
                        on_wait=self.on_wait) as eng:
                version = eng.client.version()
                got = replay(eng.client, t)
                argv = eng.argv
        except EngineStartError as e:
            return TriageRun(change, INVALID, None, f"the engine did not start: {e}",
                             {"log_tail": e.log_tail[-2000:]}, str(log_path), time.monotonic() - t0)
        verdict, pos, details = judge_replay(t, got)
        reason = "; ".join(f"{p['probe']}: {p['reason']}" for p in details["probes"] if p.get("reason"))
        details.update(argv=argv, engine_version=version)
        return TriageRun(change, verdict, pos, reason, details, str(log_path), time.monotonic() - t0)


def plan_changes(target: Target, only: list[str] | None = None) -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """(the single changes to try, in order; {knob: why not} for the knobs that cannot be tried here)."""
    knobs = knobs_for(target.engine)
    if only:
        unknown = sorted(set(only) - {k.name for k in knobs})
        if unknown:
            raise ObservatoryError(f"Unknown knob(s) {', '.join(unknown)}; {target.engine} knobs: "
                                   f"{', '.join(k.name for k in knobs)}.")
        knobs = [k for k in knobs if k.name in only]
    platforms = platform_of(target.gpu_count)
    deployed_k = deployed_depth((target.session.options or {}).get("plan"), target.engine)
    singles: list[tuple[str, Any]] = []
    skipped: dict[str, str] = {}
    for k in knobs:
        why = not_applicable(k, target.arm, target.settings, platforms, deployed_k)
        if why:
            skipped[k.name] = why
        else:
            singles += [(k.name, v) for v in candidate_values(k, target.arm, target.settings, deployed_k)]
    return singles, skipped


class Progress:
    """Where triage tells the user what it does (the command prints it; tests stay silent)."""

    def line(self, text: str) -> None:
        """One progress line."""


def run_triage(store: Store, target: Target, log_dir: Path, max_runs: int, knobs: list[str] | None = None,
               resume: bool = False, progress: Progress | None = None,
               request_timeout_s: float = 300.0) -> dict[str, Any]:
    """Triage TARGET within MAX_RUNS launches, storing every run; return the `triage --json` object.

    Ctrl-C or SIGTERM stops the engine (in ``finally``), stores the triage as
    interrupted and re-raises; ``resume=True`` continues the latest unfinished
    triage of the arm, reusing its runs.
    """
    say = progress or Progress()
    singles, skipped = plan_changes(target, knobs)
    failures = [{"probe": f.probe, "channel": f.channel, "verdict": f.verdict,
                 "first_divergence": f.first_divergence, "margin": f.margin} for f in target.failures]
    sid, arm = int(target.session.id), target.arm_row.name
    old = triage_store.resumable(store, sid, arm) if resume else None
    if resume and old is None:
        raise ObservatoryError(f"Session {sid} has no unfinished triage of arm {arm} to resume; "
                               "run it without --resume.")
    if old is not None:
        tid = int(old.id)
        store.update(TriageRow, tid, status="running", finished_at=None, reason=None)
        done = triage_store.done_runs(store, tid)
        say.line(f"resuming triage {tid}: {len(done)} run(s) already made")
    else:
        tid = triage_store.start(store, sid, arm, failures, {"max_runs": max_runs, "knobs": [k for k, _ in singles],
                                                             "not_applicable": skipped})
        done = {}
    say.line(f"triage {tid}: session {sid}, arm {arm}, {len(target.failures)} failing probe(s): "
             + ", ".join(f"{f.probe} ({f.channel}, token {f.first_divergence})" for f in target.failures))
    for k, why in skipped.items():
        say.line(f"  not tried: {k} ({why})")

    def started(change: dict[str, Any], log_path: Path) -> None:
        say.line(f"  run: {knob_names(change)} (log: {log_path})")

    def ran(r: TriageRun, n: int, budget: int) -> None:
        triage_store.add_run(store, tid, r)
        at = f" at token {r.first_divergence}" if r.first_divergence is not None else ""
        say.line(f"  [{n}/{budget}] {knob_names(r.change)}: {r.verdict}{at} ({r.duration_s or 0:.0f} s)")

    check = EngineCheck(target, log_dir, f"triage-{tid}", request_timeout_s, on_start=started)
    old_handler = install_sigterm()
    try:
        outcome = narrow(check, singles, max_runs, skipped, done, ran)
    except (KeyboardInterrupt, Interrupted) as e:
        triage_store.finish(store, tid, "interrupted", None, str(e) or "KeyboardInterrupt")
        raise
    except BaseException as e:
        triage_store.finish(store, tid, "failed", None, f"{type(e).__name__}: {e}")
        raise
    finally:
        restore_sigterm(old_handler)
    triage_store.finish(store, tid, "complete", outcome)
    say.line(f"triage {tid}: {outcome.summary}")
    return triage_store.get(store, tid)
