"""One engine as the observatory sees it: the `EngineAdapter` protocol, `Dialect` (its defaults) and the registry.

An adapter says how an engine is launched (`server_argv`, `check_installed`, `max_port`, `runs_in_images`,
`takes_faults`, `takes_parsers`, `host_env`, readiness at `health_path`, dev mode: `dev_mode_env`), what it is
(`version_path`, `version_key`, `binary`, its presets `arm_presets` / `arm_preset`), what it counts
(`counters_from_metrics`, `counters_from_response`: `observatory.engines.spec_counters`; `kv_cache_info`,
`preemptions`), how its answers carry ids and logprobs (`ids_in_choices`, `streams_*`, `request_params`, `take_ids`)
and how it tokenizes (`tokenize`, `text_ids`, `ids_text`); which knobs triage may turn (`triage_knobs`). Each
engine's adapter lives in that engine's own module (`observatory.engines.vllm`, `observatory.engines.sglang`,
`observatory.engines.llamacpp`), registered by name in `BUILTIN` and pyproject.toml's ``observatory.engines`` entry
points; an installed package registers its own the same way (docs/plugins.md). Every module outside engines/ asks
`adapter_for` instead of naming an engine, and so does the launch (`observatory.engines.server`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from observatory.engines.spec_counters import EngineCounters
from observatory.model.arms import DEFAULT_ENGINE
from observatory.model.errors import ObservatoryError
from observatory.model.plugins import ENGINES, Plugin, discover
from observatory.model.probes import Probe

if TYPE_CHECKING:
    from observatory.engines.settings import EngineSettings
    from observatory.model.arms import Arm


def check_module(python: str, module: str, env: Mapping[str, str], what: str, hint: str) -> None:
    """PYTHON exists and imports MODULE in the environment an arm launches with (ENV: its overrides, e.g. an
    arms file's PYTHONPATH), else ObservatoryError naming WHAT (the engine) and ending in HINT."""
    if not Path(python).exists():
        raise ObservatoryError(f"Engine interpreter {python} does not exist (set --engine-python).")
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    r = subprocess.run([python, "-c", code], capture_output=True, timeout=60, env={**os.environ, **env})
    if r.returncode != 0:
        raise ObservatoryError(f"{what} is not installed for {python}. {hint}")


class EngineAdapter(Protocol):
    """One engine as the observatory reads it: version, speculative-decoding statistics, and its dialect.

    The dialect attributes (`Dialect` gives vLLM's as defaults) are what every module outside
    engines/ asks instead of naming an engine: which binary a launched arm ran, whether a stream
    carries every id, which launch flags are the arm's speculation, how a prompt is tokenized.
    """

    name: str
    version_key: str  # the field of version_path()'s JSON that holds the version
    binary: str | None  # a launched arm's executable (argv[0]'s file name); None: vLLM's ``python -m``
    streams_drafted_ids: bool  # a streamed answer carries an id for every token, drafted ones too
    stream_ids_note: str  # why not, where it does not (shown with the verdict it makes unmeasurable)
    speculation_flags: str | None  # prefix of the launch flags that are the arm's speculation itself
    ids_in_choices: bool  # token ids come as ``choices[].token_ids`` (asked with ``return_token_ids``), not in logprobs
    streams_chat_ids: bool  # a streamed chat completion can carry the ids (else correctness chats go whole)
    streams_tool_logprobs: bool  # logprobs on a streamed request with tools (else such probes go whole)
    # a streamed answer carries the end token's entry, as usage counts it (optional: True when absent)
    streams_end_token: bool = True
    # the highest port a launched server may be given (optional: 65535 when absent)
    max_port: int = 65535
    # the path whose 200 says a server is ready (optional: "/health" when absent; EngineClient.health)
    health_path: str = "/health"
    # optional, `Dialect` gives vLLM's: the module a launched arm runs (None: a binary), the engine's name in
    # messages, whether its log names its CUDA graphs, whether URL arms get the logprobs preflight, whether its
    # arms may run in serving images
    engine_module: str | None = "vllm"
    display: str = "vLLM"
    logs_cuda_graphs: bool = True
    preflight_logprobs: bool = True
    runs_in_images: bool = True
    # optional (`Dialect`: none, False; `observatory.engines.vllm` says vLLM's): whether its arms take an injected
    # fault (+fault=) and the session's tool and reasoning parser flags; the environment that turns on its dev-mode
    # endpoints (the lifecycle channel's sleep, wake, reset and reload), and its preemption counter's name
    takes_faults: bool = False
    takes_parsers: bool = False
    dev_mode_env: Mapping[str, str] = {}
    preemptions_metric: str = ""
    # optional, `Dialect` gives vLLM's: the presets of ``ENGINE:NAME`` arms as an error lists them (None: the
    # engine's arms are the default presets, ENGINE:NAME is NAME; see `arm_preset`), the OBSERVATORY_*
    # variables its arms read (name, what it does: `observatory --help` lists them)
    arm_presets: str | None = None
    env_vars: tuple[tuple[str, str], ...] = ()
    # optional: the knobs triage may turn on its arms (`observatory.engines.knobs.Knob` rows, in the order tried;
    # empty when absent: triage declines the engine)
    triage_knobs: tuple[Any, ...] = ()
    # optional, `Dialect` gives vLLM's: the body field of a client's own request id (None: none), the launch flag
    # that streams N tokens per chunk (None: none)
    request_id_field: str | None = "request_id"
    stream_interval_flag: str | None = "--stream-interval"
    # optional: launch flags only a speculating arm may carry that change no output (vLLM's per-request speculative
    # counters): not a difference from base (`observatory.judge.figures.launch_differences`)
    spec_only_flags: tuple[str, ...] = ()

    def check_installed(self, python: str, env: Mapping[str, str]) -> None:
        """Raise ObservatoryError unless an arm of this engine can be launched with PYTHON in ENV."""

    def server_argv(self, arm: Arm, settings: EngineSettings, port: int, image: str | None = None,
                    env: dict[str, str] | None = None, gpus: list[int] | None = None, container: str | None = None,
                    labels: dict[str, str] | None = None) -> list[str]:
        """The command line that launches ARM's server on 127.0.0.1:PORT with SETTINGS: directly, or (only where
        `runs_in_images`) in IMAGE, with the arm's environment overrides ENV, its GPUS, a CONTAINER name and
        LABELS (`observatory.engines.server.engine_argv` asks it; readiness is GET /health there)."""

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """Where `arm_presets`: (is one of this engine's presets, its speculative config) for ``ENGINE:NAME``."""

    def request_params(self, params: dict[str, Any], chat: bool) -> dict[str, Any]:
        """A correctness pass's PARAMS (vLLM's form) as this engine is asked for them (CHAT: a chat completion)."""

    def take_ids(self, out: Any, choice: Mapping[str, Any], chat: bool) -> int:
        """Where `ids_in_choices`: append one choice's ids (and texts, top-k) to the answer OUT; how many."""

    def tokenize(self, post: Post, base_url: str, model: str, probe: Probe) -> dict[str, list[Any]]:
        """{"ids", "pieces"} of PROBE's rendered prompt as the server tokenizes it (POST through POST)."""

    def text_ids(self, post: Post, model: str, text: str) -> Any:
        """TEXT's ids (no special tokens) as /tokenize answers them; POST takes a server-relative path."""

    def ids_text(self, post: Post, model: str, ids: list[int]) -> str | None:
        """The text of IDS as /detokenize answers it (None: no answer); POST takes a server-relative path."""

    def version_path(self) -> str:
        """HTTP path to GET for the engine version."""

    def feature_args(self, feature: str) -> list[str]:
        """Optional (`Dialect`: none): the launch flags that make this engine report FEATURE, a name a channel
        needs (`observatory.channels.Channel.engine_features`, e.g. "prompt_tokens_details")."""

    def spec_from_argv(self, argv: list[str]) -> dict[str, Any] | None:
        """Optional (`Dialect`: None): the speculative config of one of this engine's launch command lines
        (``--deployed-spec``, `observatory.session.depths`), None when it holds none."""

    def prompt_embeds_body(self, values: Any, dtype: str) -> dict[str, Any] | None:
        """Optional (`Dialect`: None, not served): the completion request's fields that send a prompt as
        embeddings VALUES (a numpy (tokens, hidden) array of DTYPE, bfloat16 as raw uint16 words)."""

    def spec_cache_blocks_recomputed(self, spec: Mapping[str, Any]) -> tuple[int, str]:
        """Optional (`Dialect`: 0): how many blocks of a prefix-cache hit an arm with speculative config SPEC
        recomputes by the engine's design, and why (channel ``prefix_cache`` allows that deficit against base)."""

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters | None:
        """Cumulative counters from /metrics text (only MODEL's series, when given); None if the engine exposes none."""

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        """Per-request counters from a response body or final stream chunk; None if absent."""

    def host_env(self, n_gpus: int) -> dict[str, str]:
        """Optional (`Dialect`: none): the environment its arms need on a host with N_GPUS GPUs."""

    def kv_cache_info(self, text: str) -> dict[str, str] | None:
        """Optional (`Dialect`: None): the KV cache's settings in /metrics text (``block_size``,
        ``num_gpu_blocks``), None where the engine publishes none."""

    def preemptions(self, text: str) -> int | None:
        """Optional (`Dialect`: None): its preemption counter's total in /metrics text, None if absent."""

    def prefix_cache_hits(self, text: str) -> int | None:
        """Optional (`Dialect`: None): its prefix-cache hit counter (tokens) in /metrics text, None if absent."""


Post = Callable[[str, dict[str, Any]], Any]  # POST a JSON body to a URL, return the decoded answer


class Dialect:
    """vLLM's dialect, the default every adapter starts from (see `EngineAdapter`)."""

    binary: str | None = None
    health_path = "/health"  # GET answering 200: ready (vLLM's, SGLang's and llama-server's)
    streams_drafted_ids = True
    stream_ids_note = ""
    speculation_flags: str | None = None
    ids_in_choices = False
    streams_chat_ids = True
    streams_tool_logprobs = True
    # the Python module a launched arm runs (`check_installed`); None: a binary (llama.cpp)
    engine_module: str | None = "vllm"
    display = "vLLM"  # the engine's name in messages
    # what to tell a user whose engine interpreter lacks it
    install_hint = ("Install it (on a CPU machine: `pip install -e '.[cpu]'`, see README), or point "
                    "--engine-python at an interpreter that has it, or give every arm a URL (NAME=http://...).")
    # its server logs the CUDA graphs it captured (observatory.judge.graph_coverage reads them)
    logs_cuda_graphs = True
    # a URL arm's server is asked for one token with logprobs and ids before the session (session.preflight)
    preflight_logprobs = True
    # its arms may run in a serving image (ARM@IMAGE, --image: observatory.engines.images)
    runs_in_images = True
    # its arms may take a fault of the plugin its engine process loads (+fault=: observatory.faults) and the
    # session's --tool-parser / --reasoning-parser flags (observatory.engines.settings.arm_parsers): vLLM's do
    takes_faults = False
    takes_parsers = False
    # the environment that exposes its dev-mode endpoints (the lifecycle channel launches a second engine with it
    # where the arm's own does not expose them), and its preemption counter as a message names it: none
    dev_mode_env: Mapping[str, str] = {}
    preemptions_metric = ""
    # its ENGINE:NAME arms' presets, listed (None: ENGINE:NAME is the default presets' NAME), and its env vars
    arm_presets: str | None = None
    env_vars: tuple[tuple[str, str], ...] = ()
    # the knobs triage may turn (`observatory.engines.knobs`); none unless the engine declares them (vLLM's do)
    triage_knobs: tuple[Any, ...] = ()
    # the request body field a client names its own request id by (vLLM's ``request_id``; its ``X-Request-Id``
    # header overrides it): the cancel channel reuses an id through it. None: the engine takes none
    request_id_field: str | None = "request_id"
    # the launch flag that streams N tokens per chunk (vLLM's ``--stream-interval N``): the chunked-stream control
    # arm (``+stream_interval=N``, channel stream_fields) is launched with it. None: the engine has none
    stream_interval_flag: str | None = "--stream-interval"
    # launch flags a speculating arm alone carries that change no output (`EngineAdapter.spec_only_flags`)
    spec_only_flags: tuple[str, ...] = ()

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(is a preset of this engine's own, its speculative config): none of its own (`arm_presets` None)."""
        return False, None

    def feature_args(self, feature: str) -> list[str]:
        """No launch flag for any feature: an engine that reports what it reports."""
        return []

    def spec_from_argv(self, argv: list[str]) -> dict[str, Any] | None:
        """No command line read: give the deployed config as JSON."""
        return None

    def prompt_embeds_body(self, values: Any, dtype: str) -> dict[str, Any] | None:
        """No prompt given as embeddings: the engine serves token ids and text only."""
        return None

    def spec_cache_blocks_recomputed(self, spec: Mapping[str, Any]) -> tuple[int, str]:
        """No prefix-cache block recomputed by design."""
        return 0, ""

    def host_env(self, n_gpus: int) -> dict[str, str]:
        """Nothing beyond the arm's own environment."""
        return {}

    def kv_cache_info(self, text: str) -> dict[str, str] | None:
        """Not published."""
        return None

    def preemptions(self, text: str) -> int | None:
        """Not counted."""
        return None

    def prefix_cache_hits(self, text: str) -> int | None:
        """Not counted."""
        return None

    def check_installed(self, python: str, env: Mapping[str, str]) -> None:
        """Raise ObservatoryError unless an arm of this engine can be launched with PYTHON in ENV (its overrides)."""
        if self.engine_module is not None:
            check_module(python, self.engine_module, env, self.display, self.install_hint)

    def server_argv(self, arm: Arm, settings: EngineSettings, port: int, image: str | None = None,
                    env: dict[str, str] | None = None, gpus: list[int] | None = None, container: str | None = None,
                    labels: dict[str, str] | None = None) -> list[str]:
        """An adapter that launches nothing (an installed one that only reads URL arms): an error that says so."""
        raise ObservatoryError(f"{self.display} arms are not launched by the observatory: start the server "
                               "yourself and give the arm a URL (NAME=http://...)")

    def request_params(self, params: dict[str, Any], chat: bool) -> dict[str, Any]:
        """PARAMS as they are: vLLM's ``return_tokens_as_token_ids`` (an engine that ids its entries its own way
        ignores it)."""
        return params

    def take_ids(self, out: Any, choice: Mapping[str, Any], chat: bool) -> int:
        """Only an engine whose ids come in ``choices[]`` (`ids_in_choices`) reads them itself."""
        raise NotImplementedError(f"{self.display}'s ids are in its logprobs entries (ids_in_choices is False)")

    def tokenize(self, post: Post, base_url: str, model: str, probe: Probe) -> dict[str, list[Any]]:
        """/tokenize with the chat template applied by the server (vLLM's and SGLang's form)."""
        tools = {"tools": probe.tools} if probe.tools is not None else {}
        body: dict[str, Any] = ({"model": model, "messages": probe.messages, "add_generation_prompt": True, **tools}
                                if probe.kind == "chat" else {"model": model, "prompt": probe.prompt})
        got = post(f"{base_url}/tokenize", {**body, "return_token_strs": True})
        ids = [int(t) for t in got["tokens"]]
        return {"ids": ids, "pieces": [str(p) for p in got.get("token_strs") or [""] * len(ids)]}

    def text_ids(self, post: Post, model: str, text: str) -> Any:
        """vLLM's and SGLang's /tokenize: {"model", "prompt", "add_special_tokens"} -> {"tokens": [ids]}."""
        got = post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})
        return got.get("tokens") if isinstance(got, dict) else None

    def ids_text(self, post: Post, model: str, ids: list[int]) -> str | None:
        """vLLM's and SGLang's /detokenize: {"model", "tokens"} -> {"prompt": text}."""
        got = post("/detokenize", {"model": model, "tokens": ids})
        return str(got.get("prompt", "")) if isinstance(got, dict) else None


