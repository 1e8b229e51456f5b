"""Arms: what each server configuration of a session is, parsed strictly.

``--arms`` takes a comma list. Each item is one of

- a preset: ``base`` (no speculation), ``mtpK`` (MTP, K speculative tokens),
  ``ngramK`` (prompt-lookup n-gram, K tokens);
- ``spec``: the JSON given with ``--speculative-config``;
- a name defined in an arms file (``--arms-file arms.toml``);
- ``NAME=URL``: a server someone else started (nothing is launched; NAME
  still says what it is, e.g. ``mtp2=http://10.0.0.5:8001``);
- an engine prefix: ``vllm:NAME`` is NAME (vLLM, `DEFAULT_ENGINE`, is the default
  engine); ``ENGINE:NAME`` (or ``ENGINE:NAME=URL``) is one of that engine's own presets
  (`PrefixedEngine`: each engine's adapter in `observatory.engines` declares them,
  `observatory.engines.arm_engines` passes them in); the prefix stays in the arm's name;

optionally followed by ``+fault=NAME`` (launch with an injected fault, see
`observatory.faults`), ``+repair=NAME`` (launch with a known engine bug repaired in place,
`observatory.faults.repairs`: ``OBSERVATORY_REPAIR=NAME`` in the arm's environment) and by ``@IMAGE`` (run this arm in that serving image,
e.g. ``mtp2@observatory/vllm-cpu:local``; arms of two images in one session
are compared image against image, see `observatory.engines.images`). The same arm listed twice is an A/A control: the
second copy is named ``NAME#2`` and records ``copy_of``.

Arms file layout (unknown keys are errors; docs/arms.md describes it, docs/arms.schema.json is its JSON
Schema, which the loader validates with)::

    fail_on = "speedup<1.0"                # optional: performance thresholds (--fail-on wins)
    suite = "traffic.jsonl"                # optional: the probe suite (--suite wins), relative to this file
    suite_format = "openai"                # optional: its format (--suite-format wins; default: detected)

    [arms.mtp2-eager]
    speculative_config = { method = "mtp", num_speculative_tokens = 2 }
    engine_args = ["--enforce-eager"]      # flags for this arm only
    env = { SOME_VAR = "1" }               # environment for this arm only
    fault = "ghost"                        # optional
    url = "http://127.0.0.1:8001"          # optional: don't launch
    image = "vllm/vllm-openai:nightly"     # optional: run in this image
    engine = "ENGINE"                      # optional: "vllm" (default) or an engine with its own presets
    tool_parser = "qwen3_coder"            # optional: vLLM --tool-call-parser for this arm ("none": off)
    reasoning_parser = "qwen3"             # optional: vLLM --reasoning-parser for this arm ("none": off)
    deployed = true                        # optional: this arm runs the production speculation config

An arm's own parser wins over the session's (``--tool-parser``, ``--reasoning-parser``);
a parser that differs between base and a spec arm is a launch difference like any other flag
(CONFOUNDED, `observatory.judge.figures.launch_differences`).
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from observatory.faults import FAULTS as FAULT_DESCRIPTIONS
from observatory.faults.names import split_names
from observatory.faults.repairs import ENV_VAR as REPAIR_ENV
from observatory.faults.repairs import REPAIRS
from observatory.model.arms_schema import ORDER, arms_schema, speculative_config_schema
from observatory.model.errors import ArmError
from observatory.model.probe_schema import DIALECT
from observatory.model.safe_read import too_deep
from observatory.model.schema_check import first_problem, validator
from observatory.model.tomlfile import read_toml

# One list of fault names: the plugin's (observatory.faults), whichever a spec arm may take with +fault=NAME.
FAULTS = tuple(FAULT_DESCRIPTIONS)
# A parser name as vLLM spells them (hermes, qwen3_coder, deepseek_r1, ...); "none" turns the parser off.
NO_PARSER = "none"
_PARSER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
# The engine an arm runs on unless it names another (its adapter: observatory.engines.adapter).
DEFAULT_ENGINE = "vllm"
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+")
# The longest arm name stored faithfully: ArmRow.name is String(255) (tests/session/test_hostile_deadlines_storage_files.py checks it).
MAX_NAME = 255
_PRESET_RE = re.compile(r"(mtp|ngram)([1-9][0-9]?)")


class PrefixedEngine(Protocol):
    """An engine whose arms are its own presets, ``ENGINE:NAME`` (its adapter in `observatory.engines`)."""

    name: str
    arm_presets: str | None  # how the error for an unknown preset lists them

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(is one of this engine's presets, its speculative config) for NAME."""


