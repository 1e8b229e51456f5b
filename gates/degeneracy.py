"""Degeneracy gate: character 3-grams after removing all whitespace.

docs/design.md section 2, mistake 4: splitting on whitespace gives one "word" for a
Chinese output, ratio 1/1, so three of four real degenerate outputs scored
perfectly healthy. Here all Unicode whitespace is removed first (``str.split()``
with no argument splits on every Unicode whitespace character, the ideographic
space U+3000 included) and the score is distinct 3-grams / total 3-grams, so
Chinese, English and code are measured the same way. Field calibration on a
production deployment: healthy minimum 0.578, degenerate maximum 0.034;
threshold 0.40.

Short outputs. With fewer than ``SHORT_CHARS`` (20) characters left after
whitespace removal, there are too few 3-grams for the score to be evidence:
a legitimate short answer dominated by one run, such as ``1000000000`` (8
3-grams, 2 distinct: 0.25), falls under 0.40 by itself.
From 20 characters on (18 3-grams), falling under 0.40 needs at least 11 of
the 18 3-grams to repeat earlier ones (a run of some 14 identical characters,
or a short unit repeated throughout): a loop. So short outputs are not scored (PASS,
``short: true``, ``score: null``), with one exception: an output that is a
single unit repeated at least ``LOOP_REPEATS`` (4) times (``XXXXXXXX``,
``5,5,5,5,5``, ``hahahaha``) is a loop at any length and FAILs. The two rules
agree at the boundary: an output of 20 or more characters made of a unit
repeated 4 or more times scores at most 20/72 = 0.28 and fails on its score.

Long outputs are judged on windows. The whole-text ratio falls with length
(healthy English prose of 6,500 characters scores 0.32, of 26,000 about
0.17), and a loop at the end of a long healthy answer is diluted by its
healthy start. So an output longer than ``WINDOW_CHARS`` (500 non-whitespace
characters, about a 200-token answer: the length the field threshold was
calibrated on) is scored on every 500-character window, ``WINDOW_STRIDE``
(100) apart, the last one ending at the end; the score is the worst
window's, and ``details`` carries every window's score, the worst window and
the tail's score. Up to 500 characters the window is the whole text, as
before. Calibration (2026-11-30, windows of 500 at stride 100, texts
available offline): healthy minima Python's LICENSE.txt (11,382 characters)
0.56, Vim's English tutor (25,441) 0.52, its Chinese tutors zh_cn (16,894)
0.48 and zh_tw (13,851) 0.52; loops made by repeating a unit cut from real
prose score p / 500 or so for a period of p characters: 0.04 at p = 20,
0.15 at 80, 0.35 at 200. List-like technical text repeats by nature and comes
close: a README of shell commands 0.38, a changelog of one-line entries 0.32.
The threshold stays 0.40: a window under it holds a unit of some 200
characters or less repeated throughout.

Empty (or whitespace-only) outputs are SKIPped (the content gate fails them),
and so are pure tool calls (no text to score).
"""

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, PASS, SKIP, GateResult, Output, gate, offline
from observatory.model.probes import Probe

THRESHOLD = 0.40
SHORT_CHARS = 20
LOOP_REPEATS = 4
WINDOW_CHARS = 500
WINDOW_STRIDE = 100


def squeeze(text: str) -> str:
    """TEXT with every Unicode whitespace character removed."""
    return "".join(text.split())


def trigram_counts(squeezed: str) -> tuple[int, int]:
    """(distinct, total) character 3-grams of an already squeezed string."""
    grams = [squeezed[i : i + 3] for i in range(len(squeezed) - 2)]
    return len(set(grams)), len(grams)


def repeat_unit(squeezed: str) -> tuple[str, float]:
    """The shortest unit whose repetition makes up SQUEEZED, and how many times it repeats.

    Uses the prefix function: the minimal period is ``n - pi[n-1]``. A string
    with no shorter period is its own unit, repeated once.
    """
    n = len(squeezed)
    if n == 0:
        return "", 0.0
    pi = [0] * n
    for i in range(1, n):
        k = pi[i - 1]
        while k and squeezed[i] != squeezed[k]:
            k = pi[k - 1]
        if squeezed[i] == squeezed[k]:
            k += 1
        pi[i] = k
    period = n - pi[-1]
    return squeezed[:period], n / period


