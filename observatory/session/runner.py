"""The runner: one session, arm after arm, every result stored as it arrives.

Data flows one way: runner -> store -> judge -> report; the runner never
judges (the command runs `observatory.commands.evaluate` after each wave through
``on_wave_done``, and once more at the end). For each arm the
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

import dataclasses
import functools
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from observatory import __version__
from observatory.channels import channels_for
from observatory.client.send import EngineClient, request_params
from observatory.engines.adapter import adapter_for
from observatory.engines.arm_engines import arm_engine
from observatory.engines.cuda_graphs import from_log_file
from observatory.engines.gpus import plan_waves
from observatory.engines.images import inspect_image
from observatory.engines.machine import describe
from observatory.engines.server import (
    EngineProcess,
    EngineStartError,
    arm_image_ref,
)
from observatory.engines.server_facts import host_facts, served_facts
from observatory.engines.settings import speculative_config_for
from observatory.judge.cross_engine import PROMPT_IDS
from observatory.model.arms import DEFAULT_ENGINE, Arm
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe
from observatory.model.roles import assign_roles
from observatory.model.vocabulary import BASE
from observatory.session.launch import RunningEngine, launch
from observatory.session.measure import ArmCrashed, ArmRun
from observatory.session.options import CompareOptions
from observatory.session.plan import BASE_BESIDE
from observatory.session.prompt_tokens import engines_of, prompt_ids
from observatory.store import lease
from observatory.store.clock import utcnow
from observatory.store.db import ArmRow, ProbeRow, SessionRow
from observatory.store.session_store import Store
from observatory.store.storage_failure import StorageFailed, guarded, mark_interrupted
from observatory.store.storage_failure import problem as storage_problem

# arm statuses --resume runs again (any other status: the arm ran to its end, and is not launched again)
RESUMED_STATUSES = frozenset({"pending", "interrupted", "starting", "running"})


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


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(f"signal {signal.Signals(signum).name}")


class Runner:
    """Runs one compare session into a store."""

    def __init__(self, store: Store, opts: CompareOptions, reporter: Reporter | None = None,
                 on_wave_done: Callable[[int], None] | None = None):
        self.store = store
        self.opts = opts
        self.reporter: Reporter = reporter or NullReporter()
        self._partners: dict[str, ArmRun] = {}  # engine -> its base run kept up (--timing bracketed, paired)
        self.probe_ids: dict[str, int] = {}
        # called with the session id after each wave (the command judges there: verdicts stored as arms finish)
        self.on_wave_done = on_wave_done

    def engine_of(self, arm: Arm) -> str:
        """The engine ARM runs on: its own (an ``ENGINE:NAME`` arm's), else the session's --engine (what its URL
        serves)."""
        return arm_engine(arm, self.opts.plan.engine)

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
                options={"concurrency": o.plan.levels, "repeat": o.plan.repeat, "diffs": o.plan.diffs, "plan": o.plan.to_stored(),
                         "channels": list(o.channels), "timing": {"design": o.timing, "note": o.timing_note},
                         "engine": {k: v for k, v in vars(o.settings).items() if k != "env"}},
            )
        )
        sent_to = self._params_engine()

        def store_probes() -> None:
            for i, p in enumerate(o.all_probes()):
                pr = self.store.add(ProbeRow(session_id=row.id, position=i, name=p.name, category=p.category,
                                             content_hash=p.content_hash, definition=p.to_dict(),
                                             params=request_params(p, sent_to)))
                self.probe_ids[p.name] = pr.id

        guarded(self.store, int(row.id), store_probes)  # a storage failure now still marks the session
        return int(row.id)

    def _params_engine(self) -> str:
        """The engine whose form of the params is stored: an engine may ask for its ids by other flags (its
        adapter's ``request_params``); a session on several engines stores the default engine's (their bodies
        differ only in those)."""
        engines = {self.engine_of(a) for a in self.opts.arms}
        return engines.pop() if len(engines) == 1 else DEFAULT_ENGINE

    def attach(self, session_id: int) -> None:
        """Continue a stored session (--resume): its probes must be the ones planned now."""
        stored = {p.name: p for p in self.store.probes(session_id)}
        # a session cut short while its probes were being stored (a full disk) ran none of them: the rest
        # are stored now (nothing measured depends on them), so --resume goes on
        unran = not any(self.store.results(a.id) for a in self.store.arms(session_id))
        sent_to = self._params_engine()
        for i, p in enumerate(self.opts.all_probes()):
            row = stored.get(p.name)
            if row is None and unran:
                row = self.store.add(ProbeRow(session_id=session_id, position=i, name=p.name, category=p.category,
                                              content_hash=p.content_hash, definition=p.to_dict(),
                                              params=request_params(p, sent_to)))
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
        old = install_sigterm()
        status, reason, marked = "complete", None, False
        refresher = lease.Refresher(lambda: self.store.refresh_lease(session_id)).__enter__()
        try:
            existing = {a.name: a for a in self.store.arms(session_id)}
            waves = plan_waves(len(self.opts.arms), self.opts.gpu_count, self.opts.plan.gpus_per_arm, self.opts.plan.parallel_arms)
            for w, wave in enumerate(waves):
                todo = []
                for pos, gpus in wave:
                    arm = self.opts.arms[pos]
                    row = existing.get(arm.name)
                    if row is not None and row.status not in RESUMED_STATUSES:
                        continue  # --resume: this arm already ran
                    todo.append((pos, arm, row, gpus))
                if todo:
                    self._run_wave(session_id, w, todo)
                    if self.on_wave_done is not None:
                        self.on_wave_done(session_id)
        except (Interrupted, KeyboardInterrupt) as e:
            status, reason = "interrupted", str(e) or "KeyboardInterrupt"
            raise
        except BaseException as e:
            why = storage_problem(e)
            if why is None:
                status, reason = "failed", f"{type(e).__name__}: {e}"
                raise
            status, reason, marked = "interrupted", f"storage failed ({why})", True
            raise StorageFailed(mark_interrupted(self.store, session_id, reason)) from e
        finally:
            restore_sigterm(old)
            try:
                self._stop_partners()
                refresher.__exit__()
            finally:
                if not marked:  # (a storage failure marked it already, as far as the database let it)
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
                self._phase(r, r.run_channels)

            self._each(runs, start_and_check)
            if self.opts.timing in BASE_BESIDE:
                for r in runs:
                    self._phase(r, functools.partial(r.throughput, self._partner_for(r), self.opts.timing))
            elif self.opts.timing == "sequential" or len(runs) == 1:
                for r in runs:
                    self._phase(r, r.throughput)
            else:
                self._each(runs, lambda r: self._phase(r, r.throughput))
        except (Interrupted, KeyboardInterrupt):
            for r in runs:
                r.status, r.reason = "interrupted", "the observatory was interrupted during this arm"
            raise
        except BaseException as e:
            # the observatory itself failed (not the engine: that is ArmCrashed, in `_phase`): an arm left
            # "ok" here would read as finished and --resume would skip it, its channels half run
            for r in runs:
                if r.status == "ok":
                    r.status, r.reason = "interrupted", f"the observatory failed during this arm: {type(e).__name__}: {e}"
            raise
        finally:
            # every arm's engine is stopped, even when storing one arm's end fails (a full disk)
            failed: list[Exception] = []
            for r in runs:
                if self._keeps(r):
                    self._partners[self.engine_of(r.arm)] = r  # stopped at the session's end (`_stop_partners`)
                    continue
                try:
                    self._finish(r)
                except Exception as e:
                    failed.append(e)
            if failed:
                raise failed[0]

    # -- --timing bracketed or paired: base's server kept up beside the spec arms -------
    def _keeps(self, r: ArmRun) -> bool:
        """Whether R is a base arm whose server stays up for later spec arms of its engine (--timing bracketed,
        paired)."""
        if self.opts.timing not in BASE_BESIDE or r.extra["launch"]["role"] != BASE or not r.live or r.client is None:
            return False
        engine = self.engine_of(r.arm)
        if engine in self._partners:
            return False
        later = self.opts.arms[self.opts.arms.index(r.arm) + 1:]
        return any(a.is_spec and self.engine_of(a) == engine for a in later)

    def _partner_for(self, r: ArmRun) -> ArmRun | None:
        """The live base run R's single-stream timing alternates with, if any."""
        partner = self._partners.get(self.engine_of(r.arm))
        return partner if partner is not None and partner.live and r.arm.is_spec else None

    def _stop_partners(self) -> None:
        """Stop the base servers kept up for pairing; every one is stopped even if storing one's end fails."""
        failed: list[Exception] = []
        for r in list(self._partners.values()):
            try:
                self._finish(r)
            except Exception as e:
                failed.append(e)
        self._partners.clear()
        if failed:
            raise failed[0]

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
        facts: dict[str, Any] = {
            "speculative_config": speculative_config_for(arm, s),
            "engine_args": arm.engine_args, "fault": arm.fault, "copy_of": arm.copy_of, "url": arm.url,
            "stream_interval": arm.stream_interval,
            "gpus": gpus, "wave": wave, "concurrent_with": concurrent_with,
            "timing": self.opts.timing if concurrent_with else self._timing_alone(arm), **host_facts(),
            "role": assign_roles(self.opts.arms)[arm.name],
            "engine": self.engine_of(arm),
            "deployed": arm.deployed,
            "model": s.model,  # as the session was given it (a path or a name): what a sibling may swap
        }
        values = dict(session_id=session_id, position=pos, name=arm.name, status="starting", role=facts["role"],
                      engine=facts["engine"], launch=facts, started_at=utcnow(), reason=None, log_tail=None)
        if row is None:
            row = self.store.add(ArmRow(**values))
        else:
            self.store.clear_arm(row.id)
            self.store.update(ArmRow, row.id, **values)
        o = self.opts
        return ArmRun(arm, int(row.id), self.store, self.probe_ids, o.probes, self.reporter, plan=o.plan, gpus=gpus,
                      extra={"launch": facts}, channels=channels_for(arm.stream_interval, o.channels),
                      channel_probes=o.channel_probes,
                      relauncher=None if arm.url else functools.partial(self._relaunch, session_id, gpus))

    def _timing_alone(self, arm: Arm) -> str:
        """How an arm that runs alone is timed: "paired with" or "bracketed by" its engine's live base (--timing
        paired, bracketed), else "alone"."""
        partner = self._partners.get(self.engine_of(arm))
        if arm.is_spec and partner is not None and partner.live:
            return f"{'bracketed by' if self.opts.timing == 'bracketed' else 'paired with'} {partner.arm.name}"
        return "alone"

    def _start(self, r: ArmRun, session_id: int) -> None:
        """Launch (or reach) the arm's engine; on failure the run carries the reason."""
        arm = r.arm
        try:
            if arm.url:
                self.reporter.arm_started(arm, f"using {arm.url}")
                r.client = EngineClient(arm.url, api_key=self.opts.api_key, timeout=self.opts.plan.request_timeout,
                                        engine=self.engine_of(arm))
                if not r.client.health():
                    raise EngineStartError(f"{arm.url}/health did not answer 200", "failed", kind="unhealthy")
                ready_s = 0.0
            else:
                r.proc, r.client, ready_s = self._launch(r, session_id)
            version = r.client.version()
            r.extra["launch"]["served"] = served_facts(r.client)
            if r.proc is not None and r.gpus and getattr(adapter_for(self.engine_of(arm)), "logs_cuda_graphs", False):
                # the CUDA graphs it captured, from its log's config line (observatory.judge.graph_coverage)
                r.extra["launch"]["cuda_graphs"] = from_log_file(r.proc.log_path)
            if r.extra["launch"]["role"] == BASE and len(engines_of(self.opts.arms)) > 1:  # session/prompt_tokens.py
                r.extra["launch"][PROMPT_IDS] = prompt_ids(r.client.base_url, r.extra["launch"]["engine"],
                                                           r.client.model(), self.opts.probes, self.opts.api_key)
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
        if r.client is not None and r.status == "ok":
            # a served model that changed under the arm makes its results another model's (issue 32 item 3)
            change = r.client.model_change()
            if change is not None:
                r.status, r.reason = "failed", change
        if r.client is not None:
            r.client.close()
        if r.proc is not None:
            r.proc.stop()
        self.store.update(ArmRow, r.arm_id, status=r.status, reason=r.reason, finished_at=utcnow(),
                          **({"log_tail": r.proc.log_tail()} if r.proc is not None else {}))
        self.reporter.arm_finished(r.arm, r.status, r.reason)

    def _launch(self, r: ArmRun, session_id: int) -> tuple[EngineProcess, EngineClient, float]:
        """Start the engine through `observatory.session.launch.launch`, recording how as soon as it runs."""
        arm, s, facts = r.arm, self.opts.settings, r.extra["launch"]
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in arm.name)
        log_path = Path(self.opts.plan.log_dir) / f"session-{session_id}-{safe}.log"
        image = arm_image_ref(arm, s)  # docker hook (observatory.engines.images): facts stored per arm
        if image:
            facts["image"] = {**inspect_image(image).to_dict(), "asked": arm.image is not None}

        def started(proc: EngineProcess, port: int) -> None:
            self.reporter.arm_started(arm, f"starting engine on port {port} (log: {log_path})")
            r.proc = proc  # registered at once, so an interrupt can stop it
            facts.update(argv=proc.argv, env=proc.env, port=port, pid=proc.pid)
            self.store.update(ArmRow, r.arm_id, launch=dict(facts), log_path=str(log_path))

        eng = launch(arm, s, r.gpus, log_path, request_timeout_s=self.opts.plan.request_timeout, on_start=started,
                     on_wait=lambda e: self.reporter.arm_waiting(arm, e),
                     container_prefix=f"observatory-{session_id}-{safe}")
        return eng.proc, eng.client, eng.ready_s


    def _relaunch(self, session_id: int, gpus: list[int] | None, arm: Arm, why: str,
                  model: str | None = None) -> RunningEngine:
        """A second engine of ARM (a channel's engine condition, `ArmRun.sibling`) serving MODEL (None: the
        session's), healthy; its own log."""
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{arm.name}-{why}")
        log_path = Path(self.opts.plan.log_dir) / f"session-{session_id}-{safe}.log"
        self.reporter.step(arm, f"{why}: starting a second engine (log: {log_path})", 0, 1)
        settings = self.opts.settings if model is None else dataclasses.replace(self.opts.settings, model=model)
        return launch(arm, settings, gpus, log_path, request_timeout_s=self.opts.plan.request_timeout,
                      container_prefix=f"observatory-{session_id}-{safe}")


def install_sigterm() -> Any:
    """SIGTERM raises `Interrupted` (so a killed session or triage stops its servers and stores why); the old
    handler, or None off the main thread (where Python sets no handlers)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_interrupted)


def restore_sigterm(old: Any) -> None:
    """Put back the handler `install_sigterm` replaced."""
    if old is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, old)
