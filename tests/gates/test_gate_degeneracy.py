"""degeneracy gate: character 3-grams after removing all whitespace (issue 4; docs/design.md mistake 4)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from observatory.model.gates import Output, default_registry
from observatory.model.probes import Probe
from tests.support.paths import FIXTURES

GATE = default_registry().get("degeneracy")
HELPERS = GATE.check.__globals__
SHORT_CHARS = HELPERS["SHORT_CHARS"]
PROBE = Probe(name="prose", category="prose_en", prompt="Tell me about Paris.")

ZH_PROSE = (
    "北京是中华人民共和国的首都，也是全国的政治、文化和国际交往中心。"
    "这座城市有三千多年的建城史，故宫、天坛和颐和园等古迹吸引着来自世界各地的游客。"
    "近年来，北京在科技创新和绿色发展方面取得了显著进展。"
)
EN_PROSE = (
    "The French Revolution began in 1789 and reshaped European politics for decades. "
    "It abolished feudal privileges, proclaimed the rights of man, and ended with the "
    "rise of Napoleon Bonaparte."
)
PY_CODE = """def is_prime(n: int) -> bool:
    if n < 2:
        return False
    for d in range(2, int(n ** 0.5) + 1):
        if n % d == 0:
            return False
    return True


print([p for p in range(30) if is_prime(p)])
"""
JSON_OBJ = (
    '{"name": "Ada Lovelace", "born": 1815, "died": 1852, '
    '"known_for": ["Analytical Engine notes", "first published algorithm"], "nationality": "British"}'
)
MIXED = "在 Python 里,用 `sorted(items, key=len)` 可以按长度排序;原列表不会被修改,返回的是新列表。"

HEALTHY = [
    ("zh-prose", ZH_PROSE),
    ("en-prose", EN_PROSE),
    ("python-code", PY_CODE),
    ("json-object", JSON_OBJ),
    ("zh-en-mixed", MIXED),
    ("zh-prose-ideographic-spaces", ZH_PROSE.replace("，", "\u3000")),
]

DEGENERATE = [
    # The field's primes under a broken spec backend: "2, 3, 5, 5, 5, 5, ...1111111".
    ("primes-stuck", "2, 3, 5, " + ", ".join(["5"] * 40) + ", " + "1" * 30),
    ("zh-repeated-phrase", "我们需要计算" + "这个问题的答案是" * 20),
    ("zh-single-char-run", "好" * 60),
    ("code-repeated-line", "def f(x):\n" + "    return x + 1\n" * 15),
    ("think-preamble-loop", "<think> Here's a thinking process: " * 10),
    (
        "think-numbered-loop",
        "<think> Here's a thinking process:\n\n" + "1. **Analyze the request:** " * 20,
    ),
    ("en-word-loop", "The answer is " + "the the the " * 20),
    ("json-key-loop", '{"a": ' + '{"a": ' * 30),
]


@pytest.mark.parametrize("text", [t for _, t in HEALTHY], ids=[i for i, _ in HEALTHY])
def test_healthy_outputs_pass(text: str) -> None:
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "PASS"
    assert res.details["short"] is False
    assert res.details["score"] >= 0.578  # the field's healthy minimum


@pytest.mark.parametrize("text", [t for _, t in DEGENERATE], ids=[i for i, _ in DEGENERATE])
def test_degenerate_outputs_fail(text: str) -> None:
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "FAIL"
    assert res.details["score"] < 0.40
    assert "distinct of" in res.reason


def test_chinese_loop_that_whitespace_splitting_called_healthy() -> None:
    """docs/design.md mistake 4: whitespace splitting scored this Chinese loop 1/1 = 1.00."""
    text = "答案是四十二。" * 30
    words = text.split()
    assert len(set(words)) / len(words) == 1.0  # the old measure: perfectly "healthy"
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "FAIL"
    assert res.details["score"] == pytest.approx(7 / 208, abs=1e-4)


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("XXXXXXXX", "X"),
        ("X X X X X X X X", "X"),
        ("5, 5, 5, 5, 5", "5,"),
        ("哈哈哈哈", "哈"),
        ("ababababab", "ab"),
    ],
    ids=["X-run", "spaced-X-run", "five-fives", "zh-ha-run", "ab-loop"],
)
def test_short_loops_fail(text: str, unit: str) -> None:
    """Issue 4: a short output that is one unit repeated (a loop) is caught despite the short rule."""
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "FAIL"
    assert res.details["short"] is True
    assert res.details["score"] is None
    assert res.details["repeat_unit"] == unit


@pytest.mark.parametrize(
    "text",
    [
        "Paris.",
        "42",
        "1000000000",
        "5, 5, 5",
        "XXX",
        "巴黎。",
        "Well......",
        '{"ok": true}',
        "哈哈",
    ],
    ids=[
        "word",
        "number",
        "zeros",
        "three-fives",
        "three-X",
        "zh-word",
        "ellipsis",
        "json",
        "two-ha",
    ],
)
def test_short_outputs_are_not_scored(text: str) -> None:
    """Issue 4: too few 3-grams to mean anything ("1000000000" alone would score 0.25)."""
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "PASS"
    assert (res.details["short"], res.details["score"]) == (True, None)
    assert "not scored" in res.reason


def test_short_boundary() -> None:
    """Exactly SHORT_CHARS non-whitespace characters is scored; one fewer is not."""
    text = "abcdefghijklmnopqrstuvwxyz"
    assert GATE.check(Output(text=text[: SHORT_CHARS - 1]), PROBE).details["short"] is True
    res = GATE.check(Output(text=text[:SHORT_CHARS]), PROBE)
    assert (res.details["short"], res.details["score"]) == (False, 1.0)


@pytest.mark.parametrize(
    ("output", "why"),
    [
        (Output(text=""), "empty output"),
        (Output(text=" \n\t\u3000"), "empty output"),
        (
            Output(
                text="",
                content=None,
                tool_calls=[
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            ),
            "pure tool call",
        ),
    ],
    ids=["empty", "whitespace-only", "pure-tool-call"],
)
def test_skips(output: Output, why: str) -> None:
    res = GATE.check(output, PROBE)
    assert res.verdict == "SKIP"
    assert why in res.reason


def test_tool_call_with_looping_text_is_still_scored() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    res = GATE.check(Output(text="ok " * 40, tool_calls=[call]), PROBE)
    assert res.verdict == "FAIL"


def test_whitespace_does_not_change_the_score() -> None:
    spaced = " ".join(ZH_PROSE)
    assert (
        GATE.check(Output(text=spaced), PROBE).details
        == GATE.check(Output(text=ZH_PROSE), PROBE).details
    )


@given(
    st.text(min_size=1, max_size=200),
    st.lists(st.sampled_from([" ", "\n", "\t", "\u3000"]), max_size=20),
)
def test_whitespace_invariance(text: str, spaces: list[str]) -> None:
    """Removing all whitespace first makes the verdict blind to where whitespace falls."""
    padded = "".join(spaces) + text + "".join(reversed(spaces))
    a, b = GATE.offline({"text": text}), GATE.offline({"text": padded})
    assert (a["verdict"], a["score"]) == (b["verdict"], b["score"])


@given(st.text(alphabet="ab5, 好X", min_size=1, max_size=5), st.integers(4, 40))
def test_a_unit_repeated_four_times_fails_at_any_length(unit: str, times: int) -> None:
    """The short-loop rule and the score rule agree: 4+ repeats of a unit always FAIL."""
    text = unit * times
    if not "".join(text.split()):
        return
    assert GATE.offline({"text": text})["verdict"] == "FAIL"


@given(st.text(min_size=0, max_size=300))
def test_score_is_a_fraction(text: str) -> None:
    res = GATE.offline({"text": text})
    assert res["verdict"] in {"PASS", "FAIL", "SKIP"}
    if res["score"] is not None:
        assert 0 < res["score"] <= 1


def test_offline_adapter_shape() -> None:
    res = GATE.offline({"text": EN_PROSE})
    assert res["verdict"] == "PASS"
    assert res["score"] == pytest.approx(151 / 158, abs=1e-4)
    bad = GATE.offline({"text": "5, " * 50})
    assert (bad["verdict"], bad["score"]) == ("FAIL", pytest.approx(2 / 98, abs=1e-4))


# --- long outputs: windows (issue item 18) ---

PROSE_DIR = FIXTURES / "prose"
LICENSE = (PROSE_DIR / "python-license.txt").read_text(encoding="utf-8")
ZH_TUTOR = (PROSE_DIR / "vimtutor-zh_cn.txt").read_text(encoding="utf-8")
WINDOW_CHARS = HELPERS["WINDOW_CHARS"]


def _prefix(text: str, chars: int) -> str:
    """The shortest prefix of TEXT holding CHARS non-whitespace characters."""
    seen = 0
    for i, c in enumerate(text):
        seen += not c.isspace()
        if seen >= chars:
            return text[: i + 1]
    return text


@pytest.mark.parametrize("chars", [3200, 6500, 11000], ids=["3200", "6500", "whole-licence"])
def test_long_healthy_english_prose_passes(chars: int) -> None:
    """Issue item 18: the whole-text ratio called 6,500 characters of English prose degenerate (0.32)."""
    text = _prefix(LICENSE, chars)
    distinct, total = HELPERS["trigram_counts"](HELPERS["squeeze"](text))
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "PASS", res.reason
    assert len(res.details["windows"]) > 1 and res.details["score"] >= 0.40
    if chars >= 6500:
        assert distinct / total < 0.40  # what the whole-text score said


def test_long_healthy_chinese_prose_passes() -> None:
    """Issue item 18: a long Chinese text (Vim's tutor) passes window by window."""
    res = GATE.check(output=Output(text=ZH_TUTOR), probe=PROBE)
    assert res.verdict == "PASS", res.reason


@pytest.mark.parametrize("unit", ["The answer is 42. ", "然后按下回车键。", "1. **Analyze the request:** "],
                         ids=["en-sentence", "zh-sentence", "think-numbered"])
def test_loop_at_the_end_of_a_long_healthy_answer_fails(unit: str) -> None:
    """Issue item 18 (negative control): a loop at the tail is no longer diluted by a healthy start."""
    healthy = _prefix(LICENSE, 6000)
    text = healthy + unit * (600 // len(unit.replace(" ", "")) + 1)  # a loop longer than one window
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.verdict == "FAIL", res.reason
    assert res.details["worst_window"][0] >= 6000  # inside the loop, which starts after 6,000 characters
    assert res.details["tail_score"] < 0.40
    assert res.details["windows"][0][1] >= 0.40  # the healthy start, scored on its own


def test_short_text_keeps_the_whole_text_score() -> None:
    """Issue item 18: up to one window, the score is the whole-text ratio, as calibrated."""
    text = _prefix(LICENSE, WINDOW_CHARS)
    distinct, total = HELPERS["trigram_counts"](HELPERS["squeeze"](text))
    res = GATE.check(output=Output(text=text), probe=PROBE)
    assert res.details["score"] == pytest.approx(distinct / total, abs=1e-4)
    assert res.details["windows"] == [[0, pytest.approx(distinct / total, abs=1e-3)]]


def test_offline_adapter_reports_window_scores() -> None:
    """Issue item 18: `gates check degeneracy` prints the window scores too."""
    res = GATE.offline({"text": _prefix(LICENSE, 2000)})
    assert res["verdict"] == "PASS"
    assert res["window_chars"] == WINDOW_CHARS and len(res["windows"]) >= 4
    assert res["score"] == pytest.approx(min(w for _, w in res["windows"]), abs=1e-3)