def window_scores(squeezed: str) -> list[tuple[int, float]]:
    """(start, score) of every WINDOW_CHARS window, WINDOW_STRIDE apart, the last one ending at the end."""
    n = len(squeezed)
    if n <= WINDOW_CHARS:
        distinct, total = trigram_counts(squeezed)
        return [(0, distinct / total)]
    starts = list(range(0, n - WINDOW_CHARS + 1, WINDOW_STRIDE))
    if starts[-1] != n - WINDOW_CHARS:
        starts.append(n - WINDOW_CHARS)  # the tail, where a late loop sits
    out = []
    for i in starts:
        distinct, total = trigram_counts(squeezed[i : i + WINDOW_CHARS])
        out.append((i, distinct / total))
    return out


def judge_text(text: str) -> GateResult:
    """The degeneracy verdict on one output's text (no tool calls involved)."""
    squeezed = squeeze(text)
    n = len(squeezed)
    if n == 0:
        return GateResult(SKIP, "empty output: the content gate judges it", {"score": None})
    details: dict = {"score": None, "threshold": THRESHOLD, "chars": n, "short": n < SHORT_CHARS}
    if n < SHORT_CHARS:
        unit, repeats = repeat_unit(squeezed)
        if repeats >= LOOP_REPEATS:
            details.update(repeat_unit=unit, repeats=round(repeats, 2))
            return GateResult(
                FAIL,
                f"short output is {unit!r} repeated {repeats:g} times (a loop)",
                details,
            )
        return GateResult(
            PASS,
            f"short output ({n} non-whitespace characters < {SHORT_CHARS}): not scored",
            details,
        )
    windows = window_scores(squeezed)
    worst_start, score = min(windows, key=lambda w: w[1])
    worst_end = min(n, worst_start + WINDOW_CHARS)
    details.update(
        score=round(score, 4),
        worst_window=[worst_start, worst_end],
        tail_score=round(windows[-1][1], 4),
        window_chars=WINDOW_CHARS,
        window_stride=WINDOW_STRIDE,
        windows=[[i, round(w, 3)] for i, w in windows],
    )
    distinct, total = trigram_counts(squeezed[worst_start:worst_end])
    details.update(distinct=distinct, trigrams=total)
    what = f"only {distinct} distinct of {total} character 3-grams"
    ok = f"{distinct} distinct of {total} 3-grams"
    if len(windows) > 1:
        where = (f" in the worst of {len(windows)} windows of {WINDOW_CHARS} characters, {worst_start}-{worst_end} "
                 f"of {n} (tail {windows[-1][1]:.3f})")
        what, ok = what + where, ok + where
    if score < THRESHOLD:
        return GateResult(FAIL, f"score {score:.3f} < {THRESHOLD:.2f}: {what}", details)
    return GateResult(PASS, f"score {score:.3f} >= {THRESHOLD:.2f} ({ok})", details)


@gate(
    "degeneracy",
    "Repetition loops: distinct/total char 3-grams, whitespace removed, per 500-char window; FAIL < 0.40.",
    kind="result",
    correctness=True,
    applies="named",
)
def check(output: Output, probe: Probe) -> GateResult:
    """Score OUTPUT's text; SKIP pure tool calls and empty outputs."""
    text = output.text or output.content or ""
    if output.tool_calls and not text.strip():
        return GateResult(SKIP, "pure tool call: no text to score", {"score": None})
    return judge_text(text)


@offline("degeneracy")
def check_offline(obj: dict) -> dict:
    """``{"text": "..."}`` -> ``{"verdict": ..., "score": ..., "reason": ..., ...}``."""
    text = obj.get("text")
    if not isinstance(text, str):
        raise ObservatoryError('expected {"text": "<output text>"}')
    result = judge_text(text)
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