class OwnServer(Dialect):
    """An engine the observatory launches from its own module's functions, never in a serving image: the
    subclass names them, ``launch`` (ARM, SETTINGS, PORT -> the command line) and ``presets`` (NAME -> (is one
    of its ``ENGINE:NAME`` presets, its speculative config)). llama.cpp's and SGLang's adapters are such."""

    runs_in_images = False
    request_id_field: str | None = None  # not verified on these engines: the channels say "not exercised"
    stream_interval_flag: str | None = None
    launch: staticmethod[[Arm, EngineSettings, int], list[str]]
    presets: staticmethod[[str], tuple[bool, dict[str, Any] | None]]

    def server_argv(self, arm: Arm, settings: EngineSettings, port: int, image: str | None = None,
                    env: dict[str, str] | None = None, gpus: list[int] | None = None, container: str | None = None,
                    labels: dict[str, str] | None = None) -> list[str]:
        """``launch``'s command line (no image, environment, GPUs or container: `runs_in_images` is False)."""
        return self.launch(arm, settings, port)

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """``presets``' answer for NAME."""
        return self.presets(name)


# The built-in adapters, exactly as pyproject.toml declares them (``observatory.engines`` entry points): engine
# name -> "module:class"; an alias names the same class (tests/model/test_plugins.py checks the two agree).
BUILTIN = {
    "vllm": "observatory.engines.vllm:VLLMAdapter",
    "sglang": "observatory.engines.sglang:SGLangAdapter",
    "llama.cpp": "observatory.engines.llamacpp:LlamaCppAdapter",
    "llamacpp": "observatory.engines.llamacpp:LlamaCppAdapter",
    "llama-server": "observatory.engines.llamacpp:LlamaCppAdapter",
}


