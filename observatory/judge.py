"""The judge: applies gates to stored results and stores their verdicts.

Judging reads only the store and is idempotent (a session's verdicts are
replaced as a whole), so a session can be re-judged at any time, e.g. after
a gate changed. Verdict rows per arm:

- each of the probe's gates on the arm's streamed result (gate name as is);
- ``token_diff`` of the arm's streamed result against the base arm's (every
  arm but the base reference itself: spec arms, and A/A copies of base, whose
  diffs are the session's noise floor);
- ``token_diff:nonstream`` and ``token_diff:batch``: the arm's non-streamed
  and in-batch outputs against its own streamed output;
- arm gates (``distinct_outputs``) with no probe.

The discriminator rule (DESIGN.md mistake 1): a correctness gate that fails
on the base arm makes that probe NOT_DISCRIMINATING for every other arm.
"""

from __future__ import annotations

from typing import Any

from observatory.db import ArmRow, ResultRow, VerdictRow
from observatory.gates import FAIL, WARN, Gate, GateRegistry, GateResult, Output, default_registry
from observatory.probes import Probe

NOT_DISCRIMINATING = "NOT_DISCRIMINATING"
PAIR_MODES = {"token_diff:nonstream": "nonstream", "token_diff:batch": "batch"}


def to_output(r: ResultRow) -> Output:
    """A stored result as gates see it."""
    return Output(
        text=r.text or "",
        token_ids=list(r.token_ids or []),
        top_logprobs=[[(int(t), float(lp)) for t, lp in pos] for pos in (r.top_logprobs or [])],
        token_texts=list(r.token_texts or []) or None,
        finish_reason=r.finish_reason,
        tool_calls=r.tool_calls,
        content=r.content,
        reasoning=r.reasoning,
    )


def base_reference(arms: list[ArmRow]) -> ArmRow | None:
    """The arm spec arms are diffed against: the first non-speculating original."""
    for a in arms:
        launch = a.launch or {}
        if launch.get("speculative_config") is None and not launch.get("copy_of"):
            return a
    return None


def _row(arm: ArmRow, gate: Gate, res: GateResult, result: ResultRow | None, probe_id: int | None,
         name: str | None = None) -> VerdictRow:
    return VerdictRow(arm_id=arm.id, result_id=result.id if result else None, probe_id=probe_id,
                      gate=name or gate.name, gate_version=gate.version, verdict=res.verdict,
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


def results_by_mode(store: Any, arm_id: int) -> dict[str, dict[int, ResultRow]]:
    """An arm's correctness results: mode (stream, nonstream, batch) -> probe id -> result."""
    modes: dict[str, dict[int, ResultRow]] = {}
    for r in store.results(arm_id):
        if r.mode in ("stream", "nonstream", "batch"):
            modes.setdefault(r.mode, {})[r.probe_id] = r
    return modes


def result_gates(registry: GateRegistry, probe: Probe) -> list[Gate]:
    """The probe's gates that judge one output alone, those REGISTRY has, in the probe's order."""
    return [registry.get(n) for n in probe.gates if n in registry and registry.get(n).kind == "result"]


def judge_session(store: Any, session_id: int, registry: GateRegistry | None = None) -> list[VerdictRow]:
    """(Re)compute and store every verdict of a session."""
    registry = registry or default_registry()
    arms = store.arms(session_id)
    probes = {p.id: Probe.from_dict(p.definition) for p in store.probes(session_id)}
    by_arm = {a.id: results_by_mode(store, a.id) for a in arms}
    base = base_reference(arms)
    rows: list[VerdictRow] = []
    base_failed: set[tuple[int, str]] = set()
    ordered = ([base] if base else []) + [a for a in arms if a is not base]
    for arm in ordered:
        stream = by_arm[arm.id].get("stream", {})
        if not stream:
            continue
        for pid, probe in probes.items():
            r = stream.get(pid)
            if r is None or not r.ok:
                continue
            out = to_output(r)
            for gate in result_gates(registry, probe):
                name = gate.name
                res = _safe(gate, out, probe)
                row = _row(arm, gate, res, r, pid)
                if arm is base and gate.correctness and res.verdict == FAIL:
                    base_failed.add((pid, name))
                elif arm is not base and gate.correctness and (pid, name) in base_failed:
                    row.details = {**row.details, "verdict_before": row.verdict,
                                   "why": "the base arm fails this gate too: the probe does not discriminate"}
                    row.verdict = NOT_DISCRIMINATING
                rows.append(row)
        rows += _pair_rows(registry, arm, base, by_arm, probes)
        if "distinct_outputs" in registry:
            gate = registry.get("distinct_outputs")
            pairs = [(probes[pid], to_output(r)) for pid, r in stream.items() if r.ok and pid in probes]
            rows.append(_row(arm, gate, _safe(gate, pairs), None, None))
    store.replace_verdicts(session_id, rows)
    return rows


def tokens_complete(r: ResultRow) -> bool:
    """Whether a result carries every generated token id (its usage count agrees).

    Some engines withhold the logprobs of streamed chunks their tool parser
    swallows (seen on vLLM 0.26 for CUDA with the hermes parser: 14 of 32 ids
    came back); such a stream cannot be diffed token by token.
    """
    n = (r.usage or {}).get("completion_tokens")
    return n is None or n == len(r.token_ids or [])


def full_sequence(modes: dict[str, dict[int, ResultRow]], pid: int) -> ResultRow | None:
    """The arm's full token sequence for a probe: streamed if complete, else non-streamed."""
    for mode in ("stream", "nonstream"):
        r = modes.get(mode, {}).get(pid)
        if r is not None and r.ok and tokens_complete(r):
            return r
    return None


def _pair_rows(registry: GateRegistry, arm: ArmRow, base: ArmRow | None,
               by_arm: dict[int, dict[str, dict[int, ResultRow]]], probes: dict[int, Probe]) -> list[VerdictRow]:
    if "token_diff" not in registry:
        return []
    gate = registry.get("token_diff")
    rows = []
    modes = by_arm[arm.id]
    for pid, probe in probes.items():
        stream = modes.get("stream", {}).get(pid)
        if stream is not None and stream.ok and not tokens_complete(stream):
            rows.append(VerdictRow(
                arm_id=arm.id, result_id=stream.id, probe_id=pid, gate="stream_tokens", gate_version="judge",
                verdict=WARN, details={"streamed": len(stream.token_ids or []),
                                       "generated": (stream.usage or {}).get("completion_tokens")},
                reason=(f"the stream carried {len(stream.token_ids or [])} of "
                        f"{(stream.usage or {}).get('completion_tokens')} token ids (the engine withheld chunks); "
                        "token diffs use the non-streamed response"),
            ))
        mine = full_sequence(modes, pid)
        if mine is None:
            continue
        if base is not None and arm is not base:
            ref = full_sequence(by_arm[base.id], pid)
            if ref is not None:
                res = _safe(gate, to_output(mine), to_output(ref), probe)
                res.details = {**res.details, "compared": [mine.mode, ref.mode]}
                rows.append(_row(arm, gate, res, mine, pid))
        for name, mode in PAIR_MODES.items():
            other = modes.get(mode, {}).get(pid)
            if other is None or other is mine or not other.ok or not tokens_complete(other):
                continue
            res = _safe(gate, to_output(other), to_output(mine), probe)
            rows.append(_row(arm, gate, res, other, pid, name=name))
    return rows
