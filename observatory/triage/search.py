"""Triage: which engine knob does a failure depend on?

For a spec arm that failed in a stored session, the arm is relaunched under
one knob change at a time (`observatory.engines.knobs`), its failing probes are sent
again, and each run is judged against the session's stored base output with
the ``token_diff`` gate. The plan, a pure function of an experiment
``check(change) -> TriageRun``:

1. reproduce: the arm as the session ran it (change ``{}``); a failure that
   does not come back is reported as such and nothing is narrowed;
2. one knob at a time: a change under which the run PASSes *flips* the
   failure, one under which it still fails *keeps* it;
3. minimal: one flipping knob is already minimal; when no single knob flips,
   all tried changes together are run, and if that passes, delta debugging
   (`observatory.triage.delta.ddmin`) narrows them to a 1-minimal set.

The budget (``max_runs``) bounds the number of launches; whatever was not
tried is listed with the reason (not applicable on this hardware, out of
runs). Runs already made (``--resume``) are reused, not relaunched.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from observatory.model.errors import ObservatoryError
from observatory.model.vocabulary import INVALID, PASS
from observatory.triage.delta import OutOfRuns, ddmin

# launches per run on the CPU engine: ~60-90 s to start on 2 cores + the failing
# probes; 12 runs fit the 20 minutes the issue allows for one failing probe
DEFAULT_MAX_RUNS = 12


@dataclass
class TriageRun:
    """One relaunch of the arm under one set of knob changes, judged against base."""

    change: dict[str, Any]
    verdict: str
    first_divergence: int | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    log_path: str | None = None
    duration_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The machine-readable form of `triage --json`."""
        return {"change": self.change, "verdict": self.verdict, "first_divergence": self.first_divergence,
                "reason": self.reason}


@dataclass
class TriageOutcome:
    """What triage found: flipping and keeping knobs, the minimal change, what it did not try."""

    runs: list[TriageRun] = field(default_factory=list)
    reproduced: bool | None = None
    flips: list[str] = field(default_factory=list)
    keeps: list[str] = field(default_factory=list)
    minimal: dict[str, Any] | None = None
    # True when the minimal set was proven 1-minimal, False when the budget cut the search
    minimal_proven: bool | None = None
    not_tried: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""

    def to_dict(self) -> dict[str, Any]:
        """What is stored as the triage's outcome."""
        return {"reproduced": self.reproduced, "flips": self.flips, "keeps": self.keeps, "minimal": self.minimal,
                "minimal_proven": self.minimal_proven, "not_tried": self.not_tried, "summary": self.summary}


def change_key(change: dict[str, Any]) -> str:
    """One canonical string per set of changes (the cache key of --resume)."""
    return json.dumps(change, sort_keys=True, separators=(",", ":"))


def knob_names(change: dict[str, Any]) -> str:
    """A change as `a=1, b=off` for people."""
    if not change:
        return "as the session ran it"
    return ", ".join(f"{k}={_word(v)}" for k, v in change.items())


def _word(v: Any) -> str:
    if v is True:
        return "on"
    if v is False:
        return "off"
    return str(v)


class _Runner:
    """Runs experiments through CHECK within the budget, reusing cached runs."""

    def __init__(self, check: Callable[[dict[str, Any]], TriageRun], max_runs: int,
                 done: dict[str, TriageRun] | None, on_run: Callable[[TriageRun, int, int], None] | None):
        self.check, self.max_runs, self.on_run = check, max_runs, on_run
        self.cache = dict(done or {})
        self.runs: list[TriageRun] = []
        self.launched = sum(1 for _ in self.cache)

    def run(self, change: dict[str, Any]) -> TriageRun:
        key = change_key(change)
        if key in self.cache:
            r = self.cache[key]
        else:
            if self.launched >= self.max_runs:
                raise OutOfRuns(key)
            self.launched += 1
            r = self.check(change)
            self.cache[key] = r
            if self.on_run:
                self.on_run(r, self.launched, self.max_runs)
        if all(change_key(x.change) != key for x in self.runs):
            self.runs.append(r)
        return r


