"""What is measured on one running arm: correctness passes, then timed runs.

`ArmRun` holds one arm's live engine (process handle and client) and writes
each result to the store as it arrives, with the spec counters read just
before and after every streamed probe. A failed request is stored with its
error; an engine that died or stopped answering raises `ArmCrashed`.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observatory.channels import get as get_channel
from observatory.channels.live_arm import StepReporter
from observatory.client.answer import MAX_COUNT, Response
from observatory.client.batch import timed_batch
from observatory.client.send import EngineClient, RequestFailed
from observatory.engines.gpu_clocks import ClockSampler
from observatory.engines.host_load import HostLoad
from observatory.engines.metrics import SpecCounters
from observatory.engines.server import EngineProcess, EngineStartError
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe
from observatory.model.vocabulary import BRACKET_BASE, PAIRED_BASE
from observatory.session.options import SessionPlan
from observatory.store.db import ArmRow, MeasurementRow, ResultRow
from observatory.store.session_store import Store, storable

if TYPE_CHECKING:  # pragma: no cover
    from observatory.session.launch import RunningEngine

REFERENCE_MODES = ("stream", "nonstream")
# (the arm with a channel's extra flags and environment, why, the model it serves: None for the session's) -> its
# second engine, healthy (the runner's)
Relauncher = Callable[[Arm, str, "str | None"], "RunningEngine"]


# seconds between a base block and a spec block (`ArmRun.bracketed_blocks`): an idle engine's threads may spin
# for a while after its last request (OpenMP's default block time is 200 ms), which would slow the other's first
BLOCK_PAUSE_S = 0.3
# restarts of one arm's engine after it died mid-channel (`ArmRun.restart`): past this the arm ends, crashed
MAX_RESTARTS = 2


class ArmCrashed(Exception):
    """The engine died or stopped answering mid-arm."""

    def __init__(self, status: str, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class ArmRun:
    """One arm with a live engine, between launch and stop: everything it measures with, given explicitly."""

    arm: Arm
    arm_id: int
    store: Store
    probe_ids: dict[str, int]  # probe name -> stored probe id
    probes: list[Probe]
    reporter: StepReporter
    # what the session was asked for: its diffs (the non-streamed and concurrent-batch passes), the timed
    # passes' levels and repeats are read from it
    plan: SessionPlan
    proc: EngineProcess | None = None
    client: EngineClient | None = None
    status: str = "ok"
    reason: str | None = None
    gpus: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # field channels (observatory.channels) in the order they run, each with its own probes
    channels: list[str] = field(default_factory=list)
    channel_probes: dict[str, list[Probe]] = field(default_factory=dict)
    # launches a second engine of this arm for a channel's engine condition (`sibling`); None: a URL arm
    relauncher: Relauncher | None = None

    @property
    def live(self) -> bool:
        """Whether the arm is still fit to measure."""
        return self.status == "ok" and self.client is not None

    # -- failures ------------------------------------------------------
    def check_alive(self, resp: Response | None, error: str | None = None, kind: str | None = None) -> None:
        """After a failed request: is the engine dead (CRASHED), silent (HUNG), or refusing just this one?

        KIND is the failure's Response.error_kind (taken from RESP when not given).
        """
        if resp is not None and resp.ok:
            return
        kind = kind or (resp.error_kind if resp else None)
        if kind == "not_reported":
            return  # it answered, without what the request needs (`NotReported`): alive, nothing to wait for
        assert self.client is not None
        proc = self.proc
        error = error or (resp.error if resp else None)
        if kind == "timeout":
            # A request past --request-timeout is a hang even while /health
            # still answers (a stuck engine core often leaves the API server up).
            if proc is not None and proc.exit_code() is not None:
                raise ArmCrashed("crashed", f"engine exited with status {proc.exit_code()} mid-run: {error}")
            raise ArmCrashed("hung", f"engine stopped answering within the request timeout: {error}")
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            if proc is not None and proc.exit_code() is not None:
                raise ArmCrashed("crashed", f"engine exited with status {proc.exit_code()} mid-run: {error}")
            if self.client.health():
                return  # alive: a per-request error, stored with the result
            time.sleep(1.0)
        if proc is not None and proc.exit_code() is not None:
            raise ArmCrashed("crashed", f"engine exited with status {proc.exit_code()} mid-run: {error}")
        raise ArmCrashed("hung", f"engine stopped answering /health after: {error}")

    def counters(self) -> SpecCounters:
        """Cumulative spec counters, or ArmCrashed if the engine is gone."""
        assert self.client is not None
        try:
            return self.client.counters()
        except ObservatoryError as e:
            self.check_alive(None, str(e), e.kind if isinstance(e, RequestFailed) else None)
            raise ArmCrashed("crashed", str(e)) from None

    # -- storage -------------------------------------------------------
    def store_result(self, probe: Probe, resp: Response, mode: str, delta: SpecCounters | None = None,
                     repeat: int = 0, concurrency: int = 1, keep_top: bool = True) -> ResultRow:
        """Write one response (made storable; the exact text kept as code points if needed)."""
        text = storable(resp.text)
        row: ResultRow = self.store.add(ResultRow(
            arm_id=self.arm_id, probe_id=self.probe_ids[probe.name], mode=mode, repeat=repeat,
            ok=resp.ok, error=storable(resp.error), text=text, content=storable(resp.content),
            reasoning=storable(resp.reasoning),
            text_raw=[ord(c) for c in resp.text] if text != resp.text else None,
            token_ids=resp.token_ids, token_texts=storable(resp.token_texts),
            # Top-k logprobs are kept only where a result can be a diff's reference (its margins):
            # the streamed result, the non-streamed one where the stream carried too few ids to be
            # the reference (judge.full_sequence), and a channel's (it diffs its own against base's).
            # Warm-up and batch outputs are only ever compared.
            top_logprobs=resp.top_logprobs if (mode in REFERENCE_MODES and keep_top) or probe.channel else [],
            # the emitted tokens' own logprobs: kept where the top-k is, and on every streamed result (the
            # per-answer identities, gates/answer_fields.py, count them on every arm)
            logprobs=[lp if math.isfinite(lp) else None for lp in resp.logprobs]
            if (mode in REFERENCE_MODES and keep_top) or mode == "stream" or probe.channel else [],
            stop_reason=storable(resp.stop_reason),
            tool_calls=storable(resp.tool_calls), finish_reason=resp.finish_reason, usage=storable(resp.usage),
            ttft_ms=resp.ttft_ms, duration_ms=resp.duration_ms, chunks=resp.chunks,
            counters_delta=delta.to_dict() if delta else {}, concurrency=concurrency,
            sdk=storable(resp.sdk),
            request_counters=resp.request_counters.to_dict() if resp.request_counters is not None else None,
        ))
        return row

    # -- engine conditions (observatory.channels.live_arm.LiveArm.sibling) --
    def note(self, channel: str, **facts: Any) -> None:
        """Keep FACTS for CHANNEL's judge in the arm's launch facts (``channel_facts``), stored at once."""
        launch = self.extra.setdefault("launch", {})
        launch.setdefault("channel_facts", {}).setdefault(channel, {}).update(facts)
        self.store.update(ArmRow, self.arm_id, launch=dict(launch))

    def launch_facts(self) -> Mapping[str, Any]:
        """How this arm was launched, as stored (model, argv, env, role, ...: see LiveArm)."""
        return dict(self.extra.get("launch") or {})

    @contextmanager
    def sibling(self, why: str, engine_args: Sequence[str] = (),
                env: Mapping[str, str] | None = None, model: str | None = None,
                reasoning_parser: str | None = None) -> Iterator[ArmRun | None]:
        """A second engine of this arm with ENGINE_ARGS and ENV added, serving MODEL (None: the session's) with
        REASONING_PARSER (None: the arm's own), while the block runs (see LiveArm).

        Its results are stored on this arm; an engine that dies under the
        block ends the block (noted), never this arm. Both engines are up
        while it runs: the sibling is stopped before the arm's timed runs.
        """
        asked: dict[str, Any] = {"engine_args": list(engine_args), "env": dict(env or {})}
        if model is not None:
            asked["model"] = model
        if reasoning_parser is not None:
            asked["reasoning_parser"] = reasoning_parser
        if self.relauncher is None:
            why_not = ("the arm is a server the observatory did not start" if self.arm.url
                       else "this run cannot launch engines")
            self.note(why, sibling={**asked, "launched": False, "reason": why_not})
            yield None
            return
        arm = dataclasses.replace(self.arm, engine_args=[*self.arm.engine_args, *engine_args],
                                  env={**self.arm.env, **(env or {})},
                                  reasoning_parser=reasoning_parser or self.arm.reasoning_parser)
        try:
            eng = self.relauncher(arm, why, model)
        except EngineStartError as e:
            self.note(why, sibling={**asked, "launched": False, "reason": f"its launch failed: {e}"})
            yield None
            return
        facts = {**asked, "launched": True, "argv": list(eng.argv), "env": dict(eng.env),
                 "ready_s": round(eng.ready_s, 1), "log_path": str(eng.log_path)}
        self.note(why, sibling=facts)
        twin = dataclasses.replace(self, proc=eng.proc, client=eng.client, status="ok", reason=None,
                                   relauncher=None)
        try:
            yield twin
        except ArmCrashed as e:
            self.note(why, sibling={**facts, "ended": f"{e.status}: {e.reason}", "cause": eng.proc.fatal_error()})
        finally:
            eng.stop()

    def restart(self, where: str, died: ArmCrashed) -> bool:
        """After the engine died (or hung) in WHERE: a fresh engine of this arm in its place, so one crashing
        request does not cost the arm's later phases (nothing lost on a crash). The death is kept in the arm's
        launch facts (``restarts``: where, why, the old log's tail, the new log) and judged as a finding
        (observatory.judge.session: ``engine_restart``). False where no engine can be launched (a URL arm), the
        arm restarted `MAX_RESTARTS` times already, or the new engine did not come up: the arm then ends."""
        launch = self.extra.setdefault("launch", {})
        restarts = launch.setdefault("restarts", [])
        if self.relauncher is None or len(restarts) >= MAX_RESTARTS:
            return False
        entry: dict[str, Any] = {"where": where, "status": died.status, "reason": died.reason[:2000],
                                 "cause": self.proc.fatal_error() if self.proc is not None else None,
                                 "log_tail": (self.proc.log_tail() or "")[-2000:] if self.proc is not None else None}
        if self.proc is not None:
            self.proc.stop()
        if self.client is not None:
            self.client.close()
        self.reporter.step(self.arm, f"{where}: engine {died.status}; restarting it", 0, 1)
        try:
            eng = self.relauncher(self.arm, f"restart-{len(restarts) + 1}", None)
        except EngineStartError as e:
            restarts.append({**entry, "restarted": False, "why_not": str(e)[:2000]})
            self.store.update(ArmRow, self.arm_id, launch=dict(launch))
            return False
        self.proc, self.client = eng.proc, eng.client
        restarts.append({**entry, "restarted": True, "ready_s": round(eng.ready_s, 1), "log_path": str(eng.log_path)})
        self.store.update(ArmRow, self.arm_id, launch=dict(launch))
        return True

    # -- phases --------------------------------------------------------
    def correctness(self) -> None:
        """Warm-up, every probe streamed with its counter deltas, then the diff passes."""
        assert self.client is not None
        client, probes, arm = self.client, self.probes, self.arm
        # Warm-up: stored, never counted (the first request pays compile and caches).
        resp = client.run(probes[0], stream=True)
        self.store_result(probes[0], resp, "warmup")
        self.check_alive(resp)
        total = SpecCounters()
        complete: set[str] = set()  # probes whose streamed result carries every id (the diff's reference)
        incomplete: set[str] = set()  # answered, but the stream carried too few ids to be the reference
        for i, probe in enumerate(probes):
            self.reporter.step(arm, "probes", i, len(probes))
            before = self.counters()
            resp = client.run(probe, stream=True)
            if not resp.ok:
                self.store_result(probe, resp, "stream")
                self.check_alive(resp)
                continue
            delta = with_request_counters(self.counters() - before, resp)
            total = total + delta
            self.store_result(probe, resp, "stream", delta)
            if stream_is_reference(resp):
                complete.add(probe.name)
            else:
                incomplete.add(probe.name)
        self.reporter.step(arm, "probes", len(probes), len(probes))
        self.store.update(ArmRow, self.arm_id, counters=total.to_dict())
        # The non-streamed pass; without --no-diffs' diffs, only where the stream cannot be the diff's
        # reference (an engine whose spec arms' streams carry no ids for drafted tokens: its adapter's
        # ``streams_drafted_ids``, docs/engines.md).
        needed = probes if self.plan.diffs else [p for p in probes if p.name in incomplete]
        for i, probe in enumerate(needed):
            self.reporter.step(arm, "non-streamed", i, len(needed))
            resp = client.run(probe, stream=False)
            self.store_result(probe, resp, "nonstream", keep_top=probe.name not in complete)
            self.check_alive(resp)
        if not self.plan.diffs:
            return
        self.reporter.step(arm, "concurrent batch", 0, 1)
        with ThreadPoolExecutor(max_workers=len(probes)) as ex:
            resps = list(ex.map(lambda p: client.run(p, stream=True), probes))
        for probe, resp in zip(probes, resps):
            self.store_result(probe, resp, "batch", concurrency=len(probes))
            self.check_alive(resp)

    def run_channels(self) -> None:
        """Each field channel's requests (observatory.channels), channel after channel."""
        for i, name in enumerate(self.channels):
            self.reporter.step(self.arm, f"channel {name}", i, len(self.channels))
            try:
                get_channel(name).measure(self, self.channel_probes.get(name, []))
            except ArmCrashed as e:
                if not self.restart(f"channel {name}", e):
                    raise
            if not self.live:
                return
        if self.channels:
            self.reporter.step(self.arm, "channels", len(self.channels), len(self.channels))

    def throughput(self, partner: ArmRun | None = None, design: str = "paired") -> None:
        """Timed runs: at each concurrency level, `level` copies of every probe, `level` at a time.

        With PARTNER (the base arm's live run kept up beside this one), concurrency 1
        is timed between base's blocks (DESIGN "bracketed": `bracketed_blocks`) or in
        pairs with base's requests ("paired": `paired_block`) instead.
        """
        assert self.client is not None
        client = self.client
        for level in self.plan.levels:
            if partner is not None and level == 1 and design == "bracketed" and partner.live:
                self.bracketed_blocks(partner)
                continue
            for rep in range(self.plan.repeat):
                self.reporter.step(self.arm, f"timed c={level}" + (" paired" if partner and level == 1 else ""),
                                   rep, self.plan.repeat)
                if partner is not None and level == 1 and partner.live:
                    self.paired_block(partner, rep)
                    continue
                work = [p for p in self.probes for _ in range(level)]
                before = self.counters()
                # threads started, connections opened before the clock (observatory.client.batch: what wall_s spans)
                with self.clock_sampler() as clocks:
                    resps, wall = timed_batch(client, work, level)
                self.store_timed(work, resps, wall, self.counters() - before, level, rep, clocks.record())

    def clock_sampler(self) -> BlockSampler:
        """GPU clocks beside one timed block (observatory.engines.gpu_clocks): the arm's GPUs; a URL arm's
        server is not on this host's GPUs, a CPU arm has none ("not measurable"); and the host's CPU time that
        other work took meanwhile (observatory.engines.host_load: the arm's own engine's process group, unless
        a URL arm or a container, whose processes this host cannot attribute)."""
        clocks = ClockSampler(self.gpus, why_not="URL arm: its server's GPUs are not this host's" if self.arm.url else None)
        pgid = self.proc.pid if self.proc is not None and not self.arm.url and not self.proc.container else None
        return BlockSampler(clocks, HostLoad(pgid))

    def store_timed(self, work: list[Probe], resps: list[Response], wall: float, delta: SpecCounters,
                    level: int, rep: int, gpu: dict[str, Any] | None = None) -> None:
        """One timed batch's results (each checked for a dead engine) and its measurement row (GPU: the clocks
        sampled beside it)."""
        for probe, resp in zip(work, resps):
            self.store_result(probe, resp, "timed", repeat=rep, concurrency=level)
            self.check_alive(resp)
        tokens = sum(_completion_tokens(r) for r in resps)
        if tokens > MAX_COUNT:
            # each answer's count is in range (observatory.client.answer), their sum is not storable on
            # PostgreSQL, nor generated by one batch: a lie, not a figure (issue 32 item 3)
            raise ArmCrashed("failed", f"the server's usage counts of one timed batch sum to {tokens} "
                             f"tokens (more than {MAX_COUNT}): its usage is not believable")
        self.store.add(MeasurementRow(
            arm_id=self.arm_id, concurrency=level, repeat=rep, requests=len(work),
            completion_tokens=tokens, wall_s=wall,
            counters_delta=delta.to_dict(), gpu=gpu,
        ))

    def bracketed_blocks(self, partner: ArmRun) -> None:
        """Every repeat of the suite at concurrency 1, each between two blocks of base's (PARTNER's) requests.

        base block 0, this arm's repeat 0, base block 1, repeat 1, ..., base
        block R: each spec repeat has base timed right before and right after it,
        so the host's drift across it is measured (observatory/judge/bracketed.py).
        Whole blocks, each side's requests one at a time, a pause between blocks:
        on a 2-core CPU host two engines answering in turn slow each other. This
        arm's requests are its `timed` results and measurements; base's are
        stored on this arm as `bracket_base` (repeat = the block's index). The
        counters are this arm's server's, read around its own block only.
        """
        assert self.client is not None and partner.client is not None
        blocks = self.plan.repeat + 1
        partner.client.run_timed(self.probes[0])  # base idled through this arm's other phases: warm it, unstored
        self._base_block(partner, 0, blocks)
        for rep in range(self.plan.repeat):
            time.sleep(BLOCK_PAUSE_S)
            self.reporter.step(self.arm, "timed c=1 bracketed", rep, self.plan.repeat)
            before = self.counters()
            with self.clock_sampler() as clocks:
                resps, wall = timed_batch(self.client, list(self.probes), 1)
            self.store_timed(list(self.probes), resps, wall, self.counters() - before, 1, rep, clocks.record())
            time.sleep(BLOCK_PAUSE_S)
            self._base_block(partner, rep + 1, blocks)

    def _base_block(self, partner: ArmRun, block: int, blocks: int) -> None:
        """One block of base's requests beside this arm (`bracketed_blocks`), stored on this arm; base's end
        leaves the later blocks unmeasured, never this arm's."""
        if not partner.live or partner.client is None:
            return
        self.reporter.step(self.arm, f"base block {block + 1}/{blocks}", block, blocks)
        resps, _ = timed_batch(partner.client, list(self.probes), 1)
        for probe, resp in zip(self.probes, resps):
            self.store_result(probe, resp, BRACKET_BASE, repeat=block, concurrency=1)
            try:
                partner.check_alive(resp)
            except ArmCrashed as e:
                partner.status, partner.reason = e.status, f"{e.reason} (while timed around {self.arm.name})"
                return

    def paired_block(self, partner: ArmRun, rep: int) -> None:
        """One repeat of the suite at concurrency 1, each probe timed on base (PARTNER) and here, alternately.

        Request by request, each alone: base then this arm for even probes
        (counting from REP), this arm then base for odd ones, so a host whose
        speed drifts during the block moves both sides of each pair alike
        (docs/design.md section 4, "Paired timing"). This arm's responses are its `timed`
        results and its measurement (wall: the sum of its own request times,
        base's in between left out); base's are stored on this arm as
        `paired_base`: base's server, timed beside this arm. The counters
        are this arm's server's, read around the block: base's requests go to
        another server and cannot move them.
        """
        assert self.client is not None and partner.client is not None
        before = self.counters()
        mine: list[tuple[Probe, Response]] = []
        with self.clock_sampler() as clocks:
            self._alternate(partner, rep, mine)
        delta = self.counters() - before
        wall = sum((r.duration_ms or 0.0) for _, r in mine) / 1000.0
        self.store_timed([p for p, _ in mine], [r for _, r in mine], wall, delta, 1, rep, clocks.record())

    def _alternate(self, partner: ArmRun, rep: int, mine: list[tuple[Probe, Response]]) -> None:
        """The requests of `paired_block`, this arm's responses appended to MINE (base's stored at once)."""
        assert self.client is not None
        for i, probe in enumerate(self.probes):
            order = (partner, self) if (i + rep) % 2 == 0 else (self, partner)
            for who in order:
                if who is partner and not partner.live:
                    continue
                assert who.client is not None
                resp = who.client.run_timed(probe)
                if who is self:
                    mine.append((probe, resp))
                else:
                    self.store_result(probe, resp, PAIRED_BASE, repeat=rep, concurrency=1)
                    try:
                        partner.check_alive(resp)
                    except ArmCrashed as e:  # base's end, not this arm's: its later pairs are left unpaired
                        partner.status, partner.reason = e.status, f"{e.reason} (while timed beside {self.arm.name})"


class BlockSampler:
    """What is sampled beside one timed block: the GPU clocks (the stored record) with the host's CPU load
    under its ``host`` key."""

    def __init__(self, clocks: ClockSampler, host: HostLoad):
        self.clocks, self.host = clocks, host

    def __enter__(self) -> BlockSampler:
        self.host.__enter__()
        self.clocks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.clocks.__exit__(*exc)
        self.host.__exit__(*exc)

    def record(self) -> dict[str, Any]:
        return {**self.clocks.record(), "host": self.host.record()}


def stream_is_reference(resp: Response) -> bool:
    """Whether a streamed response carries every generated id, so the judge diffs it (judge.tokens_complete)."""
    n = (resp.usage or {}).get("completion_tokens")
    return bool(resp.ok and resp.token_ids and resp.top_logprobs and (n is None or n == len(resp.token_ids)))


def with_request_counters(delta: SpecCounters, resp: Response) -> SpecCounters:
    """DELTA (/metrics around one request), or the request's own counters where /metrics does not report
    what they do: an engine whose /metrics counts verify steps only may report every counter in its answers
    (its adapter, observatory.engines.adapter). Kept as /metrics says when it reports the accepted tokens."""
    own = resp.request_counters
    if delta.accepted is not None or not isinstance(own, SpecCounters) or own.accepted is None:
        return delta
    return SpecCounters(own.drafts, own.draft_tokens, own.accepted,
                        None if own.accepted_per_pos is None else list(own.accepted_per_pos), own.problem,
                        delta.generated)


def _completion_tokens(resp: Response) -> int:
    """The server's usage.completion_tokens; the streamed ids only when it reported no usage."""
    n = (resp.usage or {}).get("completion_tokens")
    return int(n) if isinstance(n, int) and not isinstance(n, bool) else len(resp.token_ids)