def plugins() -> tuple[Plugin, ...]:
    """The adapters' entry points: the built-ins (`BUILTIN`), then installed packages' (`observatory.model.plugins`)."""
    return discover(ENGINES, tuple(BUILTIN.items()))


@cache
def adapters() -> dict[str, Callable[[], EngineAdapter]]:
    """Engine name -> adapter class: the built-ins and installed ones (``observatory.engines`` entry points,
    `plugins`), loaded once per process as `discover` reads them once."""
    return {p.name.lower(): p.load() for p in plugins()}


def recomputed_prefix_blocks(engine: str | None, launch: Mapping[str, Any] | None) -> tuple[int, str]:
    """(the blocks of a prefix-cache hit that an arm launched as LAUNCH on ENGINE recomputes by the engine's design,
    why): its adapter's ``spec_cache_blocks_recomputed`` for its speculative config; (0, "") for an arm that does
    not speculate, an engine this install does not know, or an adapter without it. Channel ``prefix_cache`` and the
    answer_fields gate (``usage.prompt_tokens_details.cached_tokens``) allow that shortfall against base."""
    spec = (launch or {}).get("speculative_config")
    if not isinstance(spec, Mapping):
        return 0, ""
    try:
        adapter = adapter_for(engine or None)
    except ObservatoryError:
        return 0, ""
    fn = getattr(adapter, "spec_cache_blocks_recomputed", None)
    if fn is None:
        return 0, ""
    blocks, why = fn(spec)
    return int(blocks), str(why)


