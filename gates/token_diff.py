"""Token diff gate: the spec arm's full generated token ids against the base arm's.

docs/design.md section 2, mistakes 2 and 3. Under greedy decoding speculation must
not change the output, so the complete generated token-id sequences are
compared, not the answers. At the first divergence the base arm's top-k
logprobs give the margin between the token base chose and the token spec
emitted: a margin within ``NEAR_TIE_NATS`` is a plausible floating-point
near-tie (verifying k tokens changes GEMM shapes and reduction order): WARN,
kind ``near_tie``. A larger margin is a hard divergence (a bug): FAIL, kind
``diverged``. When spec's token is not in base's top-k, the margin is at least
base's chosen logprob minus the k-th logprob; that lower bound is reported
with ``margin_is_lower_bound: true`` and is never a near-tie. A margin that
cannot be read (no top-k recorded there, or base's own token missing from its
top-k) cannot clear a divergence either: FAIL, margin null.

A negative margin (spec's token, or any other, scored above the token base
itself emitted, in base's own top-k) is no near-tie: base's logprobs
contradict its greedy choice, so base's logprobs or sampling are not what
greedy implies. That is not the spec arm's fault and the pair cannot be
judged: WARN, kind ``base_not_greedy`` (the verdict policy treats the pair as
unjudgeable).

The same comparison serves "streamed vs non-streamed" and "alone vs in a
concurrent batch": call ``compare_outputs(candidate, reference)`` with the
reference (the one whose top-k logprobs are used) as ``base``. Gate files are
loaded by path, so reach these helpers through the loaded gate, e.g.
``default_registry().get("token_diff").check.__globals__["compare_outputs"]``,
or call the gate's ``check`` itself with the two outputs.
"""

from collections.abc import Sequence
from itertools import chain
from operator import itemgetter
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, SKIP, WARN, GateResult, Output, gate, offline
from observatory.model.numerics import NEAR_TIE_NATS  # the bound and its derivation live there
from observatory.model.probes import Probe

# Logprobs come back rounded (float32 and JSON), and vLLM computes them apart
# from the argmax; a chosen token below another by less than this is a tie.
GREEDY_TOLERANCE_NATS = 1e-5
CONTEXT_TOKENS = 8  # shared tokens shown before the divergence
CONTINUATION_TOKENS = 24  # tokens shown from the divergence on, per arm (at least 20)


