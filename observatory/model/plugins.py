"""Plugins by entry point: gates, channels and engine adapters from installed packages (issue 26 item 6).

One mechanism, three groups. A package adds to the observatory by declaring
entry points in its ``pyproject.toml``::

    [project.entry-points."observatory.gates"]
    mygates = "my_package.gates"                 # a module: its @gate functions register
    [project.entry-points."observatory.channels"]
    mychannel = "my_package.channel:CHANNEL"     # an observatory.channels.Channel
    [project.entry-points."observatory.engines"]
    myengine = "my_package.engine:MyAdapter"     # an EngineAdapter class (observatory.engines.adapter)

The built-ins are declared the same way in our own ``pyproject.toml`` and
listed in `BUILTIN` below (the engine adapters' in their own package,
`observatory.engines.adapter.BUILTIN`, which passes them to `discover`),
so a source checkout that was never installed still has them
(tests/model/test_plugins.py checks the lists agree). Both go through `discover`,
deduplicated by value, built-ins first.

Why `importlib.metadata` and not pluggy (which simonw/llm and datasette
use): each group is a list of objects to register, with no hook calls,
ordering or wrappers; pluggy's entry-point loading is this same stdlib call
underneath, and a hook-spec layer for three lists would be a dependency with
nothing to do. docs/plugins.md shows how to write each kind.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from observatory.model.errors import ObservatoryError

GATES = "observatory.gates"
CHANNELS = "observatory.channels"
ENGINES = "observatory.engines"
GROUPS = (GATES, CHANNELS, ENGINES)

# The built-ins of each group, exactly as pyproject.toml declares them (name -> "module[:attribute]"); the engine
# adapters' are observatory.engines.adapter.BUILTIN, given to `discover` by their reader there.
BUILTIN_DIST = "observatory (built-in)"
# This package's own distribution (pyproject.toml's name): its entry points are BUILTIN's, so they are read from
# the table; an install made before a built-in moved still lists the old path, which is ignored, not a clash
OWN_DIST = "specdecode-observatory"
BUILTIN: dict[str, dict[str, str]] = {
    GATES: {"builtin": "observatory.model.paths:GATES_DIR"},
    CHANNELS: {name: f"observatory.channels.{name}:CHANNEL"
               for name in ("soak", "length_sweep", "mixed_batch", "finish", "counters", "sampling", "params", "teacher",
                            "seeds", "prefix_cache", "input_paths", "prompt_embeds", "history", "sdk", "context_limit",
                            "cancel", "stream_fields", "stop_bounds", "volume", "long_prompts", "reasoning",
                            "memory_pressure", "lifecycle", "speculates")},
}


@dataclass(frozen=True)
class Plugin:
    """One entry point: its NAME, VALUE (``module[:attribute]``) and the distribution that declared it."""

    group: str
    name: str
    value: str
    dist: str  # BUILTIN_DIST for ours

    @property
    def builtin(self) -> bool:
        return self.dist == BUILTIN_DIST

    def load(self) -> Any:
        """The object the entry point names; a plugin that fails to import is a setup error naming it."""
        module, _, attr = self.value.partition(":")
        try:
            obj: Any = importlib.import_module(module)
            for part in attr.split(".") if attr else ():
                obj = getattr(obj, part)
        except Exception as e:  # a third party's code is input: any error in it is a setup error naming it
            raise ObservatoryError(f"plugin {self.name!r} ({self.group}, from {self.dist}: {self.value}) "
                                   f"failed to load: {type(e).__name__}: {e}") from None
        return obj


@cache
def discover(group: str, builtin: tuple[tuple[str, str], ...] | None = None) -> tuple[Plugin, ...]:
    """The built-ins of GROUP (BUILTIN's, or the (name, value) pairs its reader gives), then every installed
    package's entry points of it (a value once)."""
    if group not in GROUPS:
        raise ObservatoryError(f"unknown plugin group {group!r} (known: {', '.join(GROUPS)})")
    table = BUILTIN.get(group, {}).items() if builtin is None else builtin
    found = [Plugin(group, name, value, BUILTIN_DIST) for name, value in table]
    seen = {(p.name, p.value) for p in found}
    for ep in sorted(metadata.entry_points(group=group), key=lambda e: (e.name, e.value)):
        dist = getattr(ep, "dist", None)
        if (ep.name, ep.value) in seen or _own(dist):
            continue  # our own, declared in pyproject.toml too (or as an older install declared it)
        seen.add((ep.name, ep.value))
        found.append(Plugin(group, ep.name, ep.value, f"{dist.name} {dist.version}" if dist else "unknown"))
    names = [p.name for p in found]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        who = "; ".join(f"{p.name} = {p.value} ({p.dist})" for p in found if p.name in clash)
        raise ObservatoryError(f"two plugins of {group} share a name: {who}. Uninstall one of them.")
    return tuple(found)


def _own(dist: Any) -> bool:
    """Whether DIST (an entry point's distribution) is this package itself."""
    name = str(getattr(dist, "name", "") or "")
    return name.lower().replace("_", "-") == OWN_DIST
