"""Arm roles: what each arm of a session is for, decided once.

Every reader (judge, figures, verdict, report, JUnit, selftest) asks an arm
for its role instead of re-deriving "which arm is base" from its launch:

- ``base``: the reference every other arm is diffed against, the first arm
  that does not speculate and is not a copy; in a session with arms on
  several engines, one per engine (each arm is judged against its own
  engine's base; `observatory.judge.cross_engine` compares the bases);
- ``aa_copy``: a copy of the base arm (the A/A control: the engine's own
  non-determinism, the session's noise floor);
- ``spec``: an arm that speculates (copies of spec arms included);
- ``fault``: a speculating arm launched with an injected fault (selftest);
- ``variant``: any other non-speculating arm (e.g. a differently launched
  base from an arms file), diffed against base like a spec arm.

The role is assigned when the session is planned (`assign_roles`) and stored
in each arm's launch dict; `role_of` reads it back, and for sessions stored
before roles existed applies the same rule to the stored launch dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BASE = "base"
AA_COPY = "aa_copy"
SPEC = "spec"
FAULT = "fault"
VARIANT = "variant"
ROLES = (BASE, AA_COPY, SPEC, FAULT, VARIANT)
# roles whose outputs are judged against base (everything but base itself)
JUDGED_AGAINST_BASE = (AA_COPY, SPEC, FAULT, VARIANT)
SPECULATING = (SPEC, FAULT)


Fact = tuple[str, bool, bool, str | None, str]  # name, speculates, has a fault, copy of, engine


def _roles(facts: Sequence[Fact]) -> list[str]:
    """Roles for (name, speculates, has a fault, copy of, engine) tuples in run order: one base per engine."""
    bases: dict[str, str] = {}
    for name, spec, _, copy_of, engine in facts:
        if not spec and copy_of is None:
            bases.setdefault(engine, name)
    out = []
    for name, spec, fault, copy_of, engine in facts:
        if spec:
            out.append(FAULT if fault else SPEC)
        elif name == bases.get(engine):
            out.append(BASE)
        elif copy_of is not None and copy_of == bases.get(engine):
            out.append(AA_COPY)
        else:
            out.append(VARIANT)
    return out


def assign_roles(arms: Sequence[Any]) -> dict[str, str]:
    """Arm name -> role for planned `observatory.model.arms.Arm` objects, in run order."""
    facts = [(a.name, a.speculative_config is not None, bool(a.fault), a.copy_of, a.engine) for a in arms]
    return dict(zip([f[0] for f in facts], _roles(facts)))


def engine_of(launch: Mapping[str, Any] | None) -> str:
    """The engine a stored arm ran on: its launch's ``engine``, else told by the binary (older sessions)."""
    launch = launch or {}
    if launch.get("engine"):
        return str(launch["engine"])
    argv = launch.get("argv") or []
    return "llama.cpp" if argv and str(argv[0]).rsplit("/", 1)[-1] == "llama-server" else "vllm"


def _launch_facts(name: str, launch: dict[str, Any]) -> Fact:
    return (name, launch.get("speculative_config") is not None, bool(launch.get("fault")), launch.get("copy_of"),
            engine_of(launch))


def stored_roles(arms: Sequence[tuple[str, dict[str, Any] | None]]) -> dict[str, str]:
    """Arm name -> role for stored (name, launch) pairs: the stored role, else the same rule."""
    facts = [_launch_facts(name, launch or {}) for name, launch in arms]
    derived = dict(zip([f[0] for f in facts], _roles(facts)))
    return {name: (launch or {}).get("role") or derived[name] for name, launch in arms}


def role_of(arm: Any, arms: Sequence[Any]) -> str:
    """The role of stored arm ARM (an ArmRow) among the session's ARMS."""
    return stored_roles([(a.name, a.launch) for a in arms])[arm.name]


def base_arm(arms: Sequence[Any], of: Any | None = None, roles: Mapping[str, str] | None = None) -> Any | None:
    """The stored arm whose role is base (OF given: the base of OF's engine), or None when there is none.

    The one lookup of "which arm is base": ROLES, when the caller has them already, are the session's
    `stored_roles` of ARMS.
    """
    roles = stored_roles([(a.name, a.launch) for a in arms]) if roles is None else roles
    engine = engine_of(of.launch) if of is not None else None
    return next((a for a in arms if roles.get(a.name) == BASE and engine in (None, engine_of(a.launch))), None)


def by_engine(arms: Sequence[Any]) -> list[list[Any]]:
    """Stored arms grouped by engine, in run order of each group's first arm (one group: one engine)."""
    groups: dict[str, list[Any]] = {}
    for a in arms:
        groups.setdefault(engine_of(a.launch), []).append(a)
    return list(groups.values())
