"""expect gate: exact / regex / contains expectations declared in the probe (issue 4)."""

from __future__ import annotations

import re

import pytest

from observatory.model.errors import ObservatoryError
from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe

GATE = default_registry().get("expect")


def probe(**expect) -> Probe:
    return Probe(name="p", category="sequence", prompt="List the first ten primes:", expect=expect)


PRIMES = "2, 3, 5, 7, 11, 13, 17, 19, 23, 29"

# (output text, expect, verdict, reason fragment)
CASES = [
    (f"  {PRIMES}\n", {"exact": PRIMES}, "PASS", "meets exact"),
    (PRIMES, {"exact": PRIMES + "\n"}, "PASS", "meets exact"),  # TOML """...""" keeps the newline
    ("2, 3, 5, 5, 5, 5, 5, 5, 5, 5", {"exact": PRIMES}, "FAIL", "expected exactly"),
    (PRIMES, {"regex": r"2, 3, 5, 7(, \d+)*"}, "PASS", "meets regex"),
    (f"Sure: {PRIMES}", {"regex": r"2, 3, 5, 7(, \d+)*"}, "FAIL", "does not fully match"),
    ("def f():\n    return 1\n", {"regex": r"def f\(\):.*return 1"}, "PASS", "meets regex"),
    (
        "The cat sat on the mat. The cat sat on the mat.",
        {"contains": ["cat", "mat"]},
        "PASS",
        "meets contains",
    ),
    (
        "The dog sat on the rug.",
        {"contains": ["cat", "sat", "mat"]},
        "FAIL",
        "missing ['cat', 'mat']",
    ),
    (
        "<think>\n12345*6789 is about 83 million\n</think>\n\n83810205",
        {"exact": "83810205"},
        "PASS",
        "meets exact",
    ),
    (
        "<think>\nMaybe 83810205?\n</think>\n\n8380905",
        {"contains": ["83810205"]},
        "FAIL",
        "missing",
    ),
    (
        PRIMES,
        {"exact": PRIMES, "contains": ["29"], "regex": r"[\d, ]+"},
        "PASS",
        "meets exact, regex, contains",
    ),
    (
        "X",
        {"exact": "The cat sat on the mat."},
        "FAIL",
        "expected exactly 'The cat sat on the mat.', got 'X'",
    ),
]
IDS = [
    "exact-surrounding-whitespace",
    "exact-expected-trailing-newline",
    "exact-wrong-sequence",
    "regex-fullmatch",
    "regex-search-is-not-enough",
    "regex-dotall",
    "contains-all",
    "contains-missing",
    "think-stripped-before-exact",
    "contains-not-found-only-in-thinking",
    "all-three",
    "recitation-single-X",
]


@pytest.mark.parametrize(("text", "expect", "verdict", "fragment"), CASES, ids=IDS)
def test_verdicts(text: str, expect: dict, verdict: str, fragment: str) -> None:
    res = GATE.check(output=Output(text=text), probe=probe(**expect))
    assert res.verdict == verdict
    assert fragment in res.reason


def test_base_wrong_answer_is_a_correctness_failure() -> None:
    """docs/design.md mistake 1: 12345*6789 failed on the base arm too; expect is a correctness gate
    so the judge marks such a probe NOT_DISCRIMINATING instead of failing the spec arm."""
    assert GATE.correctness is True
    res = GATE.check(Output(text="8380905"), probe(exact="83810205"))
    assert res.verdict == "FAIL"


@pytest.mark.parametrize(
    "expect",
    [{}, {"tool_names": ["get_weather"], "tool_count": 1}],
    ids=["none", "tool-expectations-only"],
)
def test_skip_without_text_expectations(expect: dict) -> None:
    res = GATE.check(Output(text="anything"), probe(**expect))
    assert res.verdict == "SKIP"


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"exact": 42}, "'expect.exact' must be a string"),
        ({"contains": "cat"}, "'expect.contains' must be a list of strings"),
        ({"regex": "(unclosed"}, "'expect.regex' does not compile"),
    ],
    ids=["exact-not-string", "contains-not-list", "regex-broken"],
)
def test_bad_expectations_are_errors_naming_the_probe(expect: dict, message: str) -> None:
    p = Probe(name="bad", category="prose_en", prompt="x", expect=expect, source="probes/x.toml")
    with pytest.raises(
        ObservatoryError, match=re.escape(f"Probe 'bad' in probes/x.toml: {message}")
    ):
        GATE.check(Output(text="cat"), p)


def test_offline_adapter() -> None:
    res = GATE.offline({"text": " 4 ", "expect": {"exact": "4"}})
    assert (res["verdict"], res["checked"]) == ("PASS", ["exact"])
    res = GATE.offline({"text": "5", "expect": {"regex": "[0-4]"}})
    assert (res["verdict"], res["problems"]) == ("FAIL", ["'5' does not fully match '[0-4]'"])
    assert GATE.offline({"text": "5"})["verdict"] == "SKIP"
    with pytest.raises(ObservatoryError, match="expected"):
        GATE.offline({"expect": {"exact": "4"}})
