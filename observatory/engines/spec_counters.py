"""Engine adapters: where each serving engine reports speculative-decoding statistics.

Adapters map an engine's numbers onto SpecCounters (drafts = verify steps, draft_tokens =
drafted tokens tested, accepted = accepted draft tokens, accepted_per_pos[j] = drafts whose
first j+1 tokens were all accepted) and return EngineCounters: SpecCounters plus the engine's
own mean accept length. A field the engine does not report is None (`known` lists the others);
figures.acceptance() is the one formula over them. Nothing is estimated. Per-request statistics
that are missing give None; present but malformed ones raise ObservatoryError. /metrics goes
through the one reader, metrics.read_counters.

- vLLM: all four counters on /metrics; per request only with --per-request-spec-decode-metrics
  (PR #48915) in body["metrics"]["speculative_decoding"].
- SGLang: per request in /generate's meta_info (spec_verify_ct = drafts; accepted, drafted
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
- llama.cpp: timings.draft_n (tokens tested) / draft_n_accepted in the final response or last
  stream chunk, only when draft_n > 0; drafts and positions are not reported per request.
  /metrics (PR #26389, --metrics) has the vLLM schema as llamacpp:spec_decode_num_*_total.

Sources and recorded responses: tests/fixtures/engines/SOURCES.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from observatory.engines import llamacpp, sglang
from observatory.engines.metrics import (
    MAX_COUNTER,
    SPEC_FAMILIES,
    SpecCounters,
    counters_from,
    parse_generated,
    parse_spec_counters,
    read_counters,
)
from observatory.engines.sglang_ids import sglang_params, take_ids
from observatory.model.errors import ObservatoryError
from observatory.model.plugins import ENGINES, Plugin, discover
from observatory.model.probes import Probe

FIELDS = frozenset({"drafts", "draft_tokens", "accepted", "accepted_per_pos"})

# SGLang meta_info spellings, newest first: PR #24081, PR #23530, PR #11144 / #18332.
_SG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_SG_DRAFTED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_SG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


@dataclass
class EngineCounters(SpecCounters):
    """SpecCounters plus the engine's own mean accept length.

    `reported_tau` is what the engine itself states as tokens per verify step (bonus
    included), kept for cross-checking only; it is dropped by sums and differences.
    """

    reported_tau: float | None = None

    def __sub__(self, other: SpecCounters) -> EngineCounters:
        return _engine(super().__sub__(other))

    def __add__(self, other: SpecCounters) -> EngineCounters:
        return _engine(super().__add__(other))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, `known` as a sorted list."""
        return {**super().to_dict(), "known": sorted(self.known)}


def _engine(c: SpecCounters) -> EngineCounters:
    return EngineCounters(c.drafts, c.draft_tokens, c.accepted,
                          None if c.accepted_per_pos is None else list(c.accepted_per_pos), c.problem, c.generated)


