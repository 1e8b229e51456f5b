"""Engine adapters: where each serving engine reports speculative-decoding statistics.

Adapters map an engine's numbers onto SpecCounters (drafts = verify steps, draft_tokens =
drafted tokens tested, accepted = accepted draft tokens, accepted_per_pos[j] = drafts whose
first j+1 tokens were all accepted) and return EngineCounters: SpecCounters plus `known`,
the fields the engine's numbers determine exactly. A field outside `known` is 0 / [] only
as a placeholder and means *unknown*; rates() uses known fields only. Nothing is estimated.
Statistics that are missing give None; present but malformed ones raise ObservatoryError.

- vLLM: all four counters on /metrics; per request only with --per-request-spec-decode-metrics
  (PR #48915) in body["metrics"]["speculative_decoding"].
- SGLang: per request in /generate's meta_info (spec_verify_ct = drafts; accepted, drafted
  and a histogram in later versions, three spellings) or, on the OpenAI endpoints with
  return_spec_tokens_details (PR #33518), in body["sglext"]["spec_tokens_details"]. /metrics
  has one counter, sglang:spec_verify_calls_total (drafts); its spec_accept_* gauges cover
  the last log interval and cannot be differenced. With topk > 1 "drafted" counts tree nodes.
- llama.cpp: timings.draft_n (tokens tested) / draft_n_accepted in the final response or last
  stream chunk, only when draft_n > 0; drafts and positions are not reported per request.
  /metrics (PR #26389, --metrics) has the vLLM schema as llamacpp:spec_decode_num_*_total.

Sources and recorded responses: tests/fixtures/engines/SOURCES.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from observatory.errors import ObservatoryError
from observatory.metrics import SpecCounters, parse_spec_counters

FIELDS = frozenset({"drafts", "draft_tokens", "accepted", "accepted_per_pos"})

# SGLang meta_info spellings, newest first: PR #24081, PR #23530, PR #11144 / #18332.
_SG_ACCEPTED = ("spec_num_correct_drafts", "spec_accepted_drafts", "spec_accept_token_num")
_SG_DRAFTED = ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
_SG_HISTOGRAM = ("spec_correct_drafts_histogram", "spec_accept_histogram")


@dataclass
class EngineCounters(SpecCounters):
    """SpecCounters plus which fields are known and the engine's own mean accept length.

    `reported_tau` is what the engine itself states as tokens per verify step (bonus
    included), kept for cross-checking only; it is dropped by sums and differences.
    """

    known: frozenset[str] = FIELDS
    reported_tau: float | None = None

    def __sub__(self, other: SpecCounters) -> EngineCounters:
        return _known_as(super().__sub__(other), self.known & _known(other))

    def __add__(self, other: SpecCounters) -> EngineCounters:
        return _known_as(super().__add__(other), self.known & _known(other))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, `known` as a sorted list."""
        return {**super().to_dict(), "known": sorted(self.known)}


def _known(c: SpecCounters) -> frozenset[str]:
    return getattr(c, "known", FIELDS)  # a plain SpecCounters is fully known


def _known_as(c: SpecCounters, known: frozenset[str]) -> EngineCounters:
    return EngineCounters(c.drafts, c.draft_tokens, c.accepted, list(c.accepted_per_pos), known)


def rates(c: SpecCounters) -> dict[str, Any]:
    """alpha = accepted/draft_tokens, tau = 1 + accepted/drafts, p_j = accepted_per_pos[j]/drafts.

    Each is None unless every field it needs is known (and its denominator is positive).
    """
    k = _known(c)
    by_tokens = {"accepted", "draft_tokens"} <= k and c.draft_tokens > 0
    by_drafts = {"accepted", "drafts"} <= k and c.drafts > 0
    return {
        "alpha": c.accepted / c.draft_tokens if by_tokens else None,
        "tau": 1.0 + c.accepted / c.drafts if by_drafts else None,
        "per_position": [a / c.drafts for a in c.accepted_per_pos]
        if by_drafts and "accepted_per_pos" in k else None,
        "reported_tau": getattr(c, "reported_tau", None),
    }


