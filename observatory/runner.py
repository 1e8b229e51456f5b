"""The runner: one session, arm after arm, every result stored as it arrives.

Data flows one way: runner -> store -> judge -> report. For each arm the
runner launches the engine (or uses the given URL), waits for readiness,
sends one warm-up request (stored, excluded from figures), then each probe
streamed with the spec counters read just before and after it, then each
probe again non-streamed and all probes at once in a concurrent batch (for
the stream/non-stream and alone/batch diffs), then the timed throughput
runs. The engine is stopped in ``finally``. A failing arm is stored with its
reason and log tail; the other arms still run. Ctrl-C or SIGTERM stops the
servers and stores the session as interrupted.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from observatory import __version__, lease
from observatory.arms import Arm
from observatory.client import EngineClient, request_params
from observatory.db import ArmRow, ProbeRow, SessionRow, utcnow
from observatory.errors import ObservatoryError
from observatory.evaluate import evaluate
from observatory.gpus import plan_waves
from observatory.images import inspect_image
from observatory.machine import describe
from observatory.measure import ArmCrashed, ArmRun
from observatory.probes import Probe
from observatory.roles import assign_roles
from observatory.server import (
    EngineProcess,
    EngineSettings,
    EngineStartError,
    arm_image_ref,
    engine_argv,
    engine_env,
    free_port,
    speculative_config_for,
)
from observatory.server_facts import host_facts, served_facts
from observatory.store import Store


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: stop servers, store the session as interrupted."""


class Reporter(Protocol):
    """What the runner tells the user about (the CLI draws it with rich)."""

    def session_started(self, session_id: int, arms: list[Arm], probes: list[Probe]) -> None: ...
    def arm_started(self, arm: Arm, what: str) -> None: ...
    def arm_waiting(self, arm: Arm, elapsed_s: float) -> None: ...
    def arm_ready(self, arm: Arm, ready_s: float, version: str | None) -> None: ...
    def step(self, arm: Arm, label: str, done: int, total: int) -> None: ...
    def arm_finished(self, arm: Arm, status: str, reason: str | None) -> None: ...


class NullReporter:
    """Says nothing (tests, --quiet)."""

    def session_started(self, session_id: int, arms: list[Arm], probes: list[Probe]) -> None:
        """-"""

    def arm_started(self, arm: Arm, what: str) -> None:
        """-"""

    def arm_waiting(self, arm: Arm, elapsed_s: float) -> None:
        """-"""

    def arm_ready(self, arm: Arm, ready_s: float, version: str | None) -> None:
        """-"""

    def step(self, arm: Arm, label: str, done: int, total: int) -> None:
        """-"""

    def arm_finished(self, arm: Arm, status: str, reason: str | None) -> None:
        """-"""


@dataclass
class CompareOptions:
    """Everything `observatory compare` decided before anything launches."""

    arms: list[Arm]
    settings: EngineSettings
    probes: list[Probe]
    suite: str
    log_dir: Path
    api_key: str | None = None
    concurrency: list[int] = field(default_factory=lambda: [1])
    repeat: int = 1
    request_timeout_s: float = 300.0
    diffs: bool = True
    command: list[str] = field(default_factory=list)
    engine: str = "vllm"
    gpu_count: int = 0
    gpus_per_arm: int = 1
    parallel_arms: bool = False
    # "sequential": timed runs one arm at a time; "concurrent": as the arms ran
    timing: str = "sequential"
    # the plan_compare() arguments, stored so `compare --resume` can rebuild this
    plan: dict[str, Any] = field(default_factory=dict)


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signal.Signals(signum).name}")


