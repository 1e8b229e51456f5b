"""SGLang's server as an engine: its command line for a launched arm.

An arm with ``engine == "sglang"`` (``sglang:base``, ``sglang:mtpK``: `preset_config`,
its adapter's ``arm_preset``) is launched with `server_argv` instead of vLLM's
command line, through the same process-group, health, log and fault handling
(`observatory.engines.server.EngineProcess`); what its answers and counters
mean is `observatory.engines.spec_counters.SGLangAdapter` and
`observatory.engines.sglang_ids`.

Its answers' token ids are not in their logprobs entries (`observatory.engines.sglang_ids`): an
answer without them is malformed, and stored as what the engine does not report for that request
(`observatory.model.errors.NotReported`), never judged as an answer with no ids. Its
``/metrics`` counts verify steps only; its answers' meta_info carry every counter per request
(`observatory.session.measure` reads them where /metrics lacks the accepted tokens). On the
H200 its EAGLE arm in bf16 answered its first request one way and every later one the other
(examples/h200-engines/README.md): the timed-pass check of `observatory.judge.session` names
such a difference, as it does vLLM's bf16 near-ties.

Flags, read from SGLang 0.5.14's ``srt/server_args.py`` and served on the H200
(examples/gpu/sglang/README.md):

- ``python -m sglang.launch_server --model-path M --host --port --random-seed``,
  ``--dtype`` and ``--context-length`` from the session, ``--enable-metrics``
  (its /metrics: the ``sglang:spec_verify_calls_total`` counter and the
  generated-token counter), ``--disable-radix-cache`` where the session turns
  prefix caching off (SGLang's radix cache is its prefix cache, on by default);
- the session's tool-call and reasoning parsers (``--tool-call-parser hermes``:
  SGLang has a parser of that name, ``srt/function_call/function_call_parser.py``);
- MTP (``{"method": "mtp", "num_speculative_tokens": K}``): ``--speculative-algorithm
  EAGLE --speculative-draft-model-path D --speculative-num-steps K
  --speculative-eagle-topk 1 --speculative-num-draft-tokens K+1``, where D is the
  config's ``draft_model`` or the model itself: SGLang serves a MiMo-layout
  model's MTP layer as the draft model ``MiMoMTP`` (``configs/model_config.py``,
  ``models/mimo_mtp.py``), K chained draft steps with one candidate each, a chain
  of K+1 tokens verified (K drafted plus the bonus), which is vLLM's mtpK;
- ``$OBSERVATORY_SGLANG_ARGS`` (split as a shell would): flags every SGLang arm
  gets, e.g. the H200 bundle's ``--attention-backend triton --sampling-backend
  pytorch --grammar-backend none`` (kernels the bundle cuts); then the arm's own
  ``engine_args`` (arms file). The session's ``--engine-arg`` flags are vLLM's
  and are not passed.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import TYPE_CHECKING, Any

from observatory.engines.settings import arm_parsers
from observatory.model.errors import ObservatoryError

if TYPE_CHECKING:
    from observatory.engines.settings import EngineSettings
    from observatory.model.arms import Arm

ARGS_ENV = "OBSERVATORY_SGLANG_ARGS"
MODULE = "sglang.launch_server"
# The environment variables SGLang arms read (`observatory --help` lists them: observatory.engines.arms)
ENV_VARS = {ARGS_ENV: "flags every launched SGLang arm gets (e.g. --attention-backend triton)"}
# SGLang's arms, ``sglang:NAME``, as the error for an unknown one lists them
PRESETS = "sglang:base, sglang:mtpK (MTP through SGLang's EAGLE)"
_PRESET_RE = re.compile(r"mtp([1-9][0-9]?)")


def preset_config(name: str) -> tuple[bool, dict[str, Any] | None]:
    """(is an SGLang preset, its speculative config) for NAME: base, mtpK.

    ``mtp`` is MTP as the config names it for vLLM; `spec_args` serves it with SGLang's EAGLE algorithm
    drafting with the model's own MTP layer (MiMo's layout).
    """
    if name == "base":
        return True, None
    m = _PRESET_RE.fullmatch(name)
    if not m:
        return False, None
    return True, {"method": "mtp", "num_speculative_tokens": int(m.group(1))}


def spec_args(spec: dict[str, Any] | None, model: str) -> list[str]:
    """SGLang flags for a speculative config of `preset_config`'s form."""
    if spec is None:
        return []
    method = str(spec.get("method"))
    if method != "mtp":
        raise ObservatoryError(f"SGLang arms serve MTP (method \"mtp\"); {method!r} is not launched here: "
                               "start the server yourself and give the arm a URL")
    k = spec.get("num_speculative_tokens")
    if type(k) is not int or k < 1:
        raise ObservatoryError(f"an SGLang MTP arm needs a positive num_speculative_tokens, got {k!r}")
    draft = str(spec.get("draft_model") or model)
    return ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", draft,
            "--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(k + 1)]


def session_args() -> list[str]:
    """``$OBSERVATORY_SGLANG_ARGS`` as flags (every SGLang arm's)."""
    text = os.environ.get(ARGS_ENV, "")
    try:
        return shlex.split(text)
    except ValueError as e:
        raise ObservatoryError(f"${ARGS_ENV}: cannot split {text[:120]!r} into flags ({e})") from None


def server_argv(arm: Arm, settings: EngineSettings, port: int) -> list[str]:
    """The SGLang command line for ARM (the session's model, seed, dtype, context and parsers)."""
    argv = [settings.python, "-m", MODULE, "--model-path", settings.model, "--host", "127.0.0.1",
            "--port", str(port), "--random-seed", str(settings.seed), "--enable-metrics"]
    if settings.dtype:
        argv += ["--dtype", settings.dtype]
    if settings.max_model_len:
        argv += ["--context-length", str(settings.max_model_len)]
    if settings.prefix_caching is False:
        argv += ["--disable-radix-cache"]
    tool_parser, reasoning_parser = arm_parsers(arm, settings)
    if tool_parser:
        argv += ["--tool-call-parser", tool_parser]
    if reasoning_parser:
        argv += ["--reasoning-parser", reasoning_parser]
    argv += spec_args(arm.speculative_config, settings.model)  # the session's --spec-extra is vLLM's
    return argv + session_args() + list(arm.engine_args)
