"""Synthetic stored sessions for the state channels' unit tests (soak, length_sweep, mixed_batch).

`build` stores a session with the channel's planned probes and, per arm, one
result per request as the test says (token ids; base's top-k logprobs make a
divergence from it hard, with a margin of 5 nats), and returns the
`ChannelView` the channel's judge gets; `judged_soak_session` a whole judged one.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from observatory.channels import Channel, soak
from observatory.channels.view import ChannelView
from observatory.commands.evaluate import evaluate
from observatory.model.gates import default_registry
from observatory.model.probes import Probe, load_probe_file
from observatory.model.vocabulary import BASE
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store
from tests.support.paths import REPO

SUITE = REPO / "probes" / "default.toml"
CLEAN = [5, 6, 7, 8]  # the tokens every request answers with unless the test says otherwise


def suite() -> list[Probe]:
    """The default suite (its probes are what the channels plan from)."""
    return load_probe_file(SUITE)


def top_k(tokens: list[int]) -> list[list[list[float]]]:
    """Base's top-k per position: its own token at 0.0 nats, every other token 5 nats below."""
    return [[[t, 0.0], [t + 1000, -5.0]] for t in tokens]


# (probe, arm name) -> the stored results' fields: a dict per result, or a list of them (a probe sent twice)
Answer = Callable[[Probe, str], dict[str, Any] | list[dict[str, Any]]]


def build(tmp_path: Path, channel: Channel, arms: dict[str, str], answer: Answer,
          plan_from: list[Probe] | None = None) -> ChannelView:
    """A stored session of CHANNEL's probes answered by ANSWER on ARMS ({name: role}, base first)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    store = Store(str(tmp_path / "runs.db"))
    sid = int(store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t",
                                   options={"channels": [channel.name]})).id)
    probes = channel.plan(suite() if plan_from is None else plan_from)
    with store.tx() as s:  # one transaction for all rows: hundreds of probes and results
        prows = [ProbeRow(session_id=sid, position=i, name=p.name, category=p.category,
                          content_hash=p.content_hash, definition=p.to_dict(), params={}) for i, p in enumerate(probes)]
        s.add_all(prows)
        s.flush()
        pids = {p.name: int(r.id) for p, r in zip(probes, prows)}
    rows = []
    for pos, (name, role) in enumerate(arms.items()):
        spec = None if role in (BASE, "aa_copy") else {"method": "mtp", "num_speculative_tokens": 2}
        rows.append(store.add(ArmRow(session_id=sid, position=pos, name=name, status="ok", model="m",
                                     launch={"role": role, "speculative_config": spec, "argv": [], "env": {}})))
    results = []
    for arm in rows:
        for p in probes:
            got = answer(p, arm.name)
            for fields in got if isinstance(got, list) else [got]:
                tokens = list(fields.get("tokens", CLEAN))
                results.append(ResultRow(
                    arm_id=arm.id, probe_id=pids[p.name], mode=channel.name, ok=fields.get("ok", True),
                    error=None if fields.get("ok", True) else "boom", text=" ".join(map(str, tokens)),
                    token_ids=tokens, token_texts=[str(t) for t in tokens],
                    top_logprobs=top_k(tokens), repeat=fields.get("repeat", 0),
                    concurrency=fields.get("concurrency", 1), usage=fields.get("usage", {}),
                    counters_delta=fields.get("counters", {}), ttft_ms=fields.get("ttft_ms"),
                    duration_ms=fields.get("duration_ms")))
    with store.tx() as s:
        s.add_all(results)
    return ChannelView(store, sid, channel.name, rows, dict(arms), {pids[p.name]: p for p in probes},
                       default_registry())


def by_arm(rows: list[Any], view: ChannelView, part: str | None = None) -> dict[str, Any]:
    """The channel's verdict rows by arm name (of one part: None for the main gate)."""
    names = {a.id: a.name for a in view.arms}
    gate = view.channel if part is None else f"{view.channel}:{part}"
    return {names[r.arm_id]: r for r in rows if r.gate == gate}


def judged_soak_session(tmp_path: Path) -> Path:
    """A judged soak-channel session: the spec arm's later occurrences of one probe differ (FAIL)."""
    late = {p.meta["index"] for p in soak.plan(suite())
            if p.meta["of"] == suite()[0].name and p.meta["occurrence"] >= 5}

    def answer(p: Any, arm: str) -> dict[str, Any]:
        tokens = [5, 9, 9, 9] if (arm == "mtp2" and p.meta["index"] in late) else CLEAN
        cd = {"drafts": 10, "draft_tokens": 20, "accepted": 12, "accepted_per_pos": [8, 4]} if arm == "mtp2" else {}
        return {"tokens": tokens, "repeat": p.meta["occurrence"], "counters": cd}

    build(tmp_path, soak.CHANNEL, {"base": "base", "mtp2": "spec"}, answer)
    store = Store(str(tmp_path / "runs.db"), write=True)
    store.update(SessionRow, 1, status="complete", started_at=datetime(2026, 11, 1, 2, 0, 0))
    evaluate(store, 1)
    return tmp_path / "runs.db"
