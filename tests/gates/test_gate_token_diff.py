"""token_diff gate: spec vs base full token-id sequences (issue 4; docs/design.md mistakes 2 and 3)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observatory.model.errors import ObservatoryError
from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe

GATE = default_registry().get("token_diff")
# Gate files are loaded by path; their helpers are reached through the loaded gate.
HELPERS = GATE.check.__globals__
compare_outputs = HELPERS["compare_outputs"]
first_divergence = HELPERS["first_divergence"]
logprob_margin = HELPERS["logprob_margin"]
NEAR_TIE_NATS = HELPERS["NEAR_TIE_NATS"]

PROBE = Probe(name="primes", category="sequence", prompt="List the first 10 primes:")


def out(ids: list[int], top: list[list[tuple[int, float]]] | None = None, **kw) -> Output:
    return Output(text="", token_ids=ids, top_logprobs=top or [], **kw)


def flat_top(n: int) -> list[list[tuple[int, float]]]:
    """A top-k row per position where nothing is informative (for positions before a divergence)."""
    return [[(0, -0.01)] for _ in range(n)]


def base_with(ids: list[int], pos: int, row: list[tuple[int, float]]) -> Output:
    top = flat_top(len(ids))
    top[pos] = row
    return out(ids, top)


# (base ids, spec ids, base top-k row at the divergence, verdict, kind, position, margin, lower)
CASES = [
    ([1, 2, 3, 4], [1, 2, 3, 4], None, "PASS", "identical", None, None, False),
    (
        [1, 2, 3, 4],
        [1, 2, 9, 4],
        [(3, -0.60), (9, -0.70), (7, -3.0)],
        "WARN",
        "near_tie",
        2,
        0.1,
        False,
    ),
    (
        [1, 2, 3, 4],
        [1, 2, 9, 4],
        [(3, -0.05), (9, -2.55), (7, -3.0)],
        "FAIL",
        "diverged",
        2,
        2.5,
        False,
    ),
    (
        [1, 2, 3, 4],
        [1, 2, 99, 4],
        [(3, -0.10), (4, -2.0), (5, -3.5)],
        "FAIL",
        "diverged",
        2,
        3.4,
        True,
    ),
    # A flat top-k gives a tiny lower bound: still never a near-tie.
    ([1, 2, 3, 4], [1, 2, 99, 4], [(3, -1.00), (4, -1.05)], "FAIL", "diverged", 2, 0.05, True),
    # Base's chosen token is not first in its list: another token outranks
    # what base emitted, so base was not greedy there (issue item 17).
    (
        [1, 2, 3, 4],
        [1, 2, 9, 4],
        [(7, -0.5), (3, -0.6), (9, -0.7)],
        "WARN",
        "base_not_greedy",
        2,
        0.1,
        False,
    ),
    # Issue item 17: a negative margin (spec's token above base's own choice
    # in base's top-k) is not a near-tie: base contradicts its greedy choice.
    ([1, 2, 3, 4], [1, 2, 9, 4], [(9, -0.2), (3, -0.3)], "WARN", "base_not_greedy", 2, -0.1, False),
    # ... but a difference within rounding is a tie, still a near-tie.
    ([1, 2, 3, 4], [1, 2, 9, 4], [(9, -0.3 + 1e-7), (3, -0.3)], "WARN", "near_tie", 2, 0.0, False),
    # Exactly at the bound is still a near-tie (<=).
    (
        [1, 2, 3],
        [1, 2, 9],
        [(3, -0.5), (9, -0.5 - NEAR_TIE_NATS)],
        "WARN",
        "near_tie",
        2,
        NEAR_TIE_NATS,
        False,
    ),
    ([5, 6, 7], [8, 6, 7], [(5, -0.2), (8, -1.9)], "FAIL", "diverged", 0, 1.7, False),
]


@pytest.mark.parametrize(
    ("base_ids", "spec_ids", "row", "verdict", "kind", "position", "margin", "lower"),
    CASES,
    ids=[
        "identical",
        "near-tie",
        "hard-divergence",
        "spec-token-outside-top-k",
        "outside-flat-top-k-still-fails",
        "chosen-not-first-in-list",
        "negative-margin-base-not-greedy",
        "negative-margin-within-rounding",
        "margin-equal-to-bound",
        "diverge-at-first-token",
    ],
)
def test_classification(base_ids, spec_ids, row, verdict, kind, position, margin, lower) -> None:
    """Issue item 17 (base_not_greedy cases): a negative margin was once reported as a near-tie."""
    base = base_with(base_ids, position, row) if row else out(base_ids, flat_top(len(base_ids)))
    res = GATE.check(spec=out(spec_ids), base=base, probe=PROBE)
    assert res.verdict == verdict
    assert res.details["kind"] == kind
    assert res.details["position"] == position
    assert res.details["margin_is_lower_bound"] is lower
    if margin is None:
        assert res.details["margin"] is None
    else:
        assert res.details["margin"] == pytest.approx(margin)


@pytest.mark.parametrize(
    ("base_ids", "spec_ids", "longer", "position"),
    [([1, 2, 3, 4, 5], [1, 2, 3], "base", 3), ([1, 2], [1, 2, 3, 4], "spec", 2)],
    ids=["base-longer", "spec-longer"],
)
def test_length_mismatch_with_equal_prefix(base_ids, spec_ids, longer, position) -> None:
    res = compare_outputs(out(spec_ids), out(base_ids, flat_top(len(base_ids))))
    assert res.verdict == "FAIL"
    assert res.details["kind"] == "diverged"
    assert res.details["position"] == position
    assert res.details["margin"] is None
    assert res.details["longer"] == longer
    assert f"then {longer} continues" in res.reason


def test_ghost_duplicated_token_is_a_hard_divergence() -> None:
    """docs/design.md section 1: a self-produced token emitted twice ("ghost" tokens).

    The first divergence is the duplicate; base never considered repeating it.
    """
    texts = ["2", ",", " 3", ",", " 5", ",", " 7"]
    base_ids = [17, 11, 220, 11, 310, 11, 400]
    spec_ids = [17, 11, 220, 220, 11, 310, 11, 400]
    top = flat_top(len(base_ids))
    top[3] = [(11, -0.001), (13, -7.2), (198, -8.0)]
    base = Output(text="", token_ids=base_ids, top_logprobs=top, token_texts=texts)
    spec = Output(text="", token_ids=spec_ids, token_texts=texts[:3] + [" 3"] + texts[3:])
    res = compare_outputs(spec, base)
    assert (res.verdict, res.details["kind"], res.details["position"]) == ("FAIL", "diverged", 3)
    assert res.details["margin_is_lower_bound"] is True
    assert res.details["spec_continuation"][:2] == [" 3", ","]
    assert "base ',' vs spec ' 3'" in res.reason


def test_continuations_show_at_least_20_tokens_each_side_decoded() -> None:
    """docs/design.md mistake 2: report both continuations from the first divergence."""
    base_ids = list(range(100, 160))
    spec_ids = base_ids[:10] + list(range(500, 550))
    base = base_with(base_ids, 10, [(110, -0.01), (500, -6.0)])
    base.token_texts = [f"b{i}" for i in base_ids]
    spec = out(spec_ids, token_texts=[f"s{i}" for i in spec_ids])
    res = compare_outputs(spec, base)
    d = res.details
    assert len(d["base_continuation"]) >= 20 and len(d["spec_continuation"]) >= 20
    assert d["base_continuation"][:2] == ["b110", "b111"]
    assert d["spec_continuation"][:2] == ["s500", "s501"]
    assert d["prefix"][-1] == "b109"
    assert (d["base_token_id"], d["spec_token_id"]) == (110, 500)


def test_continuations_fall_back_to_token_ids() -> None:
    base = base_with([1, 2, 3], 1, [(2, -0.1), (8, -4.0)])
    res = compare_outputs(out([1, 8, 9]), base)
    assert res.details["base_continuation"] == [2, 3]
    assert res.details["spec_continuation"] == [8, 9]
    assert "base id 2 vs spec id 8" in res.reason


@pytest.mark.parametrize(
    ("top", "why"),
    [
        ([], "no top-k logprobs recorded"),
        ([[(0, -0.1)], [(7, -0.3), (8, -0.4)]], "own token is not"),
    ],
    ids=["no-logprobs", "chosen-missing-from-top-k"],
)
def test_unreadable_margin_cannot_clear_a_divergence(top, why) -> None:
    res = compare_outputs(out([0, 8]), out([0, 1], top))
    assert (res.verdict, res.details["kind"], res.details["margin"]) == ("FAIL", "diverged", None)
    assert why in res.reason


def test_no_token_ids_anywhere_is_skipped() -> None:
    res = compare_outputs(out([]), out([]))
    assert res.verdict == "SKIP"
    assert "were token ids recorded" in res.reason


def test_streamed_vs_nonstreamed_uses_the_same_comparison() -> None:
    """The lead diffs streamed against non-streamed (and alone against batched) with one helper."""
    nonstream = base_with([4, 5, 6, 7], 2, [(6, -0.3), (9, -0.35)])
    streamed = out([4, 5, 9, 7])
    res = compare_outputs(streamed, nonstream)
    assert (res.verdict, res.details["kind"], res.details["position"]) == ("WARN", "near_tie", 2)


def test_custom_near_tie_bound() -> None:
    base = base_with([1, 2], 1, [(2, -0.1), (3, -0.5)])
    assert compare_outputs(out([1, 3]), base, near_tie_nats=0.5).verdict == "WARN"
    assert compare_outputs(out([1, 3]), base, near_tie_nats=0.1).verdict == "FAIL"


def test_near_tie_default_is_in_the_agreed_range() -> None:
    assert 0.1 <= NEAR_TIE_NATS <= 0.5


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([], [], None),
        ([1, 2], [1, 2], None),
        ([1, 2], [1, 3], 1),
        ([1, 2], [1, 2, 3], 2),
        ([], [5], 0),
    ],
    ids=["both-empty", "equal", "differ", "prefix", "empty-vs-one"],
)
def test_first_divergence(a, b, expected) -> None:
    assert first_divergence(a, b) == expected


@pytest.mark.parametrize(
    ("top", "chosen", "other", "expected"),
    [
        ([(3, -0.1), (9, -1.1)], 3, 9, (1.0, False)),
        ([(3, -0.1), (9, -1.1)], 3, 42, (1.0, True)),
        ([(9, -0.1)], 3, 9, (None, False)),
        ([], 3, 9, (None, False)),
    ],
    ids=["both-listed", "other-missing", "chosen-missing", "empty"],
)
def test_logprob_margin(top, chosen, other, expected) -> None:
    margin, lower = logprob_margin(top, chosen, other)
    assert lower is expected[1]
    assert margin == (pytest.approx(expected[0]) if expected[0] is not None else None)


@given(st.lists(st.integers(0, 5), max_size=30), st.lists(st.integers(0, 5), max_size=30))
def test_first_divergence_properties(a: list[int], b: list[int]) -> None:
    pos = first_divergence(a, b)
    if pos is None:
        assert a == b
    else:
        assert a[:pos] == b[:pos]
        assert pos == min(len(a), len(b)) or a[pos] != b[pos]
        assert first_divergence(b, a) == pos


def test_offline_adapter_shape() -> None:
    obj = {
        "base": {
            "token_ids": [1, 2, 3],
            "top_logprobs": [[[1, -0.1]], [[2, -0.2], [5, -0.25]], [[3, -0.1]]],
        },
        "spec": {"token_ids": [1, 5, 3]},
    }
    res = GATE.offline(obj)
    assert {k: res[k] for k in ("verdict", "kind", "position")} == {
        "verdict": "WARN",
        "kind": "near_tie",
        "position": 1,
    }
    assert res["margin"] == pytest.approx(0.05)
    same = GATE.offline({"base": {"token_ids": [1]}, "spec": {"token_ids": [1]}})
    assert (same["verdict"], same["kind"], same["position"], same["margin"]) == (
        "PASS",
        "identical",
        None,
        None,
    )


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"spec": {"token_ids": [1]}}, '"base"'),
        ({"base": {"token_ids": "123"}, "spec": {"token_ids": [1]}}, "base.token_ids"),
        (
            {"base": {"token_ids": [1], "top_logprobs": [[1, -0.1]]}, "spec": {"token_ids": [1]}},
            "top_logprobs[0]",
        ),
        ({"base": {"token_ids": [1]}, "spec": {"token_ids": [True]}}, "spec.token_ids"),
    ],
    ids=["missing-base", "ids-not-a-list", "top-k-row-not-pairs", "bool-token-id"],
)
def test_offline_adapter_rejects_bad_input(obj, message) -> None:
    with pytest.raises(ObservatoryError, match=re.escape(message)):
        GATE.offline(obj)


@pytest.mark.parametrize(
    ("top", "row"),
    [
        ([[[1, -0.1]], [[2, -0.2], [5, True]]], 1),
        ([[[1, -0.1]], [[2, -0.2]], [[3, -0.1, 0.0]]], 2),
        ([[[1, -0.1]], [[2.0, -0.2]]], 1),
        ([[[1, -0.1]], [(2, -0.2)]], 1),
        ([[[1, -0.1]], "x"], 1),
        ([[[1, "-0.1"]]], 0),
    ],
    ids=["bool-logprob", "three-numbers", "float-id", "tuple-pair", "row-not-a-list", "string-logprob"],
)
def test_offline_input_check_names_the_bad_row(top: list[Any], row: int) -> None:
    """Issue "A fast instrument" (smaller costs): the token-diff input check, now done at C speed,
    still rejects every malformed pair and names its row."""
    obj = {"base": {"token_ids": [1, 2, 3], "top_logprobs": top}, "spec": {"token_ids": [1, 2, 3]}}
    with pytest.raises(ObservatoryError, match=re.escape(f"base.top_logprobs[{row}]")):
        GATE.offline(obj)


def test_offline_margin_with_integer_logprobs() -> None:
    obj = {"base": {"token_ids": [1, 2], "top_logprobs": [[[1, 0]], [[2, -1], [7, -3]]]},
           "spec": {"token_ids": [1, 7]}}
    assert GATE.offline(obj)["margin"] == 2
