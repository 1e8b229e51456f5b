"""Field channels: ways of looking beyond one greedy request (docs/channels.md).

The default suite sends each probe alone, greedy, to a fresh engine. The bugs
that reached users mostly live elsewhere: in what one request leaves behind
for the next, at a prompt length on a boundary, in a mixed batch, around a
stop, at temperature > 0, in the counters. A channel is one such way of
looking. It adds its own requests (its probes, made from the suite when the
session is planned and stored with it), sends them to each live arm as one
more phase between the correctness pass and the timed runs (results stored
with ``mode`` = the channel's name), and judges them after the arms ran
(verdict rows with no probe, named ``NAME`` or ``NAME:part``).

A channel module defines one `Channel` and is registered by entry point
(`observatory.model.plugins`); the ``nightly`` profile runs every channel of
profile ``nightly`` in that order, ``deep`` those and the channels of profile
``deep`` (engine conditions: each relaunches an arm or runs long), ``quick`` none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from observatory.channels.view import ChannelView
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError
from observatory.model.plugins import CHANNELS, discover
from observatory.model.probes import Probe
from observatory.store.session_store import Store

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.model.gates import GateRegistry
    from observatory.store.stored import StoredArm, Verdict

PROFILES = ("quick", "nightly", "deep")
CHANNEL_PROFILES = ("nightly", "deep")  # the profile a channel joins (deep runs nightly's too)


@dataclass(frozen=True)
class Channel:
    """One way of looking: the requests it adds, how a live arm gets them, how they are judged."""

    name: str  # the result mode its requests are stored under, and its verdicts' gate name
    title: str  # the report section's heading
    catches: str  # one line: the class of field bug it exists for
    plan: Callable[[list[Probe]], list[Probe]]  # its own probes, made from the suite's
    measure: Callable[[LiveArm, list[Probe]], None]  # send them to one live arm, store the results
    judge: Callable[[ChannelView], list[Verdict]]  # its verdicts for every arm, from the store
    options: dict[str, Any] = field(default_factory=dict)  # documented knobs (for the report)
    faults: tuple[str, ...] = ()  # the plugin faults it must catch (observatory.faults): selftest's controls
    profile: str = "nightly"  # the smallest profile that runs it: "nightly", or "deep" (too costly for the nightly)
    # the control arms it needs beside the session's (the session's arms and their roles -> arms to add, none
    # already there): the session adds them when it runs the channel (e.g. stream_fields' chunked-stream base)
    control_arms: Callable[[list[Arm], Mapping[str, str]], list[Arm]] | None = None
    # its probes for N requests per arm (``--volume N``), where its size is a knob; None: `plan` alone
    sized: Callable[[list[Probe], int], list[Probe]] | None = None
    # what the engine must report for it, named as features an engine's adapter turns into its own launch flags
    # (`EngineAdapter.feature_args`, e.g. "prompt_tokens_details"): every launched arm of a session that runs the
    # channel gets them alike (a reporting switch, never a change of what is computed)
    engine_features: tuple[str, ...] = ()


_REGISTRY: dict[str, Channel] = {}


def channels() -> dict[str, Channel]:
    """Every channel, by name, in profile order: the built-ins, then installed ones (``observatory.channels``
    entry points, `observatory.model.plugins`), which the nightly profile runs too."""
    if not _REGISTRY:
        for plugin in discover(CHANNELS):
            ch = plugin.load()
            if not isinstance(ch, Channel):
                raise ObservatoryError(f"channel plugin {plugin.name!r} ({plugin.dist}: {plugin.value}) is a "
                                       f"{type(ch).__name__}, not an observatory.channels.Channel")
            if ch.name != plugin.name:
                raise ObservatoryError(f"channel plugin {plugin.name!r} ({plugin.dist}) is named {ch.name!r}: "
                                       "the entry point's name and the channel's must agree")
            if ch.profile not in CHANNEL_PROFILES:
                raise ObservatoryError(f"channel plugin {plugin.name!r} ({plugin.dist}) joins profile "
                                       f"{ch.profile!r}: one of {', '.join(CHANNEL_PROFILES)}")
            _REGISTRY[ch.name] = ch
    return dict(_REGISTRY)


def get(name: str) -> Channel:
    """One channel by name; an unknown name is a usage error naming the known ones."""
    known = channels()
    if name not in known:
        raise ObservatoryError(f"unknown channel {name!r} (known: {', '.join(known) or 'none'})")
    return known[name]


def engine_features(names: Sequence[str]) -> tuple[str, ...]:
    """The engine features the channels NAMES need, each once, in order (`Channel.engine_features`)."""
    return tuple(dict.fromkeys(f for n in names for f in get(n).engine_features))


def is_channel_gate(gate: str) -> bool:
    """Whether a verdict's gate name belongs to a channel (``NAME`` or ``NAME:part``)."""
    return gate.split(":", 1)[0] in channels()