def adapter_for(name: str | None) -> EngineAdapter:
    """The adapter for engine NAME (case-insensitive; None: the default engine's, as for a stored arm read before
    its engine was)."""
    name = DEFAULT_ENGINE if name is None else name
    known = adapters()
    cls = known.get(name.strip().lower())
    if cls is None:
        raise ObservatoryError(f"Unknown engine {name!r}; known engines: {', '.join(sorted(known))}")
    adapter = cls()
    for attr in ("name", "version_key", "version_path", "counters_from_metrics", "counters_from_response",
                 "binary", "streams_drafted_ids", "stream_ids_note", "speculation_flags", "tokenize",
                 "ids_in_choices", "streams_chat_ids", "streams_tool_logprobs", "request_params"):
        if not hasattr(adapter, attr):
            raise ObservatoryError(f"engine adapter {name!r} ({cls!r}) lacks {attr!r}: see docs/plugins.md")
    return adapter


@cache
def ids_in_choices_hint() -> str:
    """"An SGLang server needs --engine sglang": what an answer without vLLM's ``token_id:N`` ids may need, one
    clause per engine whose ids come in ``choices[]`` (`EngineAdapter.ids_in_choices`)."""
    engines = {a.name: a for a in (cls() for cls in adapters().values()) if getattr(a, "ids_in_choices", False)}
    return "; ".join(f"An {getattr(a, 'display', a.name)} server needs --engine {name}" for name, a in engines.items())


def version_from(adapter: EngineAdapter, body: Any) -> str | None:
    """The version in the JSON answer of adapter.version_path(), if there is one."""
    v = body.get(adapter.version_key) if isinstance(body, Mapping) else None
    return str(v) if v is not None else None


def counters_from_chunks(adapter: EngineAdapter, chunks: Iterable[Mapping[str, Any]]) -> EngineCounters | None:
    """The statistics of a streamed response: those of the last chunk that carries any."""
    found = None
    for chunk in chunks:
        found = adapter.counters_from_response(chunk) or found
    return found
