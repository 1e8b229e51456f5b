"""Channel ``stream_fields``: each streamed answer against the whole answer to the same request, field by field.

Field bugs (BUGZOO 2026-H2, "streamed logprobs and tool arguments in
multi-token chunks": SGLang #39260, vLLM #55082, PR #48852, PR #45588): a
speculative step streams several tokens in one chunk, and what the server
assembles per token goes wrong there (every token's ``top_logprobs`` after
the first copied from the first; tool-call arguments empty) while the
non-streamed answer is right. The suite compares streamed and whole ids,
text and tool calls (``token_diff:nonstream``); not logprobs, not each
position's top_logprobs, not on completions with tools' deltas in chunks.

Requests, per arm: `CHATS` suite chat prompts without tools (one per
category first), `TOOLS` with tools, and `COMPLETIONS` of the tool-less
prompts' user text as plain completions; each sent streamed and whole
(which first alternates from one probe to the next), greedy, with top-k
logprobs and ids.

The control: a base arm launched to stream in chunks of k + 1 tokens
without speculation (``base+stream_interval=N``, N = the session's largest
k + 1: the session adds it when this channel runs, `control_arms`; role
``variant``). A parser or chunk-assembly bug of the engine shows on it too;
a speculation bug does not.

Verdict ``stream_fields`` per arm: for every probe, streamed against whole
on the arm itself: token ids, text, finish_reason, completion tokens, each
position's logprob and top_logprobs (the same ids, each value within
`LOGPROB_TOL` nats: measured, docs/channels.md), tool calls (names, and
arguments compared as data). A field that differs where base's streamed
and whole answers agree is a FAIL on a spec arm, or WARN "not attributable
to speculation" where the chunked-stream control differs on the same probe
and field (the control then FAILs: the engine's own stream assembly). Where
base itself differs the same way (probe and field), it is the engine's own on
every arm: NOTE, listed and not counted (vLLM 0.26's hermes tool parser
withholds the ids of the chunks it swallows, on base too: docs/engines.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from observatory.channels import Channel
from observatory.channels.pairs import tool_calls_as_data
from observatory.model.arms import Arm
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, BASE, FAIL, NOTE, PASS, SKIP, UNJUDGED, WARN

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "stream_fields"
CHATS = 3
TOOLS = 2
COMPLETIONS = 2
LOGPROB_TOL = 1e-3  # nats: streamed and whole logprobs of one request on one arm (docs/channels.md: measured)
STREAMED, WHOLE = 0, 1  # the repeat each half of a pair is stored under
CONTROL = "stream_interval"  # the launch fact of the chunked-stream control arm (observatory.model.arms)


def _user_text(p: Probe) -> str | None:
    users = [m.get("content") for m in p.messages or [] if m.get("role") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else None


def chats_by_category(suite: list[Probe]) -> list[Probe]:
    """The suite's own chat probes (no channel's), the first of each category first, then the rest in suite
    order: what this channel and channel reasoning pick their probes from."""
    usable = [p for p in suite if not p.channel and p.kind == "chat"]
    first: dict[str, Probe] = {}
    for p in usable:
        first.setdefault(p.category, p)
    return [*first.values(), *[p for p in usable if p not in first.values()]]


def plan(suite: list[Probe]) -> list[Probe]:
    """CHATS tool-less and TOOLS tool chat probes (one per category first), and COMPLETIONS plain completions."""
    ordered = chats_by_category(suite)
    plain = [p for p in ordered if not p.tools][:CHATS]
    tools = [p for p in ordered if p.tools][:TOOLS]
    out = [replace(p, name=f"{NAME}:{p.name}", channel=NAME, gates=[], expect={}, sampling={},
                   meta={"of": p.name, "kind": "chat+tools" if p.tools else "chat"}) for p in [*plain, *tools]]
    for p in plain[:COMPLETIONS]:
        text = _user_text(p)
        if text is not None:
            out.append(Probe(name=f"{NAME}:{p.name}:completion", category=p.category, prompt=text,
                             max_tokens=p.max_tokens, channel=NAME, meta={"of": p.name, "kind": "completion"}))
    return out


def send_pairs(run: LiveArm, probes: list[Probe], mode: str) -> None:
    """Each probe streamed and whole, one after the other (the first of the two alternating), stored under MODE
    with repeat `STREAMED` or `WHOLE` (this channel's, and channel reasoning's)."""
    client = run.client
    assert client is not None
    for i, p in enumerate(probes):
        run.reporter.step(run.arm, mode, i, len(probes))
        for repeat in ((STREAMED, WHOLE) if i % 2 == 0 else (WHOLE, STREAMED)):
            resp = client.run(p, stream=repeat == STREAMED)
            run.store_result(p, resp, mode, repeat=repeat)
            run.check_alive(resp)
            if not run.live:
                return


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """Each probe streamed and whole (`send_pairs`)."""
    send_pairs(run, probes, NAME)


def control_arms(arms: list[Arm], roles: Mapping[str, str]) -> list[Arm]:
    """The chunked-stream control this channel needs: each launched base arm (ROLES: the planned roles) once
    more, streaming in chunks of its engine's largest k + 1 (``+stream_interval=N``), where the session
    speculates and has none yet."""
    out = []
    for base in (a for a in arms if roles.get(a.name) == BASE and a.url is None):
        ks = [a.num_speculative_tokens for a in arms if a.engine == base.engine and a.num_speculative_tokens]
        if not ks or any(a.stream_interval and a.engine == base.engine for a in arms):
            continue
        n = max(k for k in ks if k is not None) + 1
        out.append(replace(base, name=f"{base.name}+{CONTROL}={n}", stream_interval=n, copy_of=None,
                           engine_args=list(base.engine_args), env=dict(base.env)))
    return out


# -- judging ---------------------------------------------------------------------------------------------------
def _top(row: Any) -> dict[int, float]:
    return {int(t): float(lp) for t, lp in (row or [])}


def field_diffs(s: StoredResult, w: StoredResult, tol: float = LOGPROB_TOL) -> dict[str, str]:
    """The fields where streamed answer S and whole answer W of one request differ: field -> where (first only)."""
    out: dict[str, str] = {}
    ids_s, ids_w = list(s.token_ids or []), list(w.token_ids or [])
    if ids_s != ids_w:
        at = next((i for i, (a, b) in enumerate(zip(ids_s, ids_w)) if a != b), min(len(ids_s), len(ids_w)))
        out["ids"] = f"from position {at} ({len(ids_s)} streamed, {len(ids_w)} whole)"
    if (s.text or "") != (w.text or ""):
        out["text"] = f"{(s.text or '')[:30]!r} streamed, {(w.text or '')[:30]!r} whole"
    if s.finish_reason != w.finish_reason:
        out["finish_reason"] = f"{s.finish_reason} streamed, {w.finish_reason} whole"
    us, uw = (s.usage or {}).get("completion_tokens"), (w.usage or {}).get("completion_tokens")
    if us != uw:
        out["usage"] = f"completion_tokens {us} streamed, {uw} whole"
    same = min(len(ids_s), len(ids_w)) if "ids" not in out else 0
    ls, lw = list(s.logprobs or []), list(w.logprobs or [])
    if "ids" not in out and len(ls) != len(lw):
        out["logprobs"] = f"{len(ls)} logprobs streamed, {len(lw)} whole"
    else:
        for i, (a, b) in enumerate(zip(ls[:same], lw[:same])):
            if a is None or b is None or abs(a - b) > tol:
                out["logprobs"] = f"position {i}: {a} streamed, {b} whole"
                break
    ts, tw = list(s.top_logprobs or []), list(w.top_logprobs or [])
    if "ids" not in out and len(ts) != len(tw):
        out["top_logprobs"] = f"{len(ts)} positions streamed, {len(tw)} whole"
    else:
        for i, (a, b) in enumerate(zip(ts[:same], tw[:same])):
            da, db = _top(a), _top(b)
            if set(da) != set(db):
                out["top_logprobs"] = f"position {i}: ids {sorted(set(da) ^ set(db))[:4]} in one list only"
                break
            worst = max((abs(da[t] - db[t]) for t in da), default=0.0)
            if worst > tol:
                out["top_logprobs"] = f"position {i}: a value {worst:.3g} nats apart"
                break
    cs, cw = tool_calls_as_data(s), tool_calls_as_data(w)
    if cs != cw:
        out["tool_calls"] = f"{cs!r:.60} streamed, {cw!r:.60} whole"
    return out


def _pairs(view: ChannelView, arm: StoredArm) -> dict[str, dict[str, str] | None]:
    """probe name -> its field differences on ARM (None: one half missing or failed)."""
    halves: dict[str, dict[int, StoredResult]] = {}
    for r in view.results(arm):
        halves.setdefault(view.probe(r).name, {})[r.repeat] = r
    out: dict[str, dict[str, str] | None] = {}
    for name, h in halves.items():
        s, w = h.get(STREAMED), h.get(WHOLE)
        out[name] = field_diffs(s, w) if s is not None and w is not None and s.ok and w.ok else None
    return out


def is_control(arm: StoredArm) -> bool:
    """Whether ARM is the chunked-stream control (launched with a stream interval, no speculation)."""
    launch = arm.launch or {}
    return bool(launch.get(CONTROL)) and launch.get("speculative_config") is None


def judge(view: ChannelView) -> list[Verdict]:
    """Per arm: its streamed answers against its whole answers; attributed by base and the chunked control."""
    base = view.base
    if base is None:
        return [view.verdict(a, UNJUDGED, "no base arm to compare with") for a in view.arms]
    ref = _pairs(view, base)
    controls = [a for a in view.arms if is_control(a) and a.status == "ok"]
    shared = {(p, f) for c in controls for p, d in _pairs(view, c).items() for f in (d or {})}
    rows = []
    for arm in view.arms:
        if arm.status != "ok":
            continue
        got = ref if arm.id == base.id else _pairs(view, arm)
        table: list[dict[str, Any]] = []
        fails: list[str] = []
        warns: list[str] = []
        notes: list[str] = []  # the engine's own, on base too: listed, not counted
        for name, diffs in sorted(got.items()):
            kind = next((p.meta["kind"] for p in view.probes.values() if p.name == name), "")
            row: dict[str, Any] = {"probe": name.split(":", 1)[1], "kind": kind}
            if diffs is None:
                row["result"] = "not measured (a half failed)"
                table.append(row)
                continue
            for field, where in diffs.items():
                if arm.id == base.id or (ref.get(name) or {}).get(field) is not None:
                    why, level = "base differs too: the engine's own, not speculation's", NOTE
                elif view.role(arm) == AA_COPY:
                    why, level = "the A/A copy: the engine's own", WARN
                elif not is_control(arm) and (name, field) in shared:
                    why, level = "the chunked-stream control differs too: the engine's stream assembly", WARN
                else:
                    why = "the engine's chunked stream assembly, without speculation" if is_control(arm) else (
                        "speculation's" if controls else "no chunked-stream control in this session")
                    level = FAIL
                {FAIL: fails, WARN: warns, NOTE: notes}[level].append(f"{row['probe']} {field}: {where} ({why})")
            row["result"] = "equal" if not diffs else "; ".join(f"{f}: {w}" for f, w in diffs.items())[:200]
            table.append(row)
        rows.append(_verdict(view, arm, table, fails, warns, notes))
    return rows


def _verdict(view: ChannelView, arm: StoredArm, table: list[dict[str, Any]], fails: list[str],
             warns: list[str], notes: list[str]) -> Verdict:
    details = {"table": table, "logprob_tol": LOGPROB_TOL, "control": is_control(arm)}
    measured = sum(row["result"] != "not measured (a half failed)" for row in table)
    if fails:
        return view.verdict(arm, FAIL, f"{len(fails)} field(s) streamed differ from the whole answer: {fails[0]}",
                            details)
    if warns:
        return view.verdict(arm, WARN, f"{len(warns)} field(s) streamed differ from the whole answer, not "
                            f"attributable: {warns[0]}", details)
    if notes:
        return view.verdict(arm, NOTE, f"{len(notes)} field(s) streamed differ from the whole answer as on base "
                            f"(listed, not counted): {notes[0]}", details)
    if not measured:
        return view.verdict(arm, SKIP, "not measurable: no request answered both streamed and whole", details)
    return view.verdict(arm, PASS, f"{measured} requests: streamed ids, text, finish, usage, logprobs, every "
                        f"top_logprobs list and tool calls equal the whole answers (logprobs within "
                        f"{LOGPROB_TOL:g} nats)", details)


CHANNEL = Channel(
    name=NAME,
    title="Streamed against whole, field by field",
    catches="top_logprobs, logprobs or tool-call arguments wrong only in streamed multi-token chunks",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("stream_top_copy", "stream_args_drop"),
    options={"chats": CHATS, "tools": TOOLS, "completions": COMPLETIONS, "logprob_tol": LOGPROB_TOL},
    control_arms=control_arms,
)