# Engine name -> the engine, for every engine but the default one that has its own arm presets.
Engines = Mapping[str, PrefixedEngine]


def engine_names(engines: Engines | None) -> tuple[str, ...]:
    """The engines an arm may name: the default one first, then the others by name."""
    return (DEFAULT_ENGINE, *sorted(set(engines or {}) - {DEFAULT_ENGINE}))


@dataclass
class Arm:
    """One server configuration of a session."""

    name: str
    speculative_config: dict[str, Any] | None = None
    engine_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    fault: str | None = None
    copy_of: str | None = None
    image: str | None = None  # serving image named on the arm itself (ARM@IMAGE or the arms file)
    engine: str = DEFAULT_ENGINE  # which server this arm launches (or is, for a url arm): `engine_names`
    tool_parser: str | None = None  # this arm's --tool-call-parser over the session's ("none": off)
    reasoning_parser: str | None = None  # this arm's --reasoning-parser over the session's ("none": off)
    # stream N tokens per chunk without speculation (``+stream_interval=N``): the chunked-stream control of channel
    # stream_fields; its engine's adapter names the launch flag (``stream_interval_flag``)
    stream_interval: int | None = None
    # this arm runs exactly the deployment's speculation config (--deployed-spec, or `deployed = true` in an
    # arms file; observatory.session.depths)
    deployed: bool = False

    @property
    def is_spec(self) -> bool:
        """Whether this arm is meant to speculate."""
        return self.speculative_config is not None

    @property
    def num_speculative_tokens(self) -> int | None:
        """K of the speculative config, if any."""
        if self.speculative_config is None:
            return None
        k = self.speculative_config.get("num_speculative_tokens")
        return int(k) if isinstance(k, int) else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


def preset_config(name: str) -> tuple[bool, dict[str, Any] | None]:
    """(is a preset, its speculative config) for NAME."""
    if name == "base":
        return True, None
    m = _PRESET_RE.fullmatch(name)
    if not m:
        return False, None
    method, k = m.group(1), int(m.group(2))
    if method == "mtp":
        return True, {"method": "mtp", "num_speculative_tokens": k}
    return True, {
        "method": "ngram",
        "num_speculative_tokens": k,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }


