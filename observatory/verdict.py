"""The one verdict policy: a session's verdict with structured reasons.

Everything that states a session's verdict renders `decide(data)`: the
nightly gate's exit code, the HTML report's banner, the terminal summary,
JUnit, selftest and ``show --json`` (its top-level ``"verdict"``). ``data`` is
one session as `observatory.report_data.build` returns it.

- FAIL (exit 1): an arm judged against base (spec, fault, A/A copy, variant)
  fails a probe: a hard token divergence, a text divergence where ids are
  missing, a correctness gate the base arm passes, a timed output that
  differs where base's do not; or a performance check the user made a
  threshold of (``--fail-on``) fails.
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
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from observatory.errors import ObservatoryError
from observatory.gates import GateRegistry, default_registry, registry_for
from observatory.roles import AA_COPY, BASE, FAULT, JUDGED_AGAINST_BASE, SPEC, VARIANT

INVALID_CODES = ("INVALID", "CONFOUNDED", "CRASHED", "HUNG", "CROSS_SESSION")
EXIT = {"PASS": 0, "WARN": 0, "FAIL": 1, "INVALID": 2}
LEVELS = ("FAIL", "INVALID", "WARN", "NOTE")
WHY = {
    "FAIL": "an arm judged against base fails a probe or a performance threshold",
    "INVALID": "nothing failed, but a verdict or a measurement cannot be backed",
    "WARN": "nothing failed, but some outputs or figures need a look",
    "PASS": "every arm judged against base passes every discriminating probe, and every arm is valid",
}
NOT_DISCRIMINATING = "NOT_DISCRIMINATING"
UNJUDGED = "UNJUDGED"


@dataclass(frozen=True)
class Reason:
    """One reason behind a session verdict, with what it is about."""

    level: str
    text: str
    arm: str | None = None
    probe: str | None = None
    gate: str | None = None
    code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return asdict(self)


@dataclass(frozen=True)
class SessionVerdict:
    """PASS, WARN, FAIL or INVALID, why, and every reason (worst first)."""

    verdict: str
    why: str
    reasons: tuple[Reason, ...]

    @property
    def exit_code(self) -> int:
        """The nightly gate's exit status for this verdict."""
        return EXIT[self.verdict]

    def texts(self, levels: tuple[str, ...] = ("FAIL", "INVALID", "WARN")) -> list[str]:
        """The reasons of LEVELS as lines."""
        return [r.text for r in self.reasons if r.level in levels]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (the ``"verdict"`` of ``show --json``)."""
        return {"verdict": self.verdict, "why": self.why, "exit_code": self.exit_code,
                "reasons": [r.to_dict() for r in self.reasons]}


def arm_role(arm: dict[str, Any]) -> str:
    """An arm's role: stored at planning; for hand-made or old dicts, the same rule on its facts."""
    if arm.get("role"):
        return str(arm["role"])
    if arm.get("is_spec"):
        return FAULT if (arm.get("launch") or {}).get("fault") else SPEC
    return AA_COPY if arm.get("copy_of") else BASE


def _validity_reasons(arm: dict[str, Any], add: Any) -> None:
    codes = [v.get("code") for v in arm.get("validity") or []]
    for v in arm.get("validity") or []:
        level = "INVALID" if v.get("code") in INVALID_CODES else "NOTE"
        add(level, f"arm {arm['name']}: {v.get('code')}: {v.get('detail') or ''}".strip(), arm=arm["name"],
            code=v.get("code"))
    if arm.get("status") != "ok" and not any(c in INVALID_CODES for c in codes):
        add("INVALID", f"arm {arm['name']}: {arm.get('status')} {arm.get('reason') or ''}".strip(), arm=arm["name"],
            code=str(arm.get("status")).upper())
    results = arm.get("results") or []
    failed = [r for r in results if not r.get("ok")]
    if results and len(failed) * 2 > len(results):
        add("INVALID", f"{arm['name']}: {len(failed)} of {len(results)} requests failed: the arm answers nothing usable",
            arm=arm["name"], code="NO_ANSWERS")
    if not arm.get("validity"):  # figures not computed (yet): the arm gates' own word
        for gate, v in (arm.get("arm_verdicts") or {}).items():
            if v.get("verdict") == "INVALID":
                add("INVALID", f"{arm['name']}: {gate}: {v.get('reason')}", arm=arm["name"], gate=gate)


def session_gates(data: dict[str, Any]) -> GateRegistry:
    """The gates a session was judged with: the built-ins plus its stored ``--gates-dir`` folders.

    A folder gone since is left out (its gates' metadata is then unknown: see `discriminates`).
    """
    plan = ((data.get("session") or {}).get("options") or {}).get("plan") or {}
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


