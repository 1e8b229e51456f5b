"""What a stored arm's launch says: the engine it ran on (`engine_of`), and the roles that hang on it (one base
per engine: `stored_roles`, `base_arm`, `by_engine`; the rule itself is `observatory.model.roles`).

Here, not in the model, because the oldest sessions' launches do not name their engine: the binary they ran
does, and only the adapters know whose binary it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from observatory.engines.arms import engine_adapters
from observatory.model.arms import DEFAULT_ENGINE
from observatory.model.roles import BASE, Fact, roles_for


def engine_of(launch: Mapping[str, Any] | None) -> str:
    """The engine a stored arm ran on: its launch's ``engine``, else told by the binary it ran (sessions stored
    before launches named their engine: the adapter whose ``binary`` it is), else the default engine."""
    launch = launch or {}
    if launch.get("engine"):
        return str(launch["engine"])
    argv = launch.get("argv") or []
    return _binaries().get(str(argv[0]).rsplit("/", 1)[-1], DEFAULT_ENGINE) if argv else DEFAULT_ENGINE


@cache
def _binaries() -> dict[str, str]:
    """A launched arm's executable -> its engine, for every adapter that launches a binary of its own."""
    return {str(a.binary): name for name, a in engine_adapters().items() if getattr(a, "binary", None)}


def _launch_facts(name: str, launch: dict[str, Any]) -> Fact:
    return (name, launch.get("speculative_config") is not None, bool(launch.get("fault")), launch.get("copy_of"),
            engine_of(launch))


def stored_roles(arms: Sequence[tuple[str, dict[str, Any] | None]]) -> dict[str, str]:
    """Arm name -> role for stored (name, launch) pairs: the stored role, else the same rule."""
    facts = [_launch_facts(name, launch or {}) for name, launch in arms]
    derived = dict(zip([f[0] for f in facts], roles_for(facts)))
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