def narrow(check: Callable[[dict[str, Any]], TriageRun], singles: list[tuple[str, Any]], max_runs: int,
           not_applicable: dict[str, str] | None = None, done: dict[str, TriageRun] | None = None,
           on_run: Callable[[TriageRun, int, int], None] | None = None) -> TriageOutcome:
    """The triage plan (module docstring) over SINGLES, the (knob, value) changes to try, in order."""
    if max_runs < 1:
        raise ObservatoryError("--max-runs must be at least 1 (the reproduction run).")
    out = TriageOutcome(not_tried=[{"knob": k, "why": why} for k, why in (not_applicable or {}).items()])
    runner = _Runner(check, max_runs, done, on_run)
    try:
        first = runner.run({})
        out.reproduced = None if first.verdict == INVALID else first.verdict != PASS
        if out.reproduced is not True:
            out.summary = (f"the arm as the session ran it could not be measured: {first.reason}"
                           if out.reproduced is None else
                           "the failure did not reproduce when the arm was relaunched as the session ran it "
                           "(flaky, or it depends on requests this replay did not send): nothing to narrow")
            out.not_tried += [{"change": {k: v}, "why": "the failure did not reproduce"} for k, v in singles]
            return _done(out, runner)
        tried: list[tuple[str, Any]] = []
        for i, (knob, value) in enumerate(singles):
            try:
                r = runner.run({knob: value})
            except OutOfRuns:
                out.not_tried += [{"change": {k: v}, "why": f"out of runs (--max-runs {max_runs})"}
                                  for k, v in singles[i:]]
                break
            if r.verdict == PASS:
                if knob not in out.flips:
                    out.flips.append(knob)
            elif r.verdict == INVALID:
                out.not_tried.append({"change": {knob: value}, "why": f"not measurable: {r.reason}"})
                continue
            elif knob not in out.keeps:
                out.keeps.append(knob)
            if knob not in [k for k, _ in tried]:
                tried.append((knob, value))
        out.keeps = [k for k in out.keeps if k not in out.flips]
        _minimal(out, runner, tried, max_runs)
    except OutOfRuns:
        out.not_tried.append({"change": None, "why": f"out of runs (--max-runs {max_runs})"})
    return _done(out, runner)


def _minimal(out: TriageOutcome, runner: _Runner, tried: list[tuple[str, Any]], max_runs: int) -> None:
    flip_runs = [r for r in runner.runs if len(r.change) == 1 and r.verdict == PASS]
    if flip_runs:
        out.minimal, out.minimal_proven = dict(flip_runs[0].change), True
        return
    candidates = [(k, v) for k, v in tried if k not in out.flips]
    if len(candidates) < 2:
        return
    try:
        together = runner.run(dict(candidates))
    except OutOfRuns:
        out.not_tried.append({"change": dict(candidates), "why": f"out of runs (--max-runs {max_runs}): "
                              "no combination of knobs was tried"})
        return
    if together.verdict != PASS:
        return
    best = list(candidates)

    def passes(subset: list[tuple[str, Any]]) -> bool | None:
        nonlocal best
        r = runner.run(dict(subset))
        ok = r.verdict == PASS
        if ok and len(subset) < len(best):
            best = list(subset)
        return ok if r.verdict != INVALID else None

    try:
        out.minimal, out.minimal_proven = dict(ddmin(candidates, passes)), True
    except OutOfRuns:
        out.minimal, out.minimal_proven = dict(best), False
        out.not_tried.append({"change": None, "why": f"out of runs (--max-runs {max_runs}): the minimal set "
                              "is the smallest passing one found, not proven minimal"})


def _done(out: TriageOutcome, runner: _Runner) -> TriageOutcome:
    out.runs = runner.runs
    if not out.summary and out.reproduced:
        if out.flips:
            out.summary = f"the failure disappears with {', '.join(out.flips)} changed alone"
        elif out.minimal:
            out.summary = f"no single knob flips it; together: {knob_names(out.minimal)}"
        else:
            out.summary = "no tried knob change, alone or together, makes the failure disappear"
    return out