def resolve(profile: str | None, names: Sequence[str] | str | None = None) -> list[str]:
    """The channels a session runs: those named (comma list), else the profile's.

    ``quick`` (the default) runs none: today's behaviour; ``nightly`` runs every channel of profile
    ``nightly``; ``deep`` runs them all (nightly's, then the costly engine-condition channels).
    """
    if names:
        items = names.split(",") if isinstance(names, str) else list(names)
        wanted = [n.strip() for n in items if n.strip()]
        for n in wanted:
            get(n)
        return list(dict.fromkeys(wanted))
    profile = profile or "quick"
    if profile not in PROFILES:
        raise ObservatoryError(f"--profile must be one of {', '.join(PROFILES)}; got {profile!r}")
    if profile == "quick":
        return []
    return [n for n, ch in channels().items() if profile == "deep" or ch.profile == "nightly"]


def plan_probes(names: Sequence[str], suite: list[Probe], requests: int | None = None) -> dict[str, list[Probe]]:
    """Each channel's own probes, made from the suite (names are unique across the session); a channel with a size
    knob (`Channel.sized`) makes REQUESTS per arm where given (``--volume N``)."""
    out: dict[str, list[Probe]] = {}
    taken = {p.name for p in suite}
    for name in names:
        ch = get(name)
        probes = ch.sized(suite, requests) if requests is not None and ch.sized is not None else ch.plan(suite)
        for p in probes:
            if p.name in taken:
                raise ObservatoryError(f"channel {name}: probe name {p.name!r} is taken")
            if p.channel != name:
                raise ObservatoryError(f"channel {name}: probe {p.name!r} must carry channel={name!r}")
            taken.add(p.name)
        out[name] = probes
    return out


def with_controls(names: Sequence[str], arms: list[Arm], roles: Mapping[str, str]) -> list[Arm]:
    """ARMS with the control arms the channels NAMES need (each channel's `control_arms`), added after them once
    (by name: an arm the session already has is not added again). ROLES: the planned arms' roles (arm name ->
    `observatory.model.roles` role; the planning layer assigns them)."""
    out = list(arms)
    for name in names:
        need = get(name).control_arms
        for arm in need(out, roles) if need else []:
            if all(a.name != arm.name for a in out):
                out.append(arm)
    return out


def channels_for(stream_interval: int | None, names: Sequence[str]) -> list[str]:
    """The channels of NAMES an arm runs: all of them, but a channel's control arm (a base streaming
    STREAM_INTERVAL tokens a chunk, which `with_controls` adds) only the channels that asked for a control: it is
    there to be compared with, not judged as a deployment (a nightly's chunked-stream control had run the 2,000
    requests of the volume replay and every other channel)."""
    return [n for n in names if not stream_interval or get(n).control_arms is not None]


def judge_channel(store: Store, session_id: int, name: str, arms: Sequence[StoredArm], roles: dict[str, str],
                  probes: dict[int, Probe], registry: GateRegistry) -> list[Verdict]:
    """The verdicts of channel NAME over one engine's ARMS (a control arm only for the channels it ran:
    `channels_for`): what the judge is given for the channels."""
    mine = [a for a in arms if name in channels_for((a.launch or {}).get("stream_interval"), [name])]
    return get(name).judge(ChannelView(store, session_id, name, mine, roles, probes, registry))