def _judged_arm_reasons(arm: dict[str, Any], add: Any,
                        counts: Callable[[str], bool]) -> tuple[int, int, set[str]]:
    """Reasons from the results of an arm judged against base; (judged, discriminating, not-discriminating probes).

    COUNTS tells which verdicts can make a probe discriminating (`discriminates`).
    """
    judged = discriminating = 0
    not_discr: set[str] = set()
    aa = " (A/A control: the engine's own non-determinism)" if arm_role(arm) == AA_COPY else ""
    name = arm["name"]
    for r in arm.get("results") or []:
        probe = r["probe"]
        if not r.get("ok"):
            add("INVALID", f"{name} / {probe}: request failed: {r.get('error')}", arm=name, probe=probe)
            continue
        judged += 1
        verdicts = r.get("verdicts") or {}
        if any(v["verdict"] not in (NOT_DISCRIMINATING, "SKIP", UNJUDGED) and counts(g) for g, v in verdicts.items()):
            discriminating += 1
        if any(v["verdict"] == NOT_DISCRIMINATING for v in verdicts.values()):
            not_discr.add(probe)
        for gate, v in verdicts.items():
            level = {"FAIL": "FAIL", "WARN": "WARN", UNJUDGED: "INVALID", "INVALID": "INVALID"}.get(v["verdict"])
            if level:
                tag = f"{v['verdict']}: " if v["verdict"] in (UNJUDGED, "INVALID") else ""
                add(level, f"{name} / {probe}: {gate}: {tag}{v.get('reason')}{aa}", arm=name, probe=probe, gate=gate)
    for gate, v in (arm.get("arm_verdicts") or {}).items():
        if v.get("verdict") in ("FAIL", "WARN"):
            add(v["verdict"], f"{name}: {gate}: {v.get('reason')}", arm=name, gate=gate)
    for gate, v in (arm.get("channel_verdicts") or {}).items():
        level = {"FAIL": "FAIL", "WARN": "WARN", UNJUDGED: "INVALID", "INVALID": "INVALID"}.get(v.get("verdict"))
        if level:
            tag = f"{v['verdict']}: " if level == "INVALID" else ""
            add(level, f"{name}: channel {gate}: {tag}{v.get('reason')}{aa}", arm=name, gate=gate, code="CHANNEL")
    for p in arm.get("performance") or []:
        if p.get("verdict") in ("FAIL", "WARN"):
            add(p["verdict"], f"{name}: {p.get('check')}: {p.get('reason')}", arm=name, gate=p.get("check"))
    return judged, discriminating, not_discr


def decide(data: dict[str, Any]) -> SessionVerdict:
    """The session verdict for one `report_data.build` dict."""
    reasons: list[Reason] = []

    def add(level: str, text: str, **about: Any) -> None:
        reasons.append(Reason(level, text, **about))

    s = data["session"]
    if s.get("status") != "complete":
        add("INVALID", f"session {s.get('status')}: {s.get('reason') or 'not finished'}".strip())
    arms = data["arms"]
    if not any(arm_role(a) == BASE for a in arms):
        add("INVALID", "no base arm: no token diff was made, and no probe can be discriminated", code="NO_BASE")
    judged = discriminating = 0
    not_discr: set[str] = set()
    counts = discriminates(session_gates(data))
    for arm in arms:
        _validity_reasons(arm, add)
        role = arm_role(arm)
        if role not in JUDGED_AGAINST_BASE:
            for gate, v in (arm.get("channel_verdicts") or {}).items():
                if v.get("verdict") in ("INVALID", UNJUDGED):  # the reference itself could not be measured
                    add("INVALID", f"{arm['name']}: channel {gate}: {v.get('reason')}", arm=arm["name"], gate=gate,
                        code="CHANNEL")
            continue  # base's own failures make probes non-discriminating, not failures
        j, d, nd = _judged_arm_reasons(arm, add, counts)
        judged, discriminating, not_discr = judged + j, discriminating + d, not_discr | nd
        cells = [r.get("verdict") for r in arm.get("results") or [] if r.get("verdict")]
        if role in (SPEC, FAULT, VARIANT) and cells and all(c == NOT_DISCRIMINATING for c in cells):
            add("NOTE", f"arm {arm['name']}: no probe discriminates (the base arm fails every one): "
                        "this session tests nothing about speculation", arm=arm["name"])
    if judged and not discriminating:
        add("WARN", "no probe discriminates: the base arm fails every correctness gate the probes declare, "
                    "so only the token diffs judge the other arms")
    if not_discr:
        add("NOTE", f"not discriminating (the base arm fails them too): {', '.join(sorted(not_discr))}")
    levels = {r.level for r in reasons}
    verdict = next((lv for lv in ("FAIL", "INVALID", "WARN") if lv in levels), "PASS")
    ordered = tuple(sorted(reasons, key=lambda r: LEVELS.index(r.level)))
    return SessionVerdict(verdict, WHY[verdict], ordered)


def session_verdict(data: dict[str, Any]) -> tuple[str, list[str]]:
    """(PASS | WARN | FAIL | INVALID, the reasons that are not NOTEs) for one `report_data.build` dict."""
    v = decide(data)
    return v.verdict, v.texts()
