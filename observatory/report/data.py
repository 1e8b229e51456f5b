"""One session as one `SessionView`: what `show --json`, the terminal summary,
the HTML report and the nightly gate all read (one path for the data).

The shape (documented in `observatory.model.read_model`, and stable: scripts rely
on it, issue 2) is the read model's; this module only fills it from the store.
A session of arms on two engines adds `cross_engine` (observatory.judge.cross_engine:
tokenizer alignment, base-vs-base diffs, acceptance side by side), never part of the verdict.
Arms are in run order, results in probe order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from observatory.channels import get as get_channel
from observatory.channels import is_channel_gate
from observatory.judge.cross_engine import compare as cross_engine_compare
from observatory.judge.verdict import arm_depths, decide
from observatory.model.previews import preview, tool_calls_text
from observatory.model.read_model import (
    ArmFigures,
    ArmView,
    ChannelArm,
    ChannelSummary,
    Counters,
    Depths,
    ProbeView,
    ResultView,
    SessionFacts,
    SessionView,
    ValidityFlag,
    VerdictView,
)
from observatory.model.vocabulary import SEVERITY
from observatory.model.vocabulary import worst as worst_of
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store
from observatory.triage.store import summaries as triage_summaries

_COUNTERS = ("drafts", "draft_tokens", "accepted", "accepted_per_pos")


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") + "Z" if t else None


def worst(verdicts: list[str]) -> str | None:
    """The most severe verdict of a list (None if empty)."""
    return worst_of(v for v in verdicts if v in SEVERITY)


def session_facts(s: SessionRow, known: list[Any] | None = None) -> SessionFacts:
    """Session facts (KNOWN: its stored known-findings ledger, if it has one)."""
    return SessionFacts(
        id=s.id, started_at=_iso(s.started_at), finished_at=_iso(s.finished_at), status=s.status, reason=s.reason,
        host=s.host, gpu=s.gpu, machine=s.machine, observatory_version=s.observatory_version, model=s.model,
        image=s.image, suite=s.suite, command=s.command, options=s.options,
        known=None if known is None else tuple(known),
    )


def _prompt(defn: Mapping[str, Any]) -> Any:
    return defn.get("messages") if defn.get("messages") is not None else defn.get("prompt")


def build_result(r: ResultRow, probe: ProbeRow, verdicts: dict[str, VerdictView]) -> ResultView:
    """One judged result."""
    cell = worst([v.verdict for g, v in verdicts.items() if ":" not in g])
    return ResultView(
        probe=probe.name, category=probe.category, prompt=_prompt(probe.definition or {}),
        probe_hash=probe.content_hash, params=probe.params,
        ok=r.ok, error=r.error, text=r.text, content=r.content, reasoning=r.reasoning,
        preview=preview(r.text if r.text or not r.tool_calls else tool_calls_text(r.tool_calls)),
        token_ids=r.token_ids, token_texts=r.token_texts, top_logprobs=r.top_logprobs,
        tool_calls=r.tool_calls, finish_reason=r.finish_reason, usage=r.usage,
        ttft_ms=r.ttft_ms, duration_ms=r.duration_ms, chunks=r.chunks,
        counters_delta=r.counters_delta, verdict=cell, verdicts=verdicts,
    )


def counters(stored: Mapping[str, Any] | None) -> Counters:
    """An arm's stored counters; an arm whose counters were never read (it failed before its probes ran)
    has them unknown, not zero."""
    stored = stored or {}
    return Counters(drafts=stored.get("drafts"), draft_tokens=stored.get("draft_tokens"),
                    accepted=stored.get("accepted"), accepted_per_pos=stored.get("accepted_per_pos"),
                    extra={k: v for k, v in stored.items() if k not in _COUNTERS})


def build_arm(store: Store, a: ArmRow, probes: list[ProbeRow]) -> ArmView:
    """One arm with its results in probe order, its role and engine as stored."""
    verdicts: dict[int | None, dict[str, VerdictView]] = {}
    arm_verdicts: dict[str, VerdictView] = {}
    channel_verdicts: dict[str, VerdictView] = {}
    for v in store.verdicts(a.id):
        entry = VerdictView(verdict=v.verdict, reason=v.reason, details=v.details, gate_version=v.gate_version)
        if v.probe_id is None and is_channel_gate(v.gate):
            channel_verdicts[v.gate] = entry
        elif v.probe_id is None:
            arm_verdicts[v.gate] = entry
        else:
            verdicts.setdefault(v.probe_id, {})[v.gate] = entry
    stream = {r.probe_id: r for r in store.results(a.id, "stream")}
    results = tuple(build_result(stream[p.id], p, verdicts.get(p.id, {})) for p in probes if p.id in stream)
    launch = dict(a.launch or {})
    return ArmView(
        name=a.name, role=a.role, position=a.position, status=a.status, reason=a.reason,
        launch=launch, speculative_config=launch.get("speculative_config"),
        is_spec=launch.get("speculative_config") is not None, copy_of=launch.get("copy_of"),
        engine_version=a.engine_version, model=a.model, log_path=a.log_path, log_tail=a.log_tail,
        started_at=_iso(a.started_at), ready_at=_iso(a.ready_at), finished_at=_iso(a.finished_at),
        counters=counters(a.counters),
        validity=tuple(ValidityFlag(code=str(v.get("code")), detail=v.get("detail"), known=v.get("known"))
                       for v in a.validity or []),
        arm_verdicts=arm_verdicts, channel_verdicts=channel_verdicts, figures=ArmFigures.from_stored(a.figures),
        results=results, engine=a.engine,
    )


def channel_summaries(store: Store, s: SessionRow, arms: tuple[ArmView, ...]) -> tuple[ChannelSummary, ...]:
    """The field channels the session ran: each with its probe count and every arm's verdicts."""
    names = (s.options or {}).get("channels") or []
    if not names:
        return ()
    counts: dict[str, int] = {}
    channel_of: dict[int, str] = {}
    for p in store.probes(s.id):
        ch = (p.definition or {}).get("channel")
        if ch:
            counts[ch] = counts.get(ch, 0) + 1
            channel_of[p.id] = ch
    arm_ids = {a.id: a.name for a in store.arms(s.id)}
    ms: dict[tuple[str, str], float] = {}
    for arm_id, probe_id, duration in store.result_durations(s.id):
        if probe_id in channel_of and duration is not None and arm_id in arm_ids:
            key = (channel_of[probe_id], arm_ids[arm_id])
            ms[key] = ms.get(key, 0.0) + duration
    out = []
    for name in names:
        ch = get_channel(name)
        out.append(ChannelSummary(
            name=name, title=ch.title, catches=ch.catches, probes=counts.get(name, 0),
            arms=tuple(ChannelArm(arm=a.name, role=a.role, status=a.status,
                                  verdicts={g: v for g, v in a.channel_verdicts.items() if g.split(":", 1)[0] == name},
                                  seconds=ms[(name, a.name)] / 1000.0 if (name, a.name) in ms else None)
                       for a in arms),
        ))
    return tuple(out)


def build(store: Store, session_id: int | None = None) -> SessionView:
    """The whole session as the read model."""
    s = store.session(session_id)
    probes = [p for p in store.probes(s.id) if not (p.definition or {}).get("channel")]
    rows = store.arms(s.id)
    arms = tuple(build_arm(store, a, probes) for a in rows)
    facts = session_facts(s, store.known(s.id))
    return SessionView(
        session=facts,
        probes=tuple(ProbeView(name=p.name, category=p.category, hash=p.content_hash,
                               prompt=_prompt(p.definition or {}), definition=p.definition, params=p.params)
                     for p in probes),
        arms=arms,
        channels=channel_summaries(store, s, arms),
        verdict=decide(facts, arms),
        triages=tuple(triage_summaries(store, s.id)),
        # across engines (issue 17 item 4): its own part, after the verdict was decided without it
        cross_engine=cross_engine_compare(store, s.id),
        depths=depths_of(arms),
    )


def depths_of(arms: Sequence[ArmView]) -> Depths | None:
    """The speculation depths the session's arms planned and covered (None without a spec arm)."""
    return arm_depths(arms)
