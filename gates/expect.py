"""Expected-answer gate: exact, regex and contains expectations declared in the probe.

The answer judged is the output's text after its thinking (everything up to
the last ``</think>``), with surrounding whitespace stripped:

- ``exact``: equal to the expected string, itself stripped (a TOML multi-line
  string keeps its trailing newline);
- ``regex``: a full match with DOTALL, by the ``regex`` module (the same
  syntax as ``re``) within REGEX_TIMEOUT_S: a pattern that backtracks
  exponentially on this output (``(x+x+)+y``) is not judged (the judge makes
  it UNJUDGED), never a hang;
- ``contains``: a list of substrings that must all appear.

SKIP when the probe declares none of the three; ``tool_names`` and
``tool_count`` are the tool_calls gate's. A probe whose base arm fails this
gate is not a discriminator (docs/design.md section 2, mistake 1): the gate is a
correctness gate so the runner can mark it NOT_DISCRIMINATING.
"""

from typing import Any

import regex

from observatory.model.errors import ObservatoryError
from observatory.model.gates import FAIL, NOT_JUDGED, PASS, SKIP, WARN, GateResult, Output, gate, offline
from observatory.model.probes import Probe

_KEYS = ("exact", "regex", "contains")
# A full match that takes longer is not judged. Ordinary patterns on the longest output a judge sees
# (observatory.model.gates.MAX_JUDGED_CHARS) take milliseconds.
REGEX_TIMEOUT_S = 1.0


class RegexTimeout(Exception):
    """The probe's expect.regex did not finish on this output within REGEX_TIMEOUT_S."""


def answer_text(text: str) -> str:
    """TEXT after its last ``</think>``, stripped of surrounding whitespace."""
    close = text.rfind("</think>")
    return (text[close + len("</think>") :] if close >= 0 else text).strip()


def _bad(probe: Probe, msg: str) -> ObservatoryError:
    where = f" in {probe.source}" if probe.source else ""
    return ObservatoryError(f"Probe {probe.name!r}{where}: {msg}")


def judge(answer: str, expect: dict[str, Any], probe: Probe) -> list[str]:
    """The unmet expectations of EXPECT on ANSWER, as one-line messages."""
    problems = []
    if "exact" in expect:
        want = expect["exact"]
        if not isinstance(want, str):
            raise _bad(probe, "'expect.exact' must be a string")
        if answer != want.strip():
            problems.append(f"expected exactly {want.strip()!r}, got {answer[:80]!r}")
    if "regex" in expect:
        pattern = expect["regex"]
        try:
            matched = regex.fullmatch(pattern, answer, regex.DOTALL, timeout=REGEX_TIMEOUT_S)
        except (regex.error, TypeError) as e:
            raise _bad(probe, f"'expect.regex' does not compile: {e}") from None
        except TimeoutError:
            raise RegexTimeout(f"'expect.regex' {pattern[:80]!r} did not finish within {REGEX_TIMEOUT_S:g} s "
                               f"on this output ({len(answer)} characters): not judged") from None
        if matched is None:
            problems.append(f"{answer[:80]!r} does not fully match {pattern!r}")
    if "contains" in expect:
        wanted = expect["contains"]
        if not isinstance(wanted, list) or not all(isinstance(w, str) for w in wanted):
            raise _bad(probe, "'expect.contains' must be a list of strings")
        missing = [w for w in wanted if w not in answer]
        if missing:
            problems.append(f"missing {missing}")
    return problems


@gate(
    "expect",
    "The answer meets the probe's exact / regex / contains expectations.",
    kind="result",
    correctness=True,
    applies="named",
)
def check(output: Output, probe: Probe) -> GateResult:
    """Check OUTPUT's answer against PROBE.expect; SKIP when it declares none of exact/regex/contains."""
    declared = [k for k in _KEYS if k in probe.expect]
    if not declared:
        return GateResult(SKIP, "the probe declares no exact, regex or contains expectation")
    answer = answer_text(output.text or output.content or "")
    try:
        problems = judge(answer, probe.expect, probe)
    except RegexTimeout as e:
        return GateResult(WARN, str(e), {"checked": declared, NOT_JUDGED: str(e)})
    details = {"checked": declared, "problems": problems}
    if problems:
        return GateResult(FAIL, "; ".join(problems), details)
    return GateResult(PASS, f"meets {', '.join(declared)}", details)


@offline("expect")
def check_offline(obj: dict[str, Any]) -> dict[str, Any]:
    """``{"text": "...", "expect": {"exact"?, "regex"?, "contains"?}}`` -> verdict, reason."""
    text, expect = obj.get("text"), obj.get("expect") or {}
    if not isinstance(text, str) or not isinstance(expect, dict):
        raise ObservatoryError(
            'expected {"text": "...", "expect": {"exact"|"regex"|"contains": ...}}'
        )
    probe = Probe(name="offline", category="prose_en", prompt="", expect=expect)
    result = check(Output(text=text), probe)
    return {"verdict": result.verdict, "reason": result.reason, **result.details}
