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
with each arm, with the engine it runs on: columns of its row (and keys of its
launch facts). Readers take them from the stored arm (`base_of`, `by_engine`,
any arm with a ``name``, ``role`` and ``engine``: `RoledArm`); arms stored
before they were columns got them by the same rule (`roles_for`) when their
database was migrated (`observatory.store.arm_facts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from observatory.model.vocabulary import AA_COPY, BASE, FAULT, SPEC, VARIANT

Fact = tuple[str, bool, bool, str | None, str]  # name, speculates, has a fault, copy of, engine


def roles_for(facts: Sequence[Fact]) -> list[str]:
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
    return dict(zip([f[0] for f in facts], roles_for(facts)))


class RoledArm(Protocol):
    """A stored arm as the role lookups read it (`observatory.store.stored.StoredArm` and the read model's
    ArmView are such)."""

    @property
    def name(self) -> str: ...
    @property
    def role(self) -> str | None: ...
    @property
    def engine(self) -> str | None: ...


A = TypeVar("A", bound=RoledArm)


def base_of(arms: Sequence[A], of: RoledArm | None = None) -> A | None:
    """The arm of ARMS whose role is base (OF given: the base of OF's engine), or None when there is none: the one
    lookup of "which arm is base"."""
    return next((a for a in arms if a.role == BASE and (of is None or a.engine == of.engine)), None)


def by_engine(arms: Sequence[A]) -> list[list[A]]:
    """ARMS grouped by engine, in run order of each group's first arm (one group: one engine)."""
    groups: dict[str | None, list[A]] = {}
    for a in arms:
        groups.setdefault(a.engine, []).append(a)
    return list(groups.values())
