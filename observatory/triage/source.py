"""What triage works from: a stored session's failing arm, its probes and base's reference outputs.

A failure is "the arm's output differs from base's stored output" (token
ids; base's complete stored sequence is the reference), judged by the
``token_diff`` gate of the session's registry, on each channel the session
ran: streamed alone, non-streamed, or inside the concurrent batch. The arm's
launch is rebuilt from what the session stored (its speculative config,
engine flags, environment overrides and the session's engine settings), so
it can be relaunched as it ran.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from observatory.engines.images import arm_image
from observatory.engines.settings import EngineSettings
from observatory.judge.apply_gates import base_reference, full_sequence, results_by_mode, session_registry, to_output
from observatory.model.arms import DEFAULT_ENGINE, Arm
from observatory.model.errors import ObservatoryError
from observatory.model.gates import Gate
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, TOKEN_DIFF, WARN
from observatory.store.arm_facts import launch_engine
from observatory.store.db import ArmRow, ResultRow, SessionRow
from observatory.store.session_store import Store

CHANNELS = ("stream", "nonstream", "batch")


@dataclass
class Failure:
    """One probe the arm failed in the session, on one channel, against base's reference."""

    probe: str
    channel: str
    verdict: str
    first_divergence: int | None
    margin: float | None
    expected_ids: list[int]
    expected_text: str
    got_ids: list[int]
    got_text: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class Target:
    """Everything needed to relaunch the failing arm and re-check its failures."""

    session: SessionRow
    arm_row: ArmRow
    base_row: ArmRow
    arm: Arm
    settings: EngineSettings
    probes: list[Probe]
    failures: list[Failure]
    references: dict[str, ResultRow]
    gate: Gate
    engine: str = DEFAULT_ENGINE
    gpus: list[int] | None = None

    @property
    def gpu_count(self) -> int:
        """GPUs the session's machine had."""
        return len((self.session.machine or {}).get("gpus") or [])


def _failures(store: Store, arm: ArmRow, base_modes: dict[str, dict[int, ResultRow]],
              probes: dict[int, Probe], gate: Gate, wanted: set[str] | None) -> tuple[list[Failure], dict[str, ResultRow]]:
    modes = results_by_mode(store, arm.id)
    found, refs = [], {}
    for pid, probe in probes.items():
        if wanted is not None and probe.name not in wanted:
            continue
        ref = full_sequence(base_modes, pid)
        if ref is None:
            continue
        for channel in CHANNELS:
            r = modes.get(channel, {}).get(pid)
            if r is None or not r.ok:
                continue
            res = gate.check(to_output(r), to_output(ref), probe)
            if res.verdict not in (FAIL, WARN):
                continue
            d = res.details or {}
            found.append(Failure(probe.name, channel, res.verdict, d.get("position"), d.get("margin"),
                                 list(ref.token_ids or []), ref.text or "", list(r.token_ids or []), r.text or "",
                                 {"reason": res.reason, **d}))
            refs[probe.name] = ref
            break  # the first channel it failed on is the one to replay
    return found, refs


def rebuild_arm(row: ArmRow) -> Arm:
    """The arm as the session launched it, from its stored launch dict."""
    launch = row.launch or {}
    if launch.get("url"):
        raise ObservatoryError(
            f"Arm {row.name} ran on a server the observatory did not start ({launch['url']}); triage relaunches "
            "the arm under other engine settings, so run the session with a launched arm (no NAME=URL)."
        )
    env = {k: v for k, v in (launch.get("env") or {}).items() if k not in ("CUDA_VISIBLE_DEVICES", "OBSERVATORY_FAULT")}
    image = arm_image(launch)
    return Arm(name=row.name, speculative_config=launch.get("speculative_config"),
               engine_args=list(launch.get("engine_args") or []), env=env, fault=launch.get("fault")
               or (launch.get("env") or {}).get("OBSERVATORY_FAULT"),
               # the engine it ran on (an arm relaunched on another engine would be another experiment),
               # and the image named on the arm itself (the session's own comes back with its settings)
               engine=row.engine or launch_engine(launch),
               image=str(image["ref"]) if image and image.get("asked") and image.get("ref") else None)


def rebuild_settings(session: SessionRow) -> EngineSettings:
    """The session's engine settings (what every arm shared), from its stored options."""
    stored = dict((session.options or {}).get("engine") or {})
    names = {f.name for f in dataclasses.fields(EngineSettings)}
    if "model" not in stored:
        raise ObservatoryError(f"Session {session.id} stored no engine settings (was it run by `compare`?); "
                               "triage cannot relaunch its arms.")
    return EngineSettings(**{k: v for k, v in stored.items() if k in names and k != "env"})


def find_target(store: Store, session_id: int | None, arm_name: str | None = None,
                probe_names: list[str] | None = None) -> Target:
    """The failing arm of a session (ARM_NAME, or the one with most failures) and its failures."""
    session = store.session(session_id)
    arms = store.arms(session.id)
    if base_reference(arms) is None:
        raise ObservatoryError(f"Session {session.id} has no base arm: triage diffs against base's stored output, "
                               "so run a session with `--arms base,...`.")
    probes = {p.id: Probe.from_dict(p.definition) for p in store.probes(session.id)}
    wanted = set(probe_names) if probe_names else None
    if wanted:
        unknown = sorted(wanted - {p.name for p in probes.values()})
        if unknown:
            raise ObservatoryError(f"Session {session.id} has no probe {', '.join(unknown)}; its probes: "
                                   f"{', '.join(p.name for p in probes.values())}.")
    gate = session_registry(store, session.id).get(TOKEN_DIFF)
    # each arm against the base of its own engine (observatory.model.roles); a base is no candidate
    bases: dict[int, ArmRow] = {}
    for a in arms:
        b = base_reference(arms, of=a)
        if b is not None and b.id != a.id:
            bases[a.id] = b
    candidates = [a for a in arms if a.id in bases]
    if arm_name is not None:
        candidates = [a for a in candidates if a.name == arm_name]
        if not candidates:
            raise ObservatoryError(f"Session {session.id} has no arm {arm_name!r} other than base; its arms: "
                                   f"{', '.join(a.name for a in arms)}.")
    base_modes = {bid: results_by_mode(store, bid) for bid in {bases[a.id].id for a in candidates}}
    scored = [(a, *_failures(store, a, base_modes[bases[a.id].id], probes, gate, wanted)) for a in candidates]
    scored = [s for s in scored if s[1]]
    if not scored:
        which = f"arm {arm_name}" if arm_name else "any arm"
        raise ObservatoryError(f"Session {session.id}: {which} matches base's output on every probe"
                               f"{' asked for' if wanted else ''}; there is no failure to triage.")
    row, failures, refs = max(scored, key=lambda s: len(s[1]))
    arm = rebuild_arm(row)
    return Target(session=session, arm_row=row, base_row=bases[row.id], arm=arm,
                  settings=rebuild_settings(session), probes=list(probes.values()), failures=failures,
                  references=refs, gate=gate, engine=arm.engine, gpus=(row.launch or {}).get("gpus"))
