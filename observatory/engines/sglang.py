"""SGLang's server as an engine: its command line for a launched arm.

An arm with ``engine == "sglang"`` (``sglang:base``, ``sglang:mtpK``: `preset_config`,
its adapter's ``arm_preset``) is launched with `server_argv` instead of vLLM's
command line (its adapter's ``server_argv``, asked by `observatory.engines.server.engine_argv`), through
the same process-group, health, log and fault handling (`observatory.engines.server.EngineProcess`);
what its answers and counters mean is `SGLangAdapter` and `observatory.engines.sglang_ids`.

What it counts: per request in /generate's meta_info (spec_verify_ct = drafts; accepted, drafted
and a histogram in later versions, three spellings) or, on the OpenAI endpoints with
return_spec_tokens_details (PR #33518), in body["sglext"]["spec_tokens_details"]. /metrics
has one counter, sglang:spec_verify_calls_total (drafts); its spec_accept_* gauges cover
the last log interval and cannot be differenced. With topk > 1 "drafted" counts tree nodes.

Token ids (checked against sgl-project/sglang python/sglang/srt/entrypoints/openai/protocol.py,
commit 004c82e07d876f6e4a0ad6e15325706b0f478f1a): SGLang's OpenAI logprobs entries carry the
token's text and bytes only (ChatCompletionTokenLogprob: token, bytes, logprob, top_logprobs;
completions: LogProbs.tokens: List[str], top_logprobs keyed by text), never an id and never
vLLM's "token_id:N". The ids come with ``"return_token_ids": true`` as ``choices[].token_ids``
(chat and completions whole; completions streamed, each chunk the ids new since the last; a
streamed chat completion refuses the flag). The adapter asks for them (`request_params`, called by
`observatory.client.send`) and reads them (`take_ids`) with `observatory.engines.sglang_ids`, which
cites the source: chat probes go whole,
texts come from the logprobs entries, and top-k alternatives, which have no ids, are stored
empty, so margins stay not measurable; an answer without ``token_ids`` is malformed, never
judged as no ids. /tokenize (TokenizeRequest: prompt or messages + tools) exists, as on vLLM.
SGLang 0.5.14 (served on the H200, examples/gpu/sglang/README.md) has no return_token_ids: a whole
chat completion asked with ``"return_meta_info": true`` carries each choice's meta_info, whose
output_token_logprobs / output_top_logprobs hold [logprob, id, text] (ids of the alternatives too:
margins measurable) and whose spec_* fields are the request's counters (read here).

Its answers' token ids are not in their logprobs entries (`observatory.engines.sglang_ids`): an
answer without them is malformed, and stored as what the engine does not report for that request
(`observatory.model.errors.NotReported`), never judged as an answer with no ids. Its
``/metrics`` counts verify steps only; its answers' meta_info carry every counter per request
(`observatory.session.measure` reads them where /metrics lacks the accepted tokens). On the
H200 its EAGLE arm in bf16 answered its first request one way and every later one the other
(examples/h200-engines/README.md): the timed-pass check of `observatory.judge.apply_gates` names
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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from observatory.engines.adapter import OwnServer
from observatory.engines.metrics import read_counters
from observatory.engines.settings import arm_parsers
from observatory.engines.sglang_ids import sglang_params, take_ids
from observatory.engines.spec_counters import EngineCounters, build_counters, first_count, json_object, number
from observatory.model.errors import ObservatoryError

if TYPE_CHECKING:
    from observatory.engines.settings import EngineSettings
    from observatory.model.arms import Arm

ARGS_ENV = "OBSERVATORY_SGLANG_ARGS"
MODULE = "sglang.launch_server"
# The environment variables SGLang arms read (`observatory --help` lists them: observatory.engines.arm_engines)
ENV_VARS = {ARGS_ENV: "flags every launched SGLang arm gets (e.g. --attention-backend triton)"}
# SGLang's arms, ``sglang:NAME``, as the error for an unknown one lists them
PRESETS = "sglang:base, sglang:mtpK (MTP through SGLang's EAGLE)"
_PRESET_RE = re.compile(r"mtp([1-9][0-9]?)")
# meta_info spellings, newest first: PR #24081, PR #23530, PR #11144 / #18332.
_SG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_SG_DRAFTED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_SG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


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


class SGLangAdapter(OwnServer):
    """SGLang: per request in meta_info (/generate's, or each chat choice's with return_meta_info) or
    sglext; on /metrics only the verify-call counter."""

    name = "sglang"
    version_key = "version"
    # its OpenAI logprobs carry no ids: they come with return_token_ids (observatory.engines.sglang_ids),
    # which a streamed chat completion refuses
    ids_in_choices = True
    streams_chat_ids = False
    engine_module = "sglang"
    display = "SGLang"
    install_hint = ("Install it, or point --engine-python at an interpreter that has it (the H200 bundle: "
                    "examples/gpu/sglang/README.md), or give the SGLang arms a URL (sglang:NAME=http://...).")
    logs_cuda_graphs = False
    preflight_logprobs = False  # its logprobs carry no ids: the answers' own check (observatory.engines.sglang_ids)
    speculation_flags = "--speculative-"  # --speculative-algorithm, --speculative-draft-model-path, ...
    arm_presets = PRESETS
    env_vars = tuple(ENV_VARS.items())
    # SGLang 0.5.14 derives its gRPC port as --port + 10000 (server_args.py, _handle_deprecated_args) and
    # refuses to start when that passes 65535, gRPC unused or not (docs/engines.md)
    max_port = 55535

    launch = staticmethod(server_argv)
    presets = staticmethod(preset_config)

    def request_params(self, params: dict[str, Any], chat: bool) -> dict[str, Any]:
        """``return_token_ids`` (and on a chat, sent whole, ``return_meta_info``) for vLLM's flag
        (`observatory.engines.sglang_ids`)."""
        return sglang_params(params, chat)

    def take_ids(self, out: Any, choice: Mapping[str, Any], chat: bool) -> int:
        """One choice's ``token_ids`` or ``meta_info`` ids (`observatory.engines.sglang_ids`)."""
        return take_ids(out, choice, chat)

    def version_path(self) -> str:
        return "/get_server_info"

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters | None:
        """Drafts from sglang:spec_verify_calls_total (added at request finish); None before it existed."""
        counts = read_counters(text, "sglang:", "SGLang", only=frozenset({"spec_verify_calls"}), model=model)
        if counts.problems:
            return EngineCounters(None, None, None, None, "; ".join(counts.problems))
        if "spec_verify_calls" not in counts.values:
            return None
        # accepted and drafted tokens are not on /metrics (only interval gauges): not reported
        return EngineCounters(drafts=sum(counts.values["spec_verify_calls"].values()), draft_tokens=None,
                              accepted=None, accepted_per_pos=None)

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        body = json_object(body, "SGLang response")
        sglext = body.get("sglext")
        if isinstance(sglext, Mapping) and sglext.get("spec_tokens_details") is not None:
            details = sglext["spec_tokens_details"]  # one object, or one per choice when n > 1
            items = details if isinstance(details, list) else [details]
            found = [c for d in items if (c := self._stats(d, "SGLang sglext.spec_tokens_details", None))]
            return sum(found[1:], found[0]) if found else None
        meta = body.get("meta_info")
        if isinstance(meta, Mapping) and "spec_verify_ct" in meta:
            return self._stats(meta, "SGLang meta_info", meta.get("completion_tokens"))
        # a whole chat completion asked with return_meta_info (SGLang 0.5.14: observatory.engines.sglang_ids):
        # the engine's meta_info on each choice
        choices = body.get("choices")
        metas = [m for c in choices if isinstance(c, Mapping) and isinstance(m := c.get("meta_info"), Mapping)
                 and "spec_verify_ct" in m] if isinstance(choices, list) else []
        found = [c for m in metas if (c := self._stats(m, "SGLang choices[].meta_info", m.get("completion_tokens")))]
        return sum(found[1:], found[0]) if found else None

    def _stats(self, d: Any, where: str, completion: Any) -> EngineCounters | None:
        d = json_object(d, where)
        drafts = first_count(d, ["spec_verify_ct"], where)
        if drafts is None:
            return None
        if drafts == 0:
            return EngineCounters()  # no verify step: nothing drafted, nothing accepted
        tau = number(d.get("spec_accept_length"))
        if tau is None and type(completion) is int:
            tau = completion / drafts  # SGLang's own accept length (PR #3152), not used for `accepted`
        histogram = next((d[k] for k in _SG_HISTOGRAM if d.get(k) is not None), None)
        drafted, accepted = first_count(d, _SG_DRAFTED, where), first_count(d, _SG_ACCEPTED, where)
        if drafted == 0 and not accepted:
            # SGLang proposes verify_ct * (num_draft_tokens - 1) > 0 tokens whenever it verified;
            # a 0 here is spec_tokens_details_from_meta_info's default for a field the
            # engine did not fill (PR #33518): not reported, not zero.
            drafted = accepted = None
        return build_counters(where, drafts, drafted, accepted, histogram, tau)
