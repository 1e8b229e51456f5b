"""The one options type of a compare session: what was asked (`SessionPlan`) and what it resolved to
(`CompareOptions`).

`SessionPlan` is built once from the command line (`SessionPlan.from_options`:
click's keyword arguments, or an arms file's), stored with the session as
``{"version": 1, ...}`` and rebuilt from there by ``compare --resume``
(`SessionPlan.from_stored`), so a resumed session runs from the plan, not from
whatever the command-line options are called today. A plan stored before
versions existed (the raw keyword arguments of `plan_compare`) is read when
its keys are known, and refused by name when not.

`CompareOptions` is the plan validated by `observatory.session.plan.plan_compare`:
the plan itself, and only what it resolves to (the parsed arms, the engine
settings, the probes, the channels, the GPUs found). Every phase reads the
plan's own fields from ``opts.plan`` (``opts.plan.repeat``, ``opts.plan.timing``,
...): no phase re-reads click's keyword arguments or copies a plan field
under another name.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints

from observatory.engines.settings import EngineSettings
from observatory.model.arms import DEFAULT_ENGINE, Arm, arms_file_fail_on, arms_file_suite
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe
from observatory.model.redact import MASK, redact, remember_engine

PLAN_VERSION = 1


@dataclass(frozen=True)
class SessionPlan:
    """What one compare session was asked for (stored as version 1; `--resume` runs from it)."""

    arms: str
    arms_file: str | None = None
    speculative_config: str | None = None
    # the production speculation config (JSON or a launch command line): an arm runs exactly it (session.depths)
    deployed_spec: str | None = None
    model: str | None = None
    suite: str | None = None
    suite_format: str | None = None  # --suite-format: the suite file's format (None: .toml or detected)
    engine_python: str | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    seed: int = 0
    engine_args: tuple[str, ...] = ()
    spec_extra: str | None = None
    concurrency: str = "1"
    repeat: int = 1
    health_timeout: float = 900.0
    request_timeout: float = 300.0
    log_dir: str = "logs"
    diffs: bool = True
    image: str | None = None
    gpus_per_arm: int = 1
    parallel_arms: bool = False
    timing: str = "auto"
    engine: str = DEFAULT_ENGINE
    fail_on: str | None = None
    gates_dirs: tuple[str, ...] = ()  # absolute paths
    profile: str = "quick"  # field channels: quick (none) or nightly (all), docs/channels.md
    # nightly profile: an A/A copy of each base arm is added unless --arms has one (--no-aa-copy: never).
    # Plans stored before this field existed ran without one: from_stored reads them as False.
    aa_copy: bool = True
    # the channels' control arms (stream_fields' chunked-stream base) are added when they run, unless
    # --no-channel-controls; plans stored before this field existed ran without them: from_stored reads False
    channel_controls: bool = True
    channels: str | None = None  # a comma list of channels, over the profile's
    tool_parser: str = "hermes"  # vLLM --tool-call-parser of launched arms ("none": off); an arm's own wins
    reasoning_parser: str | None = None  # vLLM --reasoning-parser of launched arms ("none" or None: off)
    volume: int | None = None  # the volume channel's requests per arm (--volume N; None: its default, 0: none)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SessionPlan:
        """The plan of the command's options (``no_diffs`` as ``diffs``; the arms file's fail_on if no --fail-on)."""
        kw = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        for name, value in options.items():
            kw.update(plan_value(name, value))
        if not kw.get("fail_on") and kw.get("arms_file"):
            kw["fail_on"] = arms_file_fail_on(kw["arms_file"])  # --fail-on wins over the arms file
        if not kw.get("suite") and kw.get("arms_file"):
            suite, suite_format = arms_file_suite(kw["arms_file"])  # --suite wins over the arms file
            if suite is not None:
                kw["suite"] = suite
                kw["suite_format"] = kw.get("suite_format") or suite_format
        return cls(**kw)

    @property
    def levels(self) -> list[int]:
        """The throughput levels of ``concurrency`` ('1,4,16' -> [1, 4, 16]; a bad list is an ObservatoryError)."""
        return parse_int_list(self.concurrency, "--concurrency")

    def to_stored(self) -> dict[str, Any]:
        """JSON form, with its version."""
        return {"version": PLAN_VERSION, **{k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}}

    @classmethod
    def from_stored(cls, stored: Mapping[str, Any] | None, session_id: int) -> SessionPlan:
        """The plan stored with SESSION_ID: version 1, or the raw options stored before plans had versions."""
        if not stored:
            raise ObservatoryError(f"Session {session_id} has no stored plan to resume from; start a new session.")
        data = dict(stored)
        version = data.pop("version", None)
        if version is not None and version != PLAN_VERSION:
            raise ObservatoryError(f"Session {session_id} was planned by a newer observatory (plan version "
                                   f"{version!r}, this one reads {PLAN_VERSION}); upgrade observatory to resume it.")
        hints = get_type_hints(cls)
        unknown = sorted(set(data) - set(hints))
        if unknown or "arms" not in data:
            what = f"options this version does not know ({', '.join(unknown)})" if unknown else "no arms"
            raise ObservatoryError(f"Session {session_id}'s stored plan has {what}; it cannot be resumed. "
                                   "Start a new session with `observatory compare`.")
        for key, value in data.items():
            if not _fits(value, hints[key]):
                raise ObservatoryError(f"Session {session_id}'s stored plan has {key} = {value!r}, not a "
                                       f"{hints[key]}; it cannot be resumed. Start a new session.")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items()}
        values.setdefault("aa_copy", False)  # as such sessions ran: no arm added
        values.setdefault("channel_controls", False)
        return cls(**values)

    def refuse_conflicts(self, given: Mapping[str, tuple[str, Any]], session_id: int) -> SessionPlan:
        """Refuse flags given with --resume that differ from this plan; GIVEN is {option: (flag, value)}.

        Returns the plan to run: this one, with the credentials its stored form masked given back.
        """
        plan = self
        for name, (flag, value) in given.items():
            for key, want in plan_value(name, value).items():
                have = getattr(self, key, None)
                if key == "engine_args":
                    remember_engine(want, {})  # so the masked stored form is recognised below
                if key in {f.name for f in fields(self)} and want != have and redact(want) == have:
                    plan = replace(plan, **{key: want})  # the credential the stored plan masked, given again
                elif key in {f.name for f in fields(self)} and want != have:
                    raise ObservatoryError(
                        f"{flag} conflicts with session {session_id}'s stored plan: {key} {_shown(want)} given, "
                        f"{_shown(have)} stored. Drop {flag} to resume it, or start a new session.")
        if any(MASK in a for a in plan.engine_args):  # issue 32 item 1: never launched as "***"
            raise ObservatoryError(
                f"Session {session_id}'s stored --engine-arg values hold a credential masked when stored "
                f"({_shown(plan.engine_args)}); give the same --engine-arg flags again with --resume.")
        return plan


def plan_value(option: str, value: Any) -> dict[str, Any]:
    """A command option as plan fields ({} for options that are not part of a plan, e.g. --db, --quiet)."""
    if option == "no_diffs":
        return {"diffs": not value}
    if option == "gates_dirs":
        return {option: tuple(str(Path(d).resolve()) for d in value or ())}
    if option == "engine_args":
        return {option: tuple(value or ())}
    if option in ("quiet", "db", "api_key", "diffs") or option not in SessionPlan.__dataclass_fields__:
        return {}
    return {option: value}


def _shown(value: Any) -> str:
    return repr(list(value)) if isinstance(value, tuple) else repr(value)


def _fits(value: Any, hint: Any) -> bool:
    """Whether a stored JSON value has the type of a SessionPlan field."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, (list, tuple)) and all(isinstance(x, str) for x in value)
    if hint in (int, float) and isinstance(value, bool):
        return False
    if hint is float:
        return isinstance(value, (int, float))
    return isinstance(value, hint)