def parse_speculative_config(text: str, where: str = "--speculative-config") -> dict[str, Any]:
    """A speculative config from JSON text, checked for the keys vLLM needs."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ArmError(f"{where}: not valid JSON ({e.msg} at column {e.colno}): {text[:200]!r}") from None
    except RecursionError:
        raise ArmError(f"{where}: nested too deeply to be a speculative config") from None
    if too_deep(value):
        raise ArmError(f"{where}: nested too deeply to be a speculative config")
    return check_speculative_config(value, where)


def check_speculative_config(value: Any, where: str) -> dict[str, Any]:
    """Validate a speculative config object (its JSON Schema: `arms_schema.speculative_config_schema`)."""
    problem = first_problem(_checks()["speculative_config"], value, ORDER, lambda *_: "")
    if problem is not None:
        raise ArmError(f"{where}: {problem.message}")
    return cast(dict[str, Any], value)


def check_parser(value: Any, where: str) -> str:
    """A tool-call or reasoning parser name (or "none"), never something the engine would read as a flag."""
    if not isinstance(value, str) or not _PARSER_RE.fullmatch(value):
        raise ArmError(f"{where}: {value!r} is not a parser name like hermes, qwen3_coder or none")
    return value


@cache
def _checks() -> dict[str, Any]:
    """The validators of an arms file and of a speculative config (made once, when first needed)."""
    return {"file": validator(arms_schema()),
            "speculative_config": validator({"$schema": DIALECT, **speculative_config_schema()})}


def _read(path: Path) -> dict[str, Any]:
    """The arms file at PATH, parsed and checked against its JSON Schema (the first problem, named)."""
    data = read_toml(path, ArmError, "arms file")
    for name in data.get("arms") or {} if isinstance(data.get("arms"), dict) else {}:
        if not _NAME_RE.fullmatch(name):
            raise ArmError(f"{path}: arm {name!r}: names may use letters, digits, '.', '_' and '-'")
    problem = first_problem(_checks()["file"], data, ORDER, _unknown, base=2)
    if problem is None:
        return data
    if len(problem.path) >= 2 and problem.path[0] == "arms":
        raise ArmError(f"{path}: arm {problem.path[1]!r}: {problem.message}")
    raise ArmError(f"{path}: {problem.message}")


def _unknown(at: tuple[str | int, ...], extra: list[str], allowed: list[str]) -> str:
    if not at:
        return (f"unknown top-level key {extra[0]!r}; define arms as [arms.NAME] tables (the other keys are "
                f"{', '.join(k for k in allowed if k != 'arms')})")
    return f"unknown key {extra[0]!r} (allowed: {', '.join(allowed)})"


def arms_file_fail_on(path: Path | str) -> str | None:
    """The performance thresholds an arms file sets (top-level ``fail_on``), if any."""
    value = _read(Path(path)).get("fail_on")
    return cast(str | None, value)


def arms_file_suite(path: Path | str) -> tuple[str | None, str | None]:
    """(the probe suite an arms file names, its format): ``suite`` resolved against the file's folder when it
    is a relative path that exists there (else as --suite reads it: a name in probes/ or a path), and
    ``suite_format`` (None: detected from the file)."""
    path = Path(path)
    data = _read(path)
    suite = data.get("suite")
    if suite is not None and not Path(suite).is_absolute() and (path.parent / suite).exists():
        suite = str(path.parent / suite)
    return suite, data.get("suite_format")


def arms_file_known(path: Path | str, data: dict[str, Any] | None = None) -> list[Path]:
    """The known-findings ledgers an arms file names (top-level ``known``: a path or a list of paths, relative
    to the arms file; docs/known.md)."""
    path = Path(path)
    value = (_read(path) if data is None else data).get("known")
    items = [] if value is None else [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(x, str) and x.strip() for x in items):
        raise ArmError(f"{path}: known must be a ledger file's path or a list of paths, got {value!r}")
    return [path.parent / x for x in items]


def load_arms_file(path: Path | str, engines: Engines | None = None) -> dict[str, Arm]:
    """Named arms from a TOML file, loaded strictly (ENGINES: those an arm may name besides the default)."""
    path = Path(path)
    data = _read(path)
    arms_file_known(path, data)
    arms: dict[str, Arm] = {}
    for name, raw in (data.get("arms") or {}).items():
        where = f"{path}: arm {name!r}"
        spec = raw.get("speculative_config")
        url = raw.get("url")
        if url is not None:
            url = _check_url(url, where)
        image = raw.get("image")
        if image is not None:
            image = _check_image(image, where, url)
        fault = raw.get("fault")
        engine = raw.get("engine", DEFAULT_ENGINE)
        if engine not in engine_names(engines):
            raise ArmError(f"{where}: engine must be one of {', '.join(engine_names(engines))}, got {engine!r}")
        if ((fault is not None and not _takes(engines, engine, "takes_faults"))
                or (image is not None and not _takes(engines, engine, "runs_in_images"))):
            raise ArmError(f"{where}: faults and images are vLLM's; a {engine} arm takes neither")
        deployed = raw.get("deployed", False)
        if deployed and spec is None:
            raise ArmError(f"{where}: deployed = true needs a speculative_config (the deployment's)")
        parsers = {k: raw[k] for k in ("tool_parser", "reasoning_parser") if k in raw}
        if parsers and (url is not None or not _takes(engines, engine, "takes_parsers")):
            raise ArmError(f"{where}: {', '.join(parsers)} is a flag vLLM is launched with; an arm with a url "
                           f"or on {engine} is not launched by vLLM here (start its server with the flag)")
        arms[name] = Arm(name=name, speculative_config=spec, engine_args=list(raw.get("engine_args", [])),
                         env=dict(raw.get("env", {})), url=url, fault=fault, image=image, engine=engine,
                         deployed=deployed, **parsers)
    if not arms:
        raise ArmError(f"{path}: defines no arms; add [arms.NAME] tables")
    return arms


def _takes(engines: Engines | None, engine: str, what: str) -> bool:
    """Whether ENGINE's arms take WHAT (its adapter's ``takes_faults``, ``runs_in_images``, ``takes_parsers``): the
    default engine, never among ENGINES, takes all three; another engine only what its adapter says it takes."""
    adapter = (engines or {}).get(engine)
    return adapter is None or bool(getattr(adapter, what, False))


def _check_url(url: Any, where: str) -> str:
    if not isinstance(url, str) or not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        raise ArmError(f"{where}: {url!r} is not an http(s) URL like http://127.0.0.1:8000")
    u = urlsplit(url)
    try:
        port = u.port
    except ValueError:
        port = None
        bad = True
    else:
        bad = u.netloc.endswith(":")  # an empty port: urlsplit reads it as none, the client as 80
    if bad or not u.hostname or (port is not None and port < 1):
        raise ArmError(f"{where}: {url!r} has no valid host and port; give e.g. http://127.0.0.1:8000")
    return url.rstrip("/")


def parse_arms(
    spec: str,
    arms_file: Path | str | None = None,
    speculative_config: str | None = None,
    engines: Engines | None = None,
) -> list[Arm]:
    """The session's arms, in run order, from the --arms list (ENGINES: those with a prefix of their own,
    `observatory.engines.arm_engines.parse_arms` passes every registered one)."""
    engines = engines or {}
    defined = load_arms_file(arms_file, engines) if arms_file else {}
    custom = parse_speculative_config(speculative_config) if speculative_config else None
    items = [s.strip() for s in spec.split(",")]
    if not spec.strip() or any(not s for s in items):
        raise ArmError(f"--arms {spec!r}: give a comma list of arm names, e.g. base,mtp1,mtp2")
    arms: list[Arm] = []
    counts: dict[str, int] = {}
    for item in items:
        arm = _parse_item(item, defined, custom, engines)
        counts[arm.name] = counts.get(arm.name, 0) + 1
        if counts[arm.name] > 1:
            arm.copy_of = arm.name
            arm.name = f"{arm.name}#{counts[arm.name]}"
        arms.append(arm)
    for arm in arms:
        if len(arm.name) > MAX_NAME:  # stored whole or not at all: two cut names collided (issue 32 item 6)
            raise ArmError(f"arm name {arm.name[:40]!r}... has {len(arm.name)} characters; at most {MAX_NAME} "
                           "(with its +fault=, @IMAGE and #N) are stored")
    # Arms on several engines: each engine keeps its own base (observatory.model.roles); the bases are
    # compared across engines apart from every verdict (observatory.judge.cross_engine).
    if speculative_config and not any(a.name.split("#")[0].startswith("spec") for a in arms):
        raise ArmError("--speculative-config was given but no arm named 'spec' is in --arms")
    return arms


def _parse_item(item: str, defined: dict[str, Arm], custom: dict[str, Any] | None, engines: Engines) -> Arm:
    prefix, colon, rest = item.partition(":")
    if colon and rest and prefix in engines:  # ENGINES never holds the default engine (`Engines`)
        return _parse_engine_item(engines[prefix], item, rest, defined)
    if colon and rest and prefix in engine_names(engines):  # the default engine's own: vllm:NAME is NAME
        item = rest
    m = re.fullmatch(r"([^=+]+)=(https?://\S+)", item)
    if m:
        name, url = m.group(1), _check_url(m.group(2), f"--arms item {item!r}")
        if not _NAME_RE.fullmatch(name):
            raise ArmError(f"--arms item {item!r}: bad arm name {name!r}")
        base = _resolve(name, defined, custom, allow_unknown=True)
        base.url = url
        return base
    item, image = _split_image(item)
    name, *options = item.split("+")
    arm = _resolve(name, defined, custom, allow_unknown=False)
    for opt in options:
        key, _, value = opt.partition("=")
        if key not in ("fault", "repair", "stream_interval") or not value:
            raise ArmError(f"--arms item {item!r}: unknown option {opt!r}; the options are +fault=NAME, "
                           "+repair=NAME and +stream_interval=N")
        if key == "repair":
            _add_repair(arm, value, item)
        elif key == "stream_interval":
            arm.stream_interval = _stream_interval(value, item, arm)
        elif value not in FAULTS:
            raise ArmError(f"--arms item {item!r}: unknown fault {value!r} (known: {', '.join(FAULTS)})")
        else:
            arm.fault = value
        arm.name = f"{arm.name}+{key}={value}"
    if arm.fault and not arm.is_spec:
        raise ArmError(f"--arms item {item!r}: a fault needs a speculating arm (e.g. mtp1+fault={arm.fault})")
    if image is not None:
        arm.image = _check_image(image, f"--arms item {item}@{image!r}", arm.url)
        arm.name = f"{arm.name}@{image}"
    return arm


def _stream_interval(value: str, item: str, arm: Arm) -> int:
    """+stream_interval=N: N tokens per streamed chunk, 2..64, on a launched arm that does not speculate."""
    if not (value.isascii() and value.isdigit()) or not 2 <= int(value) <= 64:
        raise ArmError(f"--arms item {item!r}: +stream_interval takes a whole number of tokens per chunk in 2..64, "
                       f"got {value[:20]!r}")
    if arm.is_spec or arm.url is not None:
        raise ArmError(f"--arms item {item!r}: +stream_interval makes a chunked-stream control: a launched arm "
                       "without speculation (e.g. base+stream_interval=3)")
    return int(value)


def _add_repair(arm: Arm, name: str, item: str) -> None:
    """ARM launched with the engine repair NAME (``OBSERVATORY_REPAIR``, added to the arm's own list)."""
    if name not in REPAIRS:
        raise ArmError(f"--arms item {item!r}: unknown repair {name!r} (known: {', '.join(sorted(REPAIRS))})")
    if arm.url is not None:
        raise ArmError(f"--arms item {item!r}: a repair is applied to a server the observatory launches, "
                       "not to a URL arm")
    arm.env[REPAIR_ENV] = ",".join(sorted(split_names(arm.env.get(REPAIR_ENV, "")) | {name}))


def _parse_engine_item(of: PrefixedEngine, item: str, rest: str, defined: dict[str, Arm]) -> Arm:
    """``ENGINE:NAME`` or ``ENGINE:NAME=URL``: an arm of that engine (one of its presets, or an arms-file arm of
    it), named with its prefix."""
    engine = of.name
    name, eq, url = rest.partition("=")
    if "+" in name or "@" in name:
        raise ArmError(f"--arms item {item!r}: faults (+fault=) and images (@IMAGE) are vLLM's; "
                       f"a {engine} arm takes neither")
    if name in defined:
        arm = copy.deepcopy(defined[name])
        if arm.engine != engine:
            raise ArmError(f"--arms item {item!r}: the arms file defines {name!r} without engine = \"{engine}\"")
    else:
        is_preset, config = of.arm_preset(name)
        if not is_preset:
            near = did_you_mean(name, [n for n in ("base", "draft1", "draft2", "draft3", "ngram2", "ngram3", "ngram4",
                                                   "mtp1", "mtp2", "mtp3") if of.arm_preset(n)[0]] + list(defined),
                                f"{engine}:")
            raise ArmError(f"Unknown {engine} arm {name!r} in {item!r}{near}. Presets: {of.arm_presets}, "
                           f"K = 1..99; or an arms-file name with engine = \"{engine}\".")
        arm = Arm(name=name, speculative_config=config, engine=engine)
    arm.name = f"{engine}:{arm.name}"
    if eq:
        arm.url = _check_url(url, f"--arms item {item!r}")
    return arm


# -- serving images per arm (ARM@IMAGE) ---------------------------------------
_IMAGE_RE = re.compile(r"[a-z0-9][a-z0-9._/:@\-]*")


def _split_image(item: str) -> tuple[str, str | None]:
    """'mtp2@IMG' -> ('mtp2', 'IMG'); an image reference may itself hold '@sha256:...'."""
    head, at, image = item.partition("@")
    return (head, image) if at else (item, None)


def _check_image(image: Any, where: str, url: str | None) -> str:
    if url is not None:
        raise ArmError(f"{where}: an arm with a url is not launched, so it cannot name an image")
    if not isinstance(image, str) or not _IMAGE_RE.fullmatch(image):
        raise ArmError(f"{where}: {image!r} is not a docker image reference like observatory/vllm-cpu:local")
    return image


def did_you_mean(name: str, candidates: list[str], prefix: str = "") -> str:
    """" (did you mean 'PREFIX+match'?)" for the closest of CANDIDATES to a mistyped NAME (difflib), else ""."""
    close = difflib.get_close_matches(name.lower(), candidates, n=1, cutoff=0.6)
    return f" (did you mean {prefix + close[0]!r}?)" if close else ""


def _resolve(name: str, defined: dict[str, Arm], custom: dict[str, Any] | None, allow_unknown: bool) -> Arm:
    if name in defined:
        return copy.deepcopy(defined[name])
    if name == "spec" and custom is not None:
        return Arm(name=name, speculative_config=copy.deepcopy(custom))
    is_preset, config = preset_config(name)
    if is_preset:
        return Arm(name=name, speculative_config=config)
    if allow_unknown and _NAME_RE.fullmatch(name):
        # An external server under a free-form name: we cannot know its
        # config; treat it as speculating unless it says "base".
        return Arm(name=name, speculative_config={"method": "unknown"})
    hint = "; define it in an arms file (--arms-file)" if not defined else f"; the arms file defines {', '.join(sorted(defined))}"
    near = did_you_mean(name, ["base", "mtp1", "mtp2", "mtp3", "ngram2", "ngram3", "ngram4", "spec", *defined])
    raise ArmError(f"Unknown arm {name!r}{near}. Presets: base, mtpK, ngramK (K = 1..99), spec (with --speculative-config){hint}.")


def depth_coverage(arms: list[dict[str, Any]]) -> dict[str, Any]:
    """The depths a session covered, from its arms' stored facts ({"name", "status", "speculative_config",
    "deployed"}): every k planned, every k measured to its end, the deployed k and its arm."""
    planned: set[int] = set()
    covered: set[int] = set()
    deployed_arm: dict[str, Any] | None = None
    for a in arms:
        spec = a.get("speculative_config")
        k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
        if a.get("deployed"):
            deployed_arm = a
        if not isinstance(k, int) or isinstance(k, bool):
            continue
        planned.add(k)
        if a.get("status") == "ok":
            covered.add(k)
    out: dict[str, Any] = {"planned": sorted(planned), "covered": sorted(covered), "deployed_k": None,
                           "deployed_arm": None, "deployed_measured": None}
    if deployed_arm is not None:
        spec = deployed_arm.get("speculative_config") or {}
        out.update(deployed_k=spec.get("num_speculative_tokens"), deployed_arm=deployed_arm.get("name"),
                   deployed_config=spec, deployed_measured=deployed_arm.get("status") == "ok")
    return out
