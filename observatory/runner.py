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

from observatory import __version__
from observatory.arms import Arm
from observatory.client import EngineClient, Response, request_params
from observatory.errors import ObservatoryError
from observatory.db import ArmRow, MeasurementRow, ProbeRow, ResultRow, SessionRow, utcnow
from observatory.evaluate import evaluate
from observatory.machine import describe
from observatory.metrics import SpecCounters
from observatory.probes import Probe
from observatory.server import (
    EngineProcess,
    EngineSettings,
    EngineStartError,
    engine_argv,
    engine_env,
    free_port,
    speculative_config_for,
)
from observatory.store import Store, storable


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
    # the plan_compare() arguments, stored so `compare --resume` can rebuild this
    plan: dict[str, Any] = field(default_factory=dict)


class ArmCrashed(Exception):
    """The engine died or stopped answering mid-arm."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


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
        row = self.store.add(
            SessionRow(
                host=facts["host"], machine=facts, gpu=", ".join(facts["gpus"]) or None,
                observatory_version=__version__, model=o.settings.model, image=o.settings.image,
                command=o.command, suite=o.suite,
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
        self.store.update(SessionRow, session_id, status="running", finished_at=None, reason=None)

    def run(self, session_id: int | None = None) -> int:
        """Run every arm; return the session id. Re-raises Interrupted after storing it."""
        if session_id is None:
            session_id = self.create_session()
        self.reporter.session_started(session_id, self.opts.arms, self.opts.probes)
        old = _install_sigterm()
        status, reason = "complete", None
        try:
            existing = {a.name: a for a in self.store.arms(session_id)}
            for pos, arm in enumerate(self.opts.arms):
                row = existing.get(arm.name)
                if row is not None and row.status not in ("pending", "interrupted", "starting", "running"):
                    continue  # --resume: this arm already ran
                self._run_arm(session_id, pos, arm, row)
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
                self.store.finish_session(session_id, status, reason)
        return session_id

    # -- one arm --------------------------------------------------------
    def _run_arm(self, session_id: int, pos: int, arm: Arm, row: ArmRow | None) -> None:
        s = self.opts.settings
        launch: dict[str, Any] = {
            "speculative_config": speculative_config_for(arm, s),
            "engine_args": arm.engine_args, "fault": arm.fault, "copy_of": arm.copy_of, "url": arm.url,
        }
        values = dict(session_id=session_id, position=pos, name=arm.name, status="starting",
                      launch=launch, started_at=utcnow())
        if row is None:
            row = self.store.add(ArmRow(**values))
        else:
            self.store.clear_arm(row.id)
            self.store.update(ArmRow, row.id, **values)
        arm_id = int(row.id)
        proc: EngineProcess | None = None
        status, reason = "ok", None
        try:
            client: EngineClient
            if arm.url:
                self.reporter.arm_started(arm, f"using {arm.url}")
                client = EngineClient(arm.url, api_key=self.opts.api_key, timeout=self.opts.request_timeout_s)
                if not client.health():
                    client.close()
                    raise EngineStartError(f"{arm.url}/health did not answer 200", "failed")
                ready_s = 0.0
            else:
                proc, client, ready_s = self._launch(arm, arm_id, session_id, launch)
            try:
                version = client.version()
                self.store.update(ArmRow, arm_id, status="running", ready_at=utcnow(),
                                  engine_version=version, model=client.model())
                self.reporter.arm_ready(arm, ready_s, version)
                self._measure(arm, arm_id, client, proc)
            finally:
                client.close()
        except EngineStartError as e:
            status, reason = e.status, str(e)
            self.store.update(ArmRow, arm_id, log_tail=e.log_tail or (proc.log_tail() if proc else None))
        except ArmCrashed as e:
            status, reason = e.status, e.reason
        except (Interrupted, KeyboardInterrupt):
            status, reason = "interrupted", "the observatory was interrupted during this arm"
            raise
        finally:
            if proc is not None:
                proc.stop()
                self.store.update(ArmRow, arm_id, log_tail=proc.log_tail())
            self.store.update(ArmRow, arm_id, status=status, reason=reason, finished_at=utcnow())
            self.reporter.arm_finished(arm, status, reason)

    def _launch(self, arm: Arm, arm_id: int, session_id: int,
                launch: dict[str, Any]) -> tuple[EngineProcess, EngineClient, float]:
        """Start the engine and wait until it is healthy; a port taken under us is retried."""
        s = self.opts.settings
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in arm.name)
        log_path = self.opts.log_dir / f"session-{session_id}-{safe}.log"
        attempts = 3
        for attempt in range(1, attempts + 1):
            port = free_port()
            argv = engine_argv(arm, s, port)
            env = engine_env(arm, s)
            self.reporter.arm_started(arm, f"starting engine on port {port} (log: {log_path})")
            proc = EngineProcess(argv, env, log_path)
            proc.start()
            launch.update(argv=argv, env=env, port=port, pid=proc.pid)
            self.store.update(ArmRow, arm_id, launch=dict(launch), log_path=str(log_path))
            client = EngineClient(f"http://127.0.0.1:{port}", timeout=self.opts.request_timeout_s)
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

    def _check_alive(self, proc: EngineProcess | None, client: EngineClient, resp: Response | None,
                     error: str | None = None) -> None:
        """After a failed request: is the engine dead (CRASHED), silent (HUNG), or just refusing this one?"""
        if resp is not None and resp.ok:
            return
        error = error or (resp.error if resp else None)
        if "Timeout" in (error or ""):
            # A request past --request-timeout is a hang even while /health
            # still answers (a stuck engine core often leaves the API server up).
            if proc is not None and proc.exit_code() is not None:
                raise ArmCrashed("crashed", f"engine exited with status {proc.exit_code()} mid-run: {error}")
            raise ArmCrashed("hung", f"engine stopped answering within the request timeout: {error}")
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if proc is not None and proc.exit_code() is not None:
                raise ArmCrashed("crashed", f"engine exited with status {proc.exit_code()} mid-run: {error}")
            if client.health():
                return  # alive: a per-request error, stored with the result
            time.sleep(1.0)
        if proc is not None and proc.exit_code() is not None:
            raise ArmCrashed("crashed", f"engine exited with status {proc.exit_code()} mid-run: {error}")
        raise ArmCrashed("hung", f"engine stopped answering /health after: {error}")

    def _counters(self, proc: EngineProcess | None, client: EngineClient) -> SpecCounters:
        try:
            return client.counters()
        except ObservatoryError as e:
            self._check_alive(proc, client, None, str(e))
            raise ArmCrashed("crashed", str(e)) from None

    def _store_result(self, arm_id: int, probe: Probe, resp: Response, mode: str,
                      delta: SpecCounters | None = None, repeat: int = 0, concurrency: int = 1) -> ResultRow:
        text = storable(resp.text)
        return self.store.add(ResultRow(
            arm_id=arm_id, probe_id=self.probe_ids[probe.name], mode=mode, repeat=repeat,
            ok=resp.ok, error=storable(resp.error), text=text, content=storable(resp.content),
            text_raw=[ord(c) for c in resp.text] if text != resp.text else None,
            token_ids=resp.token_ids, token_texts=storable(resp.token_texts), top_logprobs=resp.top_logprobs,
            tool_calls=storable(resp.tool_calls), finish_reason=resp.finish_reason, usage=storable(resp.usage),
            ttft_ms=resp.ttft_ms, duration_ms=resp.duration_ms, chunks=resp.chunks,
            counters_delta=delta.to_dict() if delta else {}, concurrency=concurrency,
        ))

    def _measure(self, arm: Arm, arm_id: int, client: EngineClient, proc: EngineProcess | None) -> None:
        probes = self.opts.probes
        # Warm-up: stored, never counted (first request pays compile/caches).
        resp = client.run(probes[0], stream=True)
        self._store_result(arm_id, probes[0], resp, "warmup")
        self._check_alive(proc, client, resp)
        total = SpecCounters()
        for i, probe in enumerate(probes):
            self.reporter.step(arm, "probes", i, len(probes))
            before = self._counters(proc, client)
            resp = client.run(probe, stream=True)
            if not resp.ok:
                self._store_result(arm_id, probe, resp, "stream")
                self._check_alive(proc, client, resp)
                continue
            delta = self._counters(proc, client) - before
            total = total + delta
            self._store_result(arm_id, probe, resp, "stream", delta)
        self.reporter.step(arm, "probes", len(probes), len(probes))
        self.store.update(ArmRow, arm_id, counters=total.to_dict())
        if self.opts.diffs:
            for i, probe in enumerate(probes):
                self.reporter.step(arm, "non-streamed", i, len(probes))
                resp = client.run(probe, stream=False)
                self._store_result(arm_id, probe, resp, "nonstream")
                self._check_alive(proc, client, resp)
            self.reporter.step(arm, "concurrent batch", 0, 1)
            with ThreadPoolExecutor(max_workers=len(probes)) as ex:
                resps = list(ex.map(lambda p: client.run(p, stream=True), probes))
            for probe, resp in zip(probes, resps):
                self._store_result(arm_id, probe, resp, "batch", concurrency=len(probes))
                self._check_alive(proc, client, resp)
        self._throughput(arm, arm_id, client, proc)

    def _throughput(self, arm: Arm, arm_id: int, client: EngineClient, proc: EngineProcess | None) -> None:
        probes = self.opts.probes
        for level in self.opts.concurrency:
            for rep in range(self.opts.repeat):
                self.reporter.step(arm, f"timed c={level}", rep, self.opts.repeat)
                # Each level sends `level` copies of every probe, `level` at a time.
                work = [p for p in probes for _ in range(level)]
                before = self._counters(proc, client)
                t0 = time.perf_counter()
                with ThreadPoolExecutor(max_workers=level) as ex:
                    resps = list(ex.map(lambda p: client.run(p, stream=True), work))
                wall = time.perf_counter() - t0
                delta = self._counters(proc, client) - before
                for probe, resp in zip(work, resps):
                    self._store_result(arm_id, probe, resp, "timed", repeat=rep, concurrency=level)
                    self._check_alive(proc, client, resp)
                self.store.add(MeasurementRow(
                    arm_id=arm_id, concurrency=level, repeat=rep, requests=len(work),
                    completion_tokens=sum(len(r.token_ids) for r in resps), wall_s=wall,
                    counters_delta=delta.to_dict(),
                ))


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