def first_divergence(a: Sequence[int], b: Sequence[int]) -> int | None:
    """0-based index of the first differing token; the shorter length if one is a prefix; None if equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def logprob_margin(
    top_k: Sequence[tuple[int, float]], chosen: int, other: int
) -> tuple[float | None, bool]:
    """(margin, is_lower_bound): logprob of CHOSEN minus that of OTHER at one position.

    TOP_K is that position's alternatives, best first. When OTHER is not among
    them, the margin is at least CHOSEN's logprob minus the lowest listed one
    (a lower bound). None when CHOSEN itself is not listed: nothing to measure.
    """
    logprobs = dict(top_k)
    if chosen not in logprobs:
        return None, False
    if other in logprobs:
        return logprobs[chosen] - logprobs[other], False
    return logprobs[chosen] - min(logprobs.values()), True


def _show(out: Output, start: int, stop: int) -> list[Any]:
    """Tokens START:STOP of OUT, decoded when token_texts are present, else their ids."""
    stop = min(stop, len(out.token_ids))
    if out.token_texts is not None and len(out.token_texts) == len(out.token_ids):
        return list(out.token_texts[start:stop])
    return list(out.token_ids[start:stop])


def _token_label(out: Output, i: int) -> str:
    shown = _show(out, i, i + 1)
    if not shown:
        return "<end>"
    return repr(shown[0]) if isinstance(shown[0], str) else f"id {shown[0]}"


def compare_outputs(spec: Output, base: Output, near_tie_nats: float = NEAR_TIE_NATS) -> GateResult:
    """Compare SPEC's generated token ids with BASE's (the reference, whose top-k is read)."""
    if not spec.token_ids and not base.token_ids:
        return GateResult(
            SKIP,
            "no generated token ids on either side (were token ids recorded?)",
            {"kind": None, "position": None, "margin": None},
        )
    pos = first_divergence(spec.token_ids, base.token_ids)
    if pos is None:
        return GateResult(
            PASS,
            f"identical: {len(base.token_ids)} generated tokens",
            {
                "kind": "identical",
                "position": None,
                "margin": None,
                "margin_is_lower_bound": False,
                "length": len(base.token_ids),
            },
        )
    details: dict[str, Any] = {
        "kind": "diverged",
        "position": pos,
        "margin": None,
        "margin_is_lower_bound": False,
        "near_tie_nats": near_tie_nats,
        "base_length": len(base.token_ids),
        "spec_length": len(spec.token_ids),
        "base_finish_reason": base.finish_reason,
        "spec_finish_reason": spec.finish_reason,
        "prefix": _show(base, max(0, pos - CONTEXT_TOKENS), pos),
        "base_continuation": _show(base, pos, pos + CONTINUATION_TOKENS),
        "spec_continuation": _show(spec, pos, pos + CONTINUATION_TOKENS),
    }
    where = f"first divergence at token {pos}"
    if pos == len(base.token_ids) or pos == len(spec.token_ids):
        longer, short, long_ = (
            ("base", len(spec.token_ids), len(base.token_ids))
            if len(base.token_ids) > len(spec.token_ids)
            else ("spec", len(base.token_ids), len(spec.token_ids))
        )
        details["longer"] = longer
        return GateResult(
            FAIL,
            f"equal for {short} tokens, then {longer} continues ({long_} vs {short} tokens)",
            details,
        )
    chosen, other = base.token_ids[pos], spec.token_ids[pos]
    details.update(base_token_id=chosen, spec_token_id=other)
    labels = f"base {_token_label(base, pos)} vs spec {_token_label(spec, pos)}"
    top_k = base.top_logprobs[pos] if pos < len(base.top_logprobs) else []
    margin, lower = logprob_margin(top_k, chosen, other)
    details["top_k"] = len(top_k)
    if margin is None:
        why = "no top-k logprobs recorded" if not top_k else "base's own token is not in its top-k"
        return GateResult(
            FAIL,
            f"{where}: {labels}; margin unknown ({why}), treated as a hard divergence",
            details,
        )
    details.update(margin=round(margin, 6), margin_is_lower_bound=lower)
    best, best_lp = max(top_k, key=lambda p: p[1])
    if best_lp - dict(top_k)[chosen] > GREEDY_TOLERANCE_NATS:
        details["kind"] = "base_not_greedy"
        details["base_top_token_id"] = best
        return GateResult(
            WARN,
            f"{where}: {labels}; base's own top-k ranks id {best} {best_lp - dict(top_k)[chosen]:.3f} nats above "
            f"the token base emitted (margin {margin:.3f}): base's logprobs or sampling are not greedy, "
            "so this pair cannot be judged",
            details,
        )
    if lower:
        return GateResult(
            FAIL,
            f"{where}: {labels}; spec's token is not in base's top-{len(top_k)}, "
            f"margin >= {margin:.3f} nats (hard divergence)",
            details,
        )
    if margin <= near_tie_nats:
        details["kind"] = "near_tie"
        return GateResult(
            WARN,
            f"{where}: {labels}; base margin {margin:.3f} <= {near_tie_nats} nats (plausible near-tie)",
            details,
        )
    return GateResult(
        FAIL,
        f"{where}: {labels}; base margin {margin:.3f} > {near_tie_nats} nats (hard divergence)",
        details,
    )


@gate(
    "token_diff",
    "Spec vs base generated token ids: first divergence, both continuations, base logprob margin.",
    kind="pair",
    sequences=True,
)
def check(spec: Output, base: Output, probe: Probe) -> GateResult:
    """Diff SPEC against BASE for one probe (the probe does not change the comparison)."""
    return compare_outputs(spec, base)


# Input checks run at C speed: the types of all elements are collected with
# map() into a set and compared once, so validating 32k tokens x top-10 costs
# about as much as the diff itself (the per-element Python checks cost 300x).
# Only when a check fails is the input walked in Python, to name the culprit.
_INT = {int}
_NUMBER = {int, float}


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not set(map(type, value)) <= _INT:
        raise ObservatoryError(f"{what} must be a list of integer token ids")
    return value


def _is_pair(p: Any) -> bool:
    return (
        isinstance(p, list)
        and len(p) == 2
        and isinstance(p[0], int)
        and isinstance(p[1], (int, float))
        and not isinstance(p[0], bool)
        and not isinstance(p[1], bool)
    )


def _pairs_ok(rows: list[Any]) -> bool:
    """Whether every row is a list of [int token id, int or float logprob] pairs (checked in C)."""
    if not set(map(type, rows)) <= {list}:
        return False
    pairs = list(chain.from_iterable(rows))
    if not pairs:
        return True
    if set(map(type, pairs)) != {list} or set(map(len, pairs)) != {2}:
        return False
    return set(map(type, map(itemgetter(0), pairs))) <= _INT and set(
        map(type, map(itemgetter(1), pairs))
    ) <= _NUMBER


def _arm(obj: dict[str, Any], key: str) -> Output:
    arm = obj.get(key)
    if not isinstance(arm, dict):
        raise ObservatoryError(f'expected "{key}": {{"token_ids": [...], ...}}')
    texts = arm.get("token_texts")
    if texts is not None and not (isinstance(texts, list) and set(map(type, texts)) <= {str}):
        raise ObservatoryError(f"{key}.token_texts must be a list of strings")
    rows = arm.get("top_logprobs") or []
    if not isinstance(rows, list):
        raise ObservatoryError(f"{key}.top_logprobs must be a list (one entry per generated token)")
    if not _pairs_ok(rows):
        i = next(i for i, row in enumerate(rows) if not isinstance(row, list) or not all(map(_is_pair, row)))
        raise ObservatoryError(f"{key}.top_logprobs[{i}] must be a list of [token_id, logprob] pairs")
    finish = arm.get("finish_reason")
    return Output(
        text="",
        token_ids=_int_list(arm.get("token_ids"), f"{key}.token_ids"),
        # [token_id, logprob] lists as given: the diff reads them as pairs
        top_logprobs=rows,
        token_texts=texts,
        finish_reason=finish if isinstance(finish, str) else None,
    )


@offline("token_diff")
def check_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"base": {"token_ids", "top_logprobs"}, "spec": {"token_ids"}}`` -> verdict, kind, position, margin."""
    result = compare_outputs(_arm(obj, "spec"), _arm(obj, "base"))
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