def _obj(x: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(x, Mapping):
        raise ObservatoryError(f"{where} must be a JSON object, got {type(x).__name__}")
    return x


def _count(d: Mapping[str, Any], keys: Iterable[str], where: str) -> int | None:
    """The first of KEYS present in D, as a non-negative integer; None if none is."""
    for key in keys:
        v = d.get(key)
        if v is not None:
            if type(v) is not int or v < 0 or v > MAX_COUNTER:  # bools and floats rejected too
                raise ObservatoryError(f"{where}: {key} must be a non-negative integer up to 2^53, "
                                       f"got {repr(v)[:60]}")
            return v
    return None


def _build(where: str, drafts: int | None, drafted: int | None, accepted: int | None,
           histogram: Any = None, reported_tau: float | None = None) -> EngineCounters:
    """EngineCounters from what an engine gave; histogram[j] = drafts accepting exactly j tokens."""
    per_pos: list[int] | None = None
    if histogram is not None and histogram != []:
        if not isinstance(histogram, list) or not all(type(n) is int and n >= 0 for n in histogram):
            raise ObservatoryError(f"{where}: acceptance histogram must be a list of counts, got {histogram!r}")
        drafts = sum(histogram) if drafts is None else drafts
        weighted = sum(j * n for j, n in enumerate(histogram))
        accepted = weighted if accepted is None else accepted
        if sum(histogram) != drafts or weighted != accepted:
            raise ObservatoryError(
                f"{where}: histogram {histogram} disagrees with {drafts} drafts / {accepted} accepted")
        per_pos = [sum(histogram[j + 1:]) for j in range(len(histogram) - 1)]
    if accepted is not None and drafted is not None and accepted > drafted:
        raise ObservatoryError(f"{where}: {accepted} accepted of only {drafted} drafted tokens")
    return EngineCounters(drafts, drafted, accepted, per_pos or None, reported_tau=reported_tau)


def _number(x: Any) -> float | None:
    return float(x) if type(x) in (int, float) else None


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
    # optional, `Dialect` gives vLLM's: the module a launched arm runs (None: a binary), the engine's name in
    # messages, whether its log names its CUDA graphs, whether URL arms get the logprobs preflight, whether its
    # arms may run in serving images
    engine_module: str | None = "vllm"
    display: str = "vLLM"
    logs_cuda_graphs: bool = True
    preflight_logprobs: bool = True
    runs_in_images: bool = True
    # optional, `Dialect` gives vLLM's: the presets of ``ENGINE:NAME`` arms as an error lists them (None: the
    # engine's arms are the default presets, ENGINE:NAME is NAME; see `arm_preset`), the OBSERVATORY_*
    # variables its arms read (name, what it does: `observatory --help` lists them)
    arm_presets: str | None = None
    env_vars: tuple[tuple[str, str], ...] = ()

    def check_installed(self, python: str, env: Mapping[str, str]) -> None:
        """Raise ObservatoryError unless an arm of this engine can be launched with PYTHON in ENV."""

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

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters | None:
        """Cumulative counters from /metrics text (only MODEL's series, when given); None if the engine exposes none."""

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        """Per-request counters from a response body or final stream chunk; None if absent."""


Post = Callable[[str, dict[str, Any]], Any]  # POST a JSON body to a URL, return the decoded answer


class Dialect:
    """vLLM's dialect, the default every adapter starts from (see `EngineAdapter`)."""

    binary: str | None = None
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
    # its ENGINE:NAME arms' presets, listed (None: ENGINE:NAME is the default presets' NAME), and its env vars
    arm_presets: str | None = None
    env_vars: tuple[tuple[str, str], ...] = ()

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """(is a preset of this engine's own, its speculative config): none of its own (`arm_presets` None)."""
        return False, None

    def check_installed(self, python: str, env: Mapping[str, str]) -> None:
        """Raise ObservatoryError unless an arm of this engine can be launched with PYTHON in ENV (its overrides)."""
        from observatory.engines.server import check_module

        if self.engine_module is not None:
            check_module(python, self.engine_module, env, self.display, self.install_hint)

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


class VLLMAdapter(Dialect):
    """vLLM: everything on /metrics; per request only behind --per-request-spec-decode-metrics."""

    name = "vllm"
    version_key = "version"

    def version_path(self) -> str:
        return "/version"

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters:
        """All four counters (zero when the families are absent: speculation off), and the generated-token
        counter ``vllm:generation_tokens_total``."""
        c = _engine(parse_spec_counters(text, model))
        c.generated = parse_generated(text, "vllm:", model)
        return c

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        metrics = _obj(body, "vLLM response").get("metrics")
        if not isinstance(metrics, Mapping) or metrics.get("speculative_decoding") is None:
            return None
        where = "vLLM metrics.speculative_decoding"
        sd = _obj(metrics["speculative_decoding"], where)
        return _build(where, _count(sd, ["num_spec_steps"], where), _count(sd, ["num_draft_tokens"], where),
                      _count(sd, ["num_accepted_draft_tokens"], where), sd.get("acceptance_histogram"),
                      _number(sd.get("mean_acceptance_length")))


class SGLangAdapter(Dialect):
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
    runs_in_images = False
    speculation_flags = "--speculative-"  # --speculative-algorithm, --speculative-draft-model-path, ...
    arm_presets = sglang.PRESETS
    env_vars = tuple(sglang.ENV_VARS.items())
    # SGLang 0.5.14 derives its gRPC port as --port + 10000 (server_args.py, _handle_deprecated_args) and
    # refuses to start when that passes 65535, gRPC unused or not (docs/engines.md)
    max_port = 55535

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """sglang:base, sglang:mtpK (`observatory.engines.sglang.preset_config`)."""
        return sglang.preset_config(name)

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
        body = _obj(body, "SGLang response")
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
        d = _obj(d, where)
        drafts = _count(d, ["spec_verify_ct"], where)
        if drafts is None:
            return None
        if drafts == 0:
            return EngineCounters()  # no verify step: nothing drafted, nothing accepted
        tau = _number(d.get("spec_accept_length"))
        if tau is None and type(completion) is int:
            tau = completion / drafts  # SGLang's own accept length (PR #3152), not used for `accepted`
        histogram = next((d[k] for k in _SG_HISTOGRAM if d.get(k) is not None), None)
        drafted, accepted = _count(d, _SG_DRAFTED, where), _count(d, _SG_ACCEPTED, where)
        if drafted == 0 and not accepted:
            # SGLang proposes verify_ct * (num_draft_tokens - 1) > 0 tokens whenever it verified;
            # a 0 here is spec_tokens_details_from_meta_info's default for a field the
            # engine did not fill (PR #33518): not reported, not zero.
            drafted = accepted = None
        return _build(where, drafts, drafted, accepted, histogram, tau)


class LlamaCppAdapter(Dialect):
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
    runs_in_images = False
    # llama-server refuses logprobs with tools + stream (tools/server/server-common.cpp, oaicompat_chat_params_parse)
    streams_tool_logprobs = False
    arm_presets = llamacpp.PRESETS
    env_vars = tuple(llamacpp.ENV_VARS.items())

    def arm_preset(self, name: str) -> tuple[bool, dict[str, Any] | None]:
        """llama.cpp:base, llama.cpp:draftK, llama.cpp:ngramK (`observatory.engines.llamacpp.preset_config`)."""
        return llamacpp.preset_config(name)

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
        """A llama-server binary to launch (observatory.engines.llamacpp), else a setup error that says how."""
        llamacpp.require_binary()

    def counters_from_metrics(self, text: str, model: str | None = None) -> EngineCounters | None:
        """The vLLM-schema counters of PR #26389; None for builds without them."""
        counts = read_counters(text, "llamacpp:spec_decode_", "llama.cpp", only=SPEC_FAMILIES, model=model)
        if "num_drafts" not in counts.values and not counts.problems:
            return None
        return _engine(counters_from(counts, absent_is_zero=False))

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        timings = _obj(body, "llama.cpp response").get("timings")
        if timings is None:
            return None
        where = "llama.cpp timings"
        t = _obj(timings, where)
        drafted, accepted = _count(t, ["draft_n"], where), _count(t, ["draft_n_accepted"], where)
        if (drafted is None) != (accepted is None):
            raise ObservatoryError(f"{where}: draft_n and draft_n_accepted come together, got {dict(t)}")
        if drafted is None:  # result_timings::to_json omits both when no draft token was tested
            drafted = accepted = 0
        return _build(where, None, drafted, accepted)


# The built-in adapters, exactly as pyproject.toml declares them (``observatory.engines`` entry points): engine
# name -> "module:class"; an alias names the same class (tests/test_plugins.py checks the two agree).
BUILTIN = {
    "vllm": "observatory.engines.spec_counters:VLLMAdapter",
    "sglang": "observatory.engines.spec_counters:SGLangAdapter",
    "llama.cpp": "observatory.engines.spec_counters:LlamaCppAdapter",
    "llamacpp": "observatory.engines.spec_counters:LlamaCppAdapter",
    "llama-server": "observatory.engines.spec_counters:LlamaCppAdapter",
}


def plugins() -> tuple[Plugin, ...]:
    """The adapters' entry points: the built-ins (`BUILTIN`), then installed packages' (`observatory.model.plugins`)."""
    return discover(ENGINES, tuple(BUILTIN.items()))


@cache
def adapters() -> dict[str, Callable[[], EngineAdapter]]:
    """Engine name -> adapter class: the built-ins and installed ones (``observatory.engines`` entry points,
    `plugins`), loaded once per process as `discover` reads them once."""
    return {p.name.lower(): p.load() for p in plugins()}


def adapter_for(name: str) -> EngineAdapter:
    """The adapter for engine NAME (case-insensitive)."""
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
