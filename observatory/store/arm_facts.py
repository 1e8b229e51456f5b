"""An arm's role and engine, stored facts (issue 47 item 2), and the rule for an arm stored without them.

The runner writes each arm's role (`observatory.model.roles`) and the engine it runs on with the session, as
columns of its row, and every reader reads them there. An arm stored before they were columns (migration m010
fills those) or written without them (a row made by hand) gets them from its launch facts by the rule the
runner applied at planning: the launch's own ``role`` and ``engine`` where it names them, else the engine its
binary tells (`launch_engine`) and `observatory.model.roles.roles_for` over the session's arms in run order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from observatory.model.arms import DEFAULT_ENGINE
from observatory.model.roles import roles_for

# Frozen history, never edited: sessions stored before launches named their engine (before 2026-12-01) launched
# one engine from a binary of its own, llama.cpp's server; every other launch ran the default engine's module.
LEGACY_BINARIES = {"llama-server": "llama.cpp"}


def launch_engine(launch: Mapping[str, Any] | None) -> str:
    """The engine a stored launch ran on: its ``engine``, else the one its binary tells, else the default."""
    launch = launch or {}
    if launch.get("engine"):
        return str(launch["engine"])
    argv = launch.get("argv") or []
    return LEGACY_BINARIES.get(str(argv[0]).rsplit("/", 1)[-1], DEFAULT_ENGINE) if argv else DEFAULT_ENGINE


def launch_facts(arms: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[tuple[str, str]]:
    """(role, engine) of each stored (name, launch) pair of one session, in run order."""
    engines = [launch_engine(launch) for _, launch in arms]
    derived = roles_for([(name, (launch or {}).get("speculative_config") is not None, bool((launch or {}).get("fault")),
                          (launch or {}).get("copy_of"), engine) for (name, launch), engine in zip(arms, engines)])
    return [(str((launch or {}).get("role") or role), engine)
            for (_, launch), role, engine in zip(arms, derived, engines)]
