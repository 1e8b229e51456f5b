"""One session as one plain dict: what `show --json`, the terminal summary,
the HTML report and the nightly gate all read (one path for the data).

Stable keys scripts rely on (issue 2)::

    {"session": {"id", "started_at", "host", "gpu", "status", ...},
     "verdict": {"verdict": "PASS"|"WARN"|"FAIL"|"INVALID", "why", "exit_code",
                 "reasons": [{"level", "text", "arm", "probe", "gate", "code"}]},
     "arms": [{"name", "role", "status", "reason", "launch", "engine_version",
               "counters": {"drafts", "draft_tokens", "accepted", "accepted_per_pos"},
               "results": [{"probe", "prompt", "text", "token_ids", "finish_reason",
                            "verdicts": {GATE: {"verdict", "reason", "details"}}}]}],
     "cross_engine": None | {"engines", "bases", "pairs", "acceptance", "note"}}  # observatory.cross_engine

Arms are in run order, results in probe order.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from observatory.channels import get as get_channel
from observatory.channels import is_channel_gate
from observatory.cross_engine import compare as cross_engine_compare
from observatory.db import ArmRow, ResultRow, SessionRow
from observatory.judge import NOT_DISCRIMINATING, UNJUDGED
from observatory.previews import preview, tool_calls_text
from observatory.roles import stored_roles
from observatory.store import Store
from observatory.triage_store import summaries as triage_summaries
from observatory.verdict import decide

# Worst first: the cell verdict of a probe x arm is its worst gate verdict.
SEVERITY = ["FAIL", "INVALID", UNJUDGED, "WARN", NOT_DISCRIMINATING, "PASS", "SKIP"]


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") + "Z" if t else None


def worst(verdicts: list[str]) -> str | None:
    """The most severe verdict of a list (None if empty)."""
    ranked = [v for v in SEVERITY if v in verdicts]
    return ranked[0] if ranked else None


def session_dict(s: SessionRow) -> dict[str, Any]:
    """Session facts."""
    return {
        "id": s.id, "started_at": _iso(s.started_at), "finished_at": _iso(s.finished_at),
        "status": s.status, "reason": s.reason, "host": s.host, "gpu": s.gpu,
        "machine": s.machine, "observatory_version": s.observatory_version, "model": s.model,
        "image": s.image, "suite": s.suite, "command": s.command, "options": s.options,
    }


def _prompt(defn: dict[str, Any]) -> Any:
    return defn.get("messages") if defn.get("messages") is not None else defn.get("prompt")


def result_dict(r: ResultRow, probe: Any, verdicts: dict[str, Any]) -> dict[str, Any]:
    """One judged result."""
    cell = worst([v["verdict"] for g, v in verdicts.items() if ":" not in g])
    return {
        "probe": probe.name, "category": probe.category, "prompt": _prompt(probe.definition),
        "probe_hash": probe.content_hash, "params": probe.params,
        "ok": r.ok, "error": r.error, "text": r.text, "content": r.content, "reasoning": r.reasoning,
        "preview": preview(r.text if r.text or not r.tool_calls else tool_calls_text(r.tool_calls)),
        "token_ids": r.token_ids, "token_texts": r.token_texts, "top_logprobs": r.top_logprobs,
        "tool_calls": r.tool_calls, "finish_reason": r.finish_reason, "usage": r.usage,
        "ttft_ms": r.ttft_ms, "duration_ms": r.duration_ms, "chunks": r.chunks,
        "counters_delta": r.counters_delta, "verdict": cell, "verdicts": verdicts,
    }


def arm_dict(store: Store, a: ArmRow, probes: list[Any], role: str | None = None) -> dict[str, Any]:
    """One arm with its results in probe order."""
    verdicts: dict[int | None, dict[str, Any]] = {}
    arm_verdicts: dict[str, Any] = {}
    channel_verdicts: dict[str, Any] = {}
    for v in store.verdicts(a.id):
        entry = {"verdict": v.verdict, "reason": v.reason, "details": v.details, "gate_version": v.gate_version}
        if v.probe_id is None and is_channel_gate(v.gate):
            channel_verdicts[v.gate] = entry
        elif v.probe_id is None:
            arm_verdicts[v.gate] = entry
        else:
            verdicts.setdefault(v.probe_id, {})[v.gate] = entry
    stream = {r.probe_id: r for r in store.results(a.id, "stream")}
    results = [result_dict(stream[p.id], p, verdicts.get(p.id, {})) for p in probes if p.id in stream]
    launch = dict(a.launch or {})
    # an arm whose counters were never read (it failed before its probes ran) has them unknown, not zero
    counters: dict[str, Any] = {"drafts": None, "draft_tokens": None, "accepted": None, "accepted_per_pos": None}
    counters.update(a.counters or {})
    return {
        "name": a.name, "role": role or launch.get("role"), "position": a.position, "status": a.status,
        "reason": a.reason,
        "launch": launch, "speculative_config": launch.get("speculative_config"),
        "is_spec": launch.get("speculative_config") is not None, "copy_of": launch.get("copy_of"),
        "engine_version": a.engine_version, "model": a.model, "log_path": a.log_path,
        "log_tail": a.log_tail, "started_at": _iso(a.started_at), "ready_at": _iso(a.ready_at),
        "finished_at": _iso(a.finished_at), "counters": counters, "validity": a.validity or [],
        "arm_verdicts": arm_verdicts, "channel_verdicts": channel_verdicts, **(a.figures or {}), "results": results,
    }


def channels_dict(store: Store, s: SessionRow, arms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The field channels the session ran: each with its probe count and every arm's verdicts."""
    names = (s.options or {}).get("channels") or []
    if not names:
        return []
    counts: dict[str, int] = {}
    for p in store.probes(s.id):
        ch = (p.definition or {}).get("channel")
        if ch:
            counts[ch] = counts.get(ch, 0) + 1
    out = []
    for name in names:
        ch = get_channel(name)
        out.append({
            "name": name, "title": ch.title, "catches": ch.catches, "probes": counts.get(name, 0),
            "arms": [{"arm": a["name"], "role": a["role"], "status": a["status"],
                      "verdicts": {g: v for g, v in a["channel_verdicts"].items() if g.split(":", 1)[0] == name}}
                     for a in arms],
        })
    return out


def build(store: Store, session_id: int | None = None) -> dict[str, Any]:
    """The whole session as a dict."""
    s = store.session(session_id)
    probes = [p for p in store.probes(s.id) if not (p.definition or {}).get("channel")]
    rows = store.arms(s.id)
    roles = stored_roles([(a.name, a.launch) for a in rows])
    arms = [arm_dict(store, a, probes, roles[a.name]) for a in rows]
    data: dict[str, Any] = {
        "session": session_dict(s),
        "probes": [{"name": p.name, "category": p.category, "hash": p.content_hash,
                    "prompt": _prompt(p.definition), "definition": p.definition, "params": p.params}
                   for p in probes],
        "arms": arms,
        "channels": channels_dict(store, s, arms),
    }
    data["verdict"] = decide(data).to_dict()
    data["triages"] = triage_summaries(store, s.id)
    # Across engines (issue 17 item 4): its own key, added after the verdict was decided without it.
    data["cross_engine"] = cross_engine_compare(store, s.id)
    return data
