"""A result gate: an answer must not run to its token budget without a word boundary (a wall of one token)."""

from __future__ import annotations

from observatory.model.gates import FAIL, PASS, GateResult, Output, gate
from observatory.model.probes import Probe

LONGEST_WORD = 60  # characters without whitespace: no English or code token of a sane answer runs this long


@gate(name="example_no_wall", description="no run of more than 60 characters without whitespace")
def check(output: Output, probe: Probe) -> GateResult:
    longest = max((len(w) for w in output.text.split()), default=0)
    if longest > LONGEST_WORD:
        return GateResult(FAIL, f"a run of {longest} characters without whitespace", {"longest": longest})
    return GateResult(PASS, f"longest run {longest} characters", {"longest": longest})