class Runner:
    """Runs one compare session into a store."""

    def __init__(self, store: Store, opts: CompareOptions, reporter: Reporter | None = None):
        self.store = store
        self.opts = opts
        self.reporter: Reporter = reporter or NullReporter()
        self.probe_ids: dict[str, int] = {}

    # -- session --------------------------------------------------------
    def create_session(self) -> int:
        """Store the session, its probes and its (pending) arms; return its id."""
        facts = describe()
        o = self.opts
        pid, host = lease.holder()
        row = self.store.add(
            SessionRow(
                host=facts["host"], machine=facts, gpu=", ".join(facts["gpus"]) or None,
                observatory_version=__version__, model=o.settings.model, image=o.settings.image,
                command=o.command, suite=o.suite, lease_pid=pid, lease_host=host, lease_at=utcnow(),
                options={"concurrency": o.concurrency, "repeat": o.repeat, "diffs": o.diffs, "plan": o.plan,
                         "engine": {k: v for k, v in vars(o.settings).items() if k != "env"}},
            )
        )
        for i, p in enumerate(o.probes):
            pr = self.store.add(ProbeRow(session_id=row.id, position=i, name=p.name, category=p.category,
                                         content_hash=p.content_hash, definition=p.to_dict(),
                                         params=_jsonable_params(request_params(p))))
            self.probe_ids[p.name] = pr.id
        return int(row.id)

    def attach(self, session_id: int) -> None:
        """Continue a stored session (--resume): its probes must be the ones planned now."""
        stored = {p.name: p for p in self.store.probes(session_id)}
        for p in self.opts.probes:
            row = stored.get(p.name)
            if row is None or row.content_hash != p.content_hash:
                raise ObservatoryError(
                    f"Cannot resume session {session_id}: probe {p.name!r} changed since it ran "
                    "(the suite file was edited). Start a new session instead."
                )
            self.probe_ids[p.name] = row.id
        self.store.take_lease(session_id)  # refuses a session another live process is running

    def run(self, session_id: int | None = None) -> int:
        """Run every arm, wave by wave; return the session id. Re-raises Interrupted after storing it."""
        if session_id is None:
            session_id = self.create_session()
        self.reporter.session_started(session_id, self.opts.arms, self.opts.probes)
        old = _install_sigterm()
        status, reason = "complete", None
        refresher = lease.Refresher(lambda: self.store.refresh_lease(session_id)).__enter__()
        try:
            existing = {a.name: a for a in self.store.arms(session_id)}
            waves = plan_waves(len(self.opts.arms), self.opts.gpu_count, self.opts.gpus_per_arm, self.opts.parallel_arms)
            for w, wave in enumerate(waves):
                todo = []
                for pos, gpus in wave:
                    arm = self.opts.arms[pos]
                    row = existing.get(arm.name)
                    if row is not None and row.status not in ("pending", "interrupted", "starting", "running"):
                        continue  # --resume: this arm already ran
                    todo.append((pos, arm, row, gpus))
                if todo:
                    self._run_wave(session_id, w, todo)
                    evaluate(self.store, session_id)
        except (Interrupted, KeyboardInterrupt) as e:
            status, reason = "interrupted", str(e) or "KeyboardInterrupt"
            raise
        except BaseException as e:
            status, reason = "failed", f"{type(e).__name__}: {e}"
            raise
        finally:
            _restore_sigterm(old)
            try:
                evaluate(self.store, session_id)
            finally:
                refresher.__exit__()
                self.store.finish_session(session_id, status, reason)
        return session_id

    # -- a wave of arms -------------------------------------------------
    def _run_wave(self, session_id: int, wave: int, todo: list[tuple[int, Arm, ArmRow | None, list[int] | None]]) -> None:
        """Launch and check the wave's arms together, time them, stop them.

        One arm is a wave of one. Arms of a wave run their correctness passes
        at once on disjoint GPUs; their timed runs follow one at a time with
        --timing sequential, or at once (and flagged) otherwise.
        """
        names = [arm.name for _, arm, _, _ in todo]
        runs: list[ArmRun] = []
        try:
            for pos, arm, row, gpus in todo:
                runs.append(self._new_run(session_id, pos, arm, row, gpus, wave, [n for n in names if n != arm.name]))
            def start_and_check(r: ArmRun) -> None:
                self._start(r, session_id)
                self._phase(r, r.correctness)

            self._each(runs, start_and_check)
            if self.opts.timing == "sequential" or len(runs) == 1:
                for r in runs:
                    self._phase(r, r.throughput)
            else:
                self._each(runs, lambda r: self._phase(r, r.throughput))
        except (Interrupted, KeyboardInterrupt):
            for r in runs:
                r.status, r.reason = "interrupted", "the observatory was interrupted during this arm"
            raise
        finally:
            for r in runs:
                self._finish(r)

    def _each(self, runs: list[ArmRun], fn: Any) -> None:
        if len(runs) == 1:
            fn(runs[0])
            return
        with ThreadPoolExecutor(max_workers=len(runs)) as ex:
            futures = [ex.submit(fn, r) for r in runs]
            try:
                for f in futures:
                    f.result()
            except BaseException:
                # stop every engine so the workers' requests fail fast and the pool drains
                for r in runs:
                    if r.proc is not None:
                        r.proc.stop(grace_s=5)
                raise

    def _new_run(self, session_id: int, pos: int, arm: Arm, row: ArmRow | None, gpus: list[int] | None,
                 wave: int, concurrent_with: list[str]) -> ArmRun:
        s = self.opts.settings
        launch: dict[str, Any] = {
            "speculative_config": speculative_config_for(arm, s),
            "engine_args": arm.engine_args, "fault": arm.fault, "copy_of": arm.copy_of, "url": arm.url,
            "gpus": gpus, "wave": wave, "concurrent_with": concurrent_with,
            "timing": self.opts.timing if concurrent_with else "alone", **host_facts(),
            "role": assign_roles(self.opts.arms)[arm.name],
        }
        values = dict(session_id=session_id, position=pos, name=arm.name, status="starting",
                      launch=launch, started_at=utcnow(), reason=None, log_tail=None)
        if row is None:
            row = self.store.add(ArmRow(**values))
        else:
            self.store.clear_arm(row.id)
            self.store.update(ArmRow, row.id, **values)
        return ArmRun(self, arm, int(row.id), gpus=gpus, extra={"launch": launch})

    def _start(self, r: ArmRun, session_id: int) -> None:
        """Launch (or reach) the arm's engine; on failure the run carries the reason."""
        arm = r.arm
        try:
            if arm.url:
                self.reporter.arm_started(arm, f"using {arm.url}")
                r.client = EngineClient(arm.url, api_key=self.opts.api_key, timeout=self.opts.request_timeout_s,
                                        engine=arm.engine if arm.engine != "vllm" else self.opts.engine)
                if not r.client.health():
                    raise EngineStartError(f"{arm.url}/health did not answer 200", "failed")
                ready_s = 0.0
            else:
                r.proc, r.client, ready_s = self._launch(r, session_id)
            version = r.client.version()
            r.extra["launch"]["served"] = served_facts(r.client)
            self.store.update(ArmRow, r.arm_id, status="running", ready_at=utcnow(), launch=dict(r.extra["launch"]),
                              engine_version=version, model=r.client.model())
            self.reporter.arm_ready(arm, ready_s, version)
        except EngineStartError as e:
            r.status, r.reason = e.status, str(e)
            self.store.update(ArmRow, r.arm_id, log_tail=e.log_tail or None)
        except ObservatoryError as e:
            r.status, r.reason = "failed", str(e)

    def _phase(self, r: ArmRun, fn: Any) -> None:
        """Run one measuring phase if the arm is still live; a crash ends the arm, not the session."""
        if not r.live:
            return
        try:
            fn()
        except ArmCrashed as e:
            r.status, r.reason = e.status, e.reason

    def _finish(self, r: ArmRun) -> None:
        if r.client is not None:
            r.client.close()
        if r.proc is not None:
            r.proc.stop()
            self.store.update(ArmRow, r.arm_id, log_tail=r.proc.log_tail())
        self.store.update(ArmRow, r.arm_id, status=r.status, reason=r.reason, finished_at=utcnow())
        self.reporter.arm_finished(r.arm, r.status, r.reason)

    def _launch(self, r: ArmRun, session_id: int) -> tuple[EngineProcess, EngineClient, float]:
        """Start the engine and wait until it is healthy; a port taken under us is retried."""
        arm, s, launch = r.arm, self.opts.settings, r.extra["launch"]
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in arm.name)
        log_path = self.opts.log_dir / f"session-{session_id}-{safe}.log"
        attempts = 3
        for attempt in range(1, attempts + 1):
            port = free_port()
            env = engine_env(arm, s)
            if r.gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in r.gpus)
            image = arm_image_ref(arm, s)  # docker hook (observatory.images): facts stored per arm
            container = f"observatory-{session_id}-{safe}-{port}" if image else None
            if image:
                launch["image"] = {**inspect_image(image).to_dict(), "asked": arm.image is not None}
            argv = engine_argv(arm, s, port, env, r.gpus, container)
            self.reporter.arm_started(arm, f"starting engine on port {port} (log: {log_path})")
            proc = EngineProcess(argv, env, log_path, container)
            r.proc = proc  # registered at once, so an interrupt can stop it
            proc.start()
            launch.update(argv=argv, env=env, port=port, pid=proc.pid)
            self.store.update(ArmRow, r.arm_id, launch=dict(launch), log_path=str(log_path))
            client = EngineClient(f"http://127.0.0.1:{port}", timeout=self.opts.request_timeout_s, engine=arm.engine)
            t0 = time.monotonic()
            try:
                proc.wait_ready(client.health, s.health_timeout_s, lambda e: self.reporter.arm_waiting(arm, e))
                return proc, client, time.monotonic() - t0
            except EngineStartError as e:
                client.close()
                proc.stop()
                if attempt < attempts and "address already in use" in e.log_tail.lower():
                    continue
                raise
            except BaseException:
                client.close()
                proc.stop()
                raise
        raise AssertionError("unreachable")  # pragma: no cover


def _jsonable_params(params: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items()}


def _install_sigterm() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupted)


def _restore_sigterm(old: Any) -> None:
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)


def interrupted_exit_code() -> int:
    """Exit status after an interruption (128 + SIGINT, like a shell)."""
    return 130 if sys.platform != "win32" else 1