# The highest level taken: one thread and connection per request in flight; 99,999,999,999 was taken and
# the session hung building its batch (hostile round three).
MAX_INT_LIST_VALUE = 4096


def parse_int_list(text: str, what: str) -> list[int]:
    """'1,4,16' -> [1, 4, 16], all in 1..MAX_INT_LIST_VALUE."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ObservatoryError(f"{what}: expected a comma list of positive integers, got {text[:80]!r}") from None
    if not values or any(v < 1 or v > MAX_INT_LIST_VALUE for v in values):
        raise ObservatoryError(f"{what}: expected a comma list of integers in 1..{MAX_INT_LIST_VALUE}, "
                               f"got {text[:80]!r}")
    return values


@dataclass
class CompareOptions:
    """A validated `SessionPlan` and what it resolved to (made by `observatory.session.plan.plan_compare`)."""

    plan: SessionPlan
    arms: list[Arm]
    settings: EngineSettings
    probes: list[Probe]
    suite: str  # the probe file's path
    api_key: str | None = None  # never part of the plan: never stored
    command: list[str] = field(default_factory=list)  # the command line, credentials masked
    gpu_count: int = 0
    # field channels (observatory.channels) run after the correctness pass, in this order
    channels: list[str] = field(default_factory=list)
    channel_probes: dict[str, list[Probe]] = field(default_factory=dict)
    # the timing design the session runs (observatory.session.plan.resolve_timing: --timing auto resolved), and
    # why auto fell back to sequential (None: it did not)
    timing: str = "sequential"
    timing_note: str | None = None
    # what the user should read before the session runs: the suite's format and the records it dropped, or
    # that a model of theirs runs the model-agnostic suite (printed by run_compare, not stored)
    notes: list[str] = field(default_factory=list)
    # which arm runs the deployed speculation config (observatory.session.depths), None when none is known
    depth_note: str | None = None

    def all_probes(self) -> list[Probe]:
        """The suite's probes, then every channel's, in the order they are stored."""
        return [*self.probes, *(p for name in self.channels for p in self.channel_probes.get(name, []))]
