"""The one verdict policy: a session's verdict with structured reasons.

Everything that states a session's verdict renders `decide`'s result, which
`observatory.report.data.build` stores as the read model's ``verdict``: the
nightly gate's exit code, the HTML report's banner, the terminal summary,
JUnit, selftest and ``show --json`` (its top-level ``"verdict"``).

- FAIL (exit 1): an arm judged against base (spec, fault, A/A copy, variant)
  fails a probe: a hard token divergence, a text divergence where ids are
  missing, a correctness gate the base arm passes, a timed output that
  differs where base's do not; or a performance check the user made a
  threshold of (``--fail-on``) fails, or S lies wholly below the default
  speed floor (``perf_gates.SPEEDUP_FAIL_BELOW``).
- INVALID (exit 2): nothing failed, but a verdict or a figure cannot be
  backed: the session is unfinished; there is no base arm; an arm crashed,
  hung, failed to start, did not speculate, was confounded or resumed across
  sessions; an arm answered blank or failed most requests; a probe has no
  usable base result (its verdicts are UNJUDGED); a request failed; a diff
  could not be made.
- WARN (exit 0): nothing failed or is invalid, but something needs a look
  (near-ties, streams that withheld ids, performance below the defaults, no
  probe discriminates).
- PASS (exit 0): every arm judged against base passes every discriminating
  probe, and every arm is valid.

NOTEs explain without changing the verdict (LOW_N, non-discriminating probes).
KNOWN reasons are findings a known-findings ledger covers (`observatory.judge.ledger_match`:
the verdict, performance entry or validity code stored KNOWN, its entry named):
listed, never counted; an entry that applies but covered nothing is a NOTE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from observatory.judge.ledger_match import ledger_notes
from observatory.model.arms import depth_coverage
from observatory.model.errors import ObservatoryError
from observatory.model.gates import GateRegistry, default_registry, registry_for
from observatory.model.read_model import (
    ArmView,
    Depths,
    Reason,
    SessionFacts,
    SessionVerdict,
    SessionView,
    VerdictView,
)
from observatory.model.vocabulary import (
    AA_COPY,
    BASE,
    EXIT,
    FAIL,
    FAULT,
    INVALID,
    INVALID_CODES,
    JUDGED_AGAINST_BASE,
    KNOWN,
    NOT_DISCRIMINATING,
    NOTE,
    PASS,
    REASON_LEVELS,
    SKIP,
    SPEC,
    UNJUDGED,
    VARIANT,
    WARN,
)
from observatory.store.arm_facts import launch_facts

__all__ = ["EXIT", "INVALID_CODES", "LEVELS", "NOT_DISCRIMINATING", "UNJUDGED", "WHY", "Reason", "SessionVerdict",
           "arm_role", "decide", "discriminates", "session_gates", "session_verdict"]

LEVELS = REASON_LEVELS
WHY = {
    FAIL: "an arm judged against base fails a probe or a performance threshold",
    INVALID: "nothing failed, but a verdict or a measurement cannot be backed",
    WARN: "nothing failed, but some outputs or figures need a look",
    PASS: "every arm judged against base passes every discriminating probe, and every arm is valid",
}


def arm_role(arm: ArmView) -> str:
    """An arm's role: the read model sets it for every arm (stored with the session,
    `observatory.store.arm_facts`); an ArmView made without one gets the same rule on its own facts, never a rule
    of its own."""
    return arm.role or launch_facts([(arm.name, dict(arm.launch))])[0][0]


def _known(v: VerdictView) -> Any:
    """The ledger entry a KNOWN verdict carries (`observatory.judge.ledger_match`), else None."""
    return (v.details or {}).get("known") if v.verdict == KNOWN else None


def _validity_reasons(arm: ArmView, add: Any) -> None:
    codes = [v.code for v in arm.validity]
    for v in arm.validity:
        level = KNOWN if v.known else INVALID if v.code in INVALID_CODES else NOTE
        add(level, f"arm {arm.name}: {v.code}: {v.detail or ''}".strip(), arm=arm.name, code=v.code,
            known=v.known)
    if arm.status != "ok" and not any(c in INVALID_CODES for c in codes):
        add(INVALID, f"arm {arm.name}: {arm.status} {arm.reason or ''}".strip(), arm=arm.name,
            code=str(arm.status).upper())
    results = arm.results
    failed = [r for r in results if not r.ok]
    if results and len(failed) * 2 > len(results):
        add(INVALID, f"{arm.name}: {len(failed)} of {len(results)} requests failed: the arm answers nothing usable",
            arm=arm.name, code="NO_ANSWERS")
    if not arm.validity:  # figures not computed (yet): the arm gates' own word
        for gate, gv in arm.arm_verdicts.items():
            if gv.verdict == INVALID:
                add(INVALID, f"{arm.name}: {gate}: {gv.reason}", arm=arm.name, gate=gate)


def session_gates(session: SessionFacts) -> GateRegistry:
    """The gates a session was judged with: the built-ins plus its stored ``--gates-dir`` folders.

    A folder gone since is left out (its gates' metadata is then unknown: see `discriminates`).
    """
    plan = (session.options or {}).get("plan") or {}
    try:
        return registry_for(plan.get("gates_dirs") or ())
    except ObservatoryError:
        return default_registry()


def discriminates(registry: GateRegistry) -> Callable[[str], bool]:
    """Whether a verdict key's gate can make a probe discriminating: a correctness gate that does not
    compare whole sequences (the token diffs, ``NAME`` and its channels ``NAME:nonstream`` ..., judge every
    probe whatever base does). A gate not in REGISTRY is unknown, so it does not count."""
    def counts(key: str) -> bool:
        name = key.split(":", 1)[0]  # a channel verdict is its sequence gate's (judge: NAME:channel)
        if name not in registry:
            return False
        g = registry.get(name)
        return g.purpose == "correctness" and not g.sequences
    return counts


# the reason level of a verdict on an arm judged against base (None: a verdict that says nothing to count or list)
_LEVEL_OF = {FAIL: FAIL, WARN: WARN, UNJUDGED: INVALID, INVALID: INVALID, KNOWN: KNOWN, NOTE: NOTE}


def _judged_arm_reasons(arm: ArmView, add: Any,
                        counts: Callable[[str], bool]) -> tuple[int, int, set[str]]:
    """Reasons from the results of an arm judged against base; (judged, discriminating, not-discriminating probes).

    COUNTS tells which verdicts can make a probe discriminating (`discriminates`).
    """
    judged = discriminating = 0
    not_discr: set[str] = set()
    aa = " (A/A control: the engine's own non-determinism)" if arm_role(arm) == AA_COPY else ""
    name = arm.name
    for r in arm.results:
        probe = r.probe
        if not r.ok:
            add(INVALID, f"{name} / {probe}: request failed: {r.error}", arm=name, probe=probe)
            continue
        judged += 1
        verdicts = r.verdicts
        if any(v.verdict not in (NOT_DISCRIMINATING, SKIP, UNJUDGED) and counts(g) for g, v in verdicts.items()):
            discriminating += 1
        if any(v.verdict == NOT_DISCRIMINATING for v in verdicts.values()):
            not_discr.add(probe)
        for gate, v in verdicts.items():
            level = _LEVEL_OF.get(v.verdict)
            if level:
                tag = f"{v.verdict}: " if v.verdict in (UNJUDGED, INVALID) else ""
                add(level, f"{name} / {probe}: {gate}: {tag}{v.reason}{aa}", arm=name, probe=probe, gate=gate,
                    known=_known(v))
    for gate, v in arm.arm_verdicts.items():
        if v.verdict in (FAIL, WARN, KNOWN, NOTE):
            add(v.verdict, f"{name}: {gate}: {v.reason}", arm=name, gate=gate, known=_known(v))
    for gate, v in arm.channel_verdicts.items():
        level = _LEVEL_OF.get(v.verdict)
        if level:
            tag = f"{v.verdict}: " if level == INVALID else ""
            add(level, f"{name}: channel {gate}: {tag}{v.reason}{aa}", arm=name, gate=gate, code="CHANNEL",
                known=_known(v))
    for p in arm.figures.performance or []:
        if p.get("verdict") in (FAIL, WARN, KNOWN):
            add(p["verdict"], f"{name}: {p.get('check')}: {p.get('reason')}", arm=name, gate=p.get("check"),
                known=p.get("known"))
    return judged, discriminating, not_discr


def arm_depths(arms: Sequence[ArmView]) -> Depths | None:
    """The speculation depths the spec arms planned and covered, and the deployed one (None without spec arms)."""
    got = depth_coverage([{"name": a.name, "status": a.status, "deployed": (a.launch or {}).get("deployed"),
                           "speculative_config": (a.launch or {}).get("speculative_config")}
                          for a in arms if a.is_spec and not a.copy_of])
    if not got["planned"] and got["deployed_arm"] is None:
        return None
    return Depths(tuple(got["planned"]), tuple(got["covered"]), got["deployed_k"], got["deployed_arm"],
                  got["deployed_measured"])


def depths_note(arms: Sequence[ArmView]) -> str | None:
    """`arm_depths` as a line."""
    d = arm_depths(arms)
    return d.summary() if d is not None else None


def decide(session: SessionFacts, arms: Sequence[ArmView]) -> SessionVerdict:
    """The session verdict of SESSION's ARMS (`observatory.report.data.build` stores it as ``.verdict``)."""
    reasons: list[Reason] = []

    def add(level: str, text: str, **about: Any) -> None:
        reasons.append(Reason(level, text, **about))

    if session.status != "complete":
        add(INVALID, f"session {session.status}: {session.reason or 'not finished'}".strip())
    if not any(arm_role(a) == BASE for a in arms):
        add(INVALID, "no base arm: no token diff was made, and no probe can be discriminated", code="NO_BASE")
    judged = discriminating = 0
    not_discr: set[str] = set()
    counts = discriminates(session_gates(session))
    for arm in arms:
        _validity_reasons(arm, add)
        role = arm_role(arm)
        if role not in JUDGED_AGAINST_BASE:
            for gate, v in arm.channel_verdicts.items():
                if v.verdict in (INVALID, UNJUDGED):  # the reference itself could not be measured
                    add(INVALID, f"{arm.name}: channel {gate}: {v.reason}", arm=arm.name, gate=gate,
                        code="CHANNEL")
                elif (v.details or {}).get("verdict_before") in (INVALID, UNJUDGED) and _known(v):
                    add(KNOWN, f"{arm.name}: channel {gate}: {v.reason}", arm=arm.name, gate=gate, code="CHANNEL",
                        known=_known(v))
            continue  # base's own failures make probes non-discriminating, not failures
        j, d, nd = _judged_arm_reasons(arm, add, counts)
        judged, discriminating, not_discr = judged + j, discriminating + d, not_discr | nd
        cells = [r.verdict for r in arm.results if r.verdict]
        if role in (SPEC, FAULT, VARIANT) and cells and all(c == NOT_DISCRIMINATING for c in cells):
            add(NOTE, f"arm {arm.name}: no probe discriminates (the base arm fails every one): "
                        "this session tests nothing about speculation", arm=arm.name)
    if judged and not discriminating:
        add(WARN, "no probe discriminates: the base arm fails every correctness gate the probes declare, "
                    "so only the token diffs judge the other arms")
    if not_discr:
        add(NOTE, f"not discriminating (the base arm fails them too): {', '.join(sorted(not_discr))}")
    depths = depths_note(arms)
    if depths:
        add(NOTE, depths, code="DEPTHS")
    reasons.extend(ledger_notes(session, arms, arm_role))  # known findings not seen tonight, or expired
    levels = {r.level for r in reasons}
    verdict = next((lv for lv in (FAIL, INVALID, WARN) if lv in levels), PASS)
    ordered = tuple(sorted(reasons, key=lambda r: LEVELS.index(r.level)))
    return SessionVerdict(verdict, WHY[verdict], ordered)


def session_verdict(data: SessionView) -> tuple[str, list[str]]:
    """(PASS | WARN | FAIL | INVALID, the reasons that are not NOTEs) of one `report_data.build` view."""
    return data.verdict.verdict, data.verdict.texts()
