"""Changed copies of read-model objects for tests (the views are frozen): each edit re-decides the verdict.

Cases a real session cannot easily show (a crashed arm, missing figures)
change a real `build()` view through these, as the readers would see it.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from observatory.judge.verdict import decide
from observatory.model.read_model import (
    ArmFigures,
    ArmView,
    Counters,
    ResultView,
    SessionFacts,
    SessionView,
    ValidityFlag,
    VerdictView,
)


def redecided(d: SessionView) -> SessionView:
    """D with its verdict decided again from its (changed) session and arms."""
    return replace(d, verdict=decide(d.session, d.arms))


def validity(*flags: tuple[str, str]) -> tuple[ValidityFlag, ...]:
    """Validity flags from (code, detail) pairs."""
    return tuple(ValidityFlag(code, detail) for code, detail in flags)


def session(d: SessionView, **changes: Any) -> SessionView:
    """D with its session facts changed."""
    return redecided(replace(d, session=replace(d.session, **changes)))


def arm(d: SessionView, i: int, **changes: Any) -> SessionView:
    """D with arm I changed."""
    arms = list(d.arms)
    arms[i] = replace(arms[i], **changes)
    return redecided(replace(d, arms=tuple(arms)))


def figures(d: SessionView, i: int, **changes: Any) -> SessionView:
    """D with arm I's figures changed (None: not computed)."""
    return arm(d, i, figures=replace(d.arms[i].figures, **changes))


def result(d: SessionView, i: int, probe: str, **changes: Any) -> SessionView:
    """D with arm I's result of PROBE changed."""
    a: ArmView = d.arms[i]
    return arm(d, i, results=tuple(replace(r, **changes) if r.probe == probe else r for r in a.results))


def every_result(d: SessionView, i: int, **changes: Any) -> SessionView:
    """D with every result of arm I changed."""
    return arm(d, i, results=tuple(replace(r, **changes) for r in d.arms[i].results))


def facts(status: str = "complete", **changes: Any) -> SessionFacts:
    """Session facts of a hand-made session (everything not given unknown)."""
    blank: dict[str, Any] = {f.name: None for f in fields(SessionFacts)}
    return SessionFacts(**{**blank, "id": 1, "status": status, **changes})


def hand_arm(name: str, role: str, results: tuple[ResultView, ...] = (), **changes: Any) -> ArmView:
    """A hand-made arm that ran fine (everything not given unknown or empty)."""
    blank: dict[str, Any] = {f.name: None for f in fields(ArmView)}
    return ArmView(**{**blank, "name": name, "role": role, "position": 0, "status": "ok", "launch": {},
                      "is_spec": role not in ("base", "aa_copy"), "counters": Counters(), "validity": (),
                      "arm_verdicts": {}, "channel_verdicts": {}, "figures": ArmFigures(), "results": results,
                      **changes})


def hand_result(probe: str, verdicts: dict[str, str], **changes: Any) -> ResultView:
    """A hand-made answered result with VERDICTS ({gate: verdict})."""
    blank: dict[str, Any] = {f.name: None for f in fields(ResultView)}
    return ResultView(**{**blank, "probe": probe, "ok": True, "verdict": "PASS", "preview": "",
                         "verdicts": {g: VerdictView(v, "r", None, None) for g, v in verdicts.items()}, **changes})