def _obj(x: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(x, Mapping):
        raise ObservatoryError(f"{where} must be a JSON object, got {type(x).__name__}")
    return x


def _count(d: Mapping[str, Any], keys: Iterable[str], where: str) -> int | None:
    """The first of KEYS present in D, as a non-negative integer; None if none is."""
    for key in keys:
        v = d.get(key)
        if v is not None:
            if type(v) is not int or v < 0:  # bools and floats rejected too
                raise ObservatoryError(f"{where}: {key} must be a non-negative integer, got {v!r}")
            return v
    return None


def _build(where: str, drafts: int | None, drafted: int | None, accepted: int | None,
           histogram: Any = None, reported_tau: float | None = None) -> EngineCounters:
    """EngineCounters from what an engine gave; histogram[j] = drafts accepting exactly j tokens."""
    per_pos: list[int] = []
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
    values = {"drafts": drafts, "draft_tokens": drafted, "accepted": accepted}
    known = {f for f, v in values.items() if v is not None} | ({"accepted_per_pos"} if per_pos else set())
    return EngineCounters(drafts or 0, drafted or 0, accepted or 0, per_pos, frozenset(known), reported_tau)


def _prom_sums(text: str, prefix: str, engine: str) -> dict[str, dict[int, float]]:
    """{sample name less PREFIX and _total: {position (-1 if none): value summed over labels}}."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise ObservatoryError(f"{engine} /metrics is not valid Prometheus text: {e}") from None
    out: dict[str, dict[int, float]] = {}
    for fam in families:
        for s in fam.samples:
            if not s.name.startswith(prefix) or s.name.endswith("_created"):
                continue
            try:
                pos = int(s.labels.get("position", -1))
            except ValueError:
                continue
            by_pos = out.setdefault(s.name[len(prefix):].removesuffix("_total"), {})
            by_pos[pos] = by_pos.get(pos, 0.0) + s.value
    return out


def _number(x: Any) -> float | None:
    return float(x) if type(x) in (int, float) else None


class EngineAdapter(Protocol):
    """Where one engine reports its version and speculative-decoding statistics."""

    name: str
    version_key: str  # the field of version_path()'s JSON that holds the version

    def version_path(self) -> str:
        """HTTP path to GET for the engine version."""

    def counters_from_metrics(self, text: str) -> EngineCounters | None:
        """Cumulative counters from /metrics text; None if the engine exposes none."""

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        """Per-request counters from a response body or final stream chunk; None if absent."""


class VLLMAdapter:
    """vLLM: everything on /metrics; per request only behind --per-request-spec-decode-metrics."""

    name = "vllm"
    version_key = "version"

    def version_path(self) -> str:
        return "/version"

    def counters_from_metrics(self, text: str) -> EngineCounters:
        """All four counters (zero when the families are absent: speculation off)."""
        return _known_as(parse_spec_counters(text), FIELDS)

    def counters_from_response(self, body: Mapping[str, Any]) -> EngineCounters | None:
        metrics = _obj(body, "vLLM response").get("metrics")
        if not isinstance(metrics, Mapping) or metrics.get("speculative_decoding") is None:
            return None
        where = "vLLM metrics.speculative_decoding"
        sd = _obj(metrics["speculative_decoding"], where)
        return _build(where, _count(sd, ["num_spec_steps"], where), _count(sd, ["num_draft_tokens"], where),
                      _count(sd, ["num_accepted_draft_tokens"], where), sd.get("acceptance_histogram"),
                      _number(sd.get("mean_acceptance_length")))


class SGLangAdapter:
    """SGLang: per request in meta_info / sglext; on /metrics only the verify-call counter."""

    name = "sglang"
    version_key = "version"

    def version_path(self) -> str:
        return "/get_server_info"

    def counters_from_metrics(self, text: str) -> EngineCounters | None:
        """Drafts from sglang:spec_verify_calls_total (added at request finish); None before it existed."""
        sums = _prom_sums(text, "sglang:", "SGLang")
        if "spec_verify_calls" not in sums:
            return None
        return EngineCounters(drafts=int(sum(sums["spec_verify_calls"].values())), known=frozenset({"drafts"}))

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
        return None

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
        return _build(where, drafts, _count(d, _SG_DRAFTED, where), _count(d, _SG_ACCEPTED, where),
                      histogram, tau)


class LlamaCppAdapter:
    """llama.cpp's llama-server: draft tokens and accepted per request, full counters on /metrics."""

    name = "llama.cpp"
    version_key = "build_info"

    def version_path(self) -> str:
        return "/props"

    def counters_from_metrics(self, text: str) -> EngineCounters | None:
        """The vLLM-schema counters of PR #26389; None for builds without them."""
        sums = _prom_sums(text, "llamacpp:spec_decode_", "llama.cpp")
        if "num_drafts" not in sums:
            return None
        drafts, drafted, accepted = (int(sum(sums.get(k, {}).values()))
                                     for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"))
        per = {p: v for p, v in sums.get("num_accepted_tokens_per_pos", {}).items() if p >= 0}
        return EngineCounters(drafts, drafted, accepted, [int(per.get(i, 0)) for i in range(max(per, default=-1) + 1)])

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


_ADAPTERS: dict[str, Callable[[], EngineAdapter]] = {
    "vllm": VLLMAdapter, "sglang": SGLangAdapter,
    "llama.cpp": LlamaCppAdapter, "llamacpp": LlamaCppAdapter, "llama-server": LlamaCppAdapter}


def adapter_for(name: str) -> EngineAdapter:
    """The adapter for engine NAME (case-insensitive)."""
    cls = _ADAPTERS.get(name.strip().lower())
    if cls is None:
        raise ObservatoryError(f"Unknown engine {name!r}; known engines: {', '.join(sorted(_ADAPTERS))}")
    return cls()


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
