"""Which stored verdicts a known-findings ledger covers (issue 46 item 1; the format: `observatory.model.ledger`).

Applied in the judge step (`observatory.commands.evaluate`), after the gates,
channels and figures: every stored finding an entry covers becomes KNOWN, its
original verdict kept in its details (``verdict_before``) beside the entry
(``known``: id, title, link, reproduction), as the judge's own overrides keep
theirs. A finding is one of:

- a verdict row (a result's, an arm's or a channel's): its check is the gate
  (``token_diff``, ``stream_tokens``, ``finish``, ``params:min_p``), its probe the
  result's probe (an arm or channel verdict has none);
- a performance entry in an arm's figures (check ``speedup``, ``ttft_ratio``, ...);
- a validity code of an arm (check ``CRASHED``, ``INVALID``, ...; level INVALID);
  an INVALID code made from an arm verdict the ledger covers (figures.validity
  writes ``GATE: reason``) is covered with it.

An entry covers a finding when it has not expired for the session (its date
after the session's start), the finding's arm matches (engine, version,
platform, dtype, its name, role or ``repair=NAME`` in ``arms``; an injected
fault's arm never: a ledger is about engines, and a fault is the observatory's
own negative control), its check and probe match, its level is one of the
entry's levels and its reason contains one of the entry's phrases (any case).
The first such entry in ledger order is named.

An entry that applies to the session (an arm it matches, on which one of its
checks was judged) but covered nothing is a NOTE "known finding ID not seen
tonight: fixed?"; an expired entry that applies is a NOTE too (`ledger_notes`,
which the verdict policy adds to the session's reasons).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

from observatory.engines.adapter import adapters
from observatory.faults import ENV_VAR as FAULT_ENV
from observatory.faults.names import split_names
from observatory.faults.repairs import ENV_VAR as REPAIR_ENV
from observatory.model.errors import ObservatoryError
from observatory.model.ledger import (
    DEFAULT_FILE,
    KnownEntry,
    KnownError,
    Ledger,
    builtin,
    combine,
    glob_matches,
    load_file,
)
from observatory.model.numerics import served_dtype
from observatory.model.read_model import ArmView, Reason, SessionFacts
from observatory.model.vocabulary import FAULT, INVALID, INVALID_CODES, KNOWN, NOTE
from observatory.store.db import ArmRow, VerdictRow
from observatory.store.session_store import Store

NOT_SEEN = "KNOWN_NOT_SEEN"  # the code of a "not seen tonight" note
EXPIRED = "KNOWN_EXPIRED"


@dataclass(frozen=True)
class ArmFacts:
    """What an entry is matched on: the arm's name and role, its engine, version, platform and dtype."""

    name: str
    role: str
    engine: str
    version: str | None
    platform: str | None  # cuda (GPUs given), cpu (launched without), None (a URL arm without: not visible)
    dtype: str | None
    repairs: tuple[str, ...] = ()  # the engine repairs it ran with (OBSERVATORY_REPAIR), matched as repair=NAME

    def names(self) -> tuple[str, ...]:
        """What an entry's ``arms`` globs match: the arm's name, its role and ``repair=NAME`` per repair."""
        return (self.name, self.role, *(f"repair={r}" for r in self.repairs))


@dataclass
class Finding:
    """One stored verdict, performance entry or validity code, as the ledger sees it."""

    arm: ArmFacts
    kind: str  # "verdict", "performance" or "validity"
    check: str
    probe: str | None
    level: str  # its verdict (for a KNOWN one, the verdict it had)
    reason: str
    known: str | None = None  # the id of the entry that covers it, once covered
    where: Any = None  # the verdict row's id, the performance entry's index, the validity code's index
    derived_from: str | None = field(default=None)  # a validity code's gate, when an arm verdict made it


def arm_facts(name: str, role: str, launch: Mapping[str, Any] | None, version: str | None,
              engine: str | None) -> ArmFacts:
    """An arm's facts from its stored role, engine and launch; an arm with an injected fault in its environment
    (an arms file's ``OBSERVATORY_FAULT``) counts as a fault's arm, as one launched ``+fault=`` does."""
    launch = launch or {}
    stored_env = launch.get("env")
    env: Mapping[str, Any] = stored_env if isinstance(stored_env, Mapping) else {}
    platform = "cuda" if launch.get("gpus") else None if launch.get("url") else "cpu"
    role = FAULT if env.get(FAULT_ENV) else role
    return ArmFacts(name=name, role=role, engine=engine or "", version=version, platform=platform,
                    dtype=served_dtype(launch.get("argv") or []),
                    repairs=tuple(sorted(split_names(str(env.get(REPAIR_ENV) or "")))))


def applies(entry: KnownEntry, arm: ArmFacts) -> bool:
    """Whether ENTRY applies to ARM at all: engine, version, platform, dtype, name or role; never a fault's arm."""
    return (arm.role != FAULT and entry.engine == arm.engine.lower() and entry.version_matches(arm.version)
            and (entry.platform is None or entry.platform == arm.platform)
            and (entry.dtype is None or entry.dtype == arm.dtype)
            and glob_matches(entry.arms, arm.names()))


def _checked(entry: KnownEntry, f: Finding) -> bool:
    """Whether F is a finding of one of ENTRY's checks and probes (whatever its level)."""
    return (any(fnmatch.fnmatchcase(f.check, p) for p in entry.checks)
            and ((f.probe is None and not [p for p in entry.probes if not p.startswith("!") and p != "*"])
                 or (f.probe is not None and glob_matches(entry.probes, (f.probe,)))))


def covers(entry: KnownEntry, f: Finding, on: date) -> bool:
    """Whether ENTRY covers finding F of a session started ON."""
    if entry.expired(on) or f.level not in entry.levels or not applies(entry, f.arm) or not _checked(entry, f):
        return False
    reason = f.reason.lower()
    return not entry.reason or any(r.lower() in reason for r in entry.reason)


def cover(ledger: Ledger, findings: Sequence[Finding], on: date) -> list[tuple[Finding, KnownEntry]]:
    """The findings LEDGER covers (not yet KNOWN), each with the first entry that covers it; an INVALID validity
    code made from a covered arm verdict goes with that verdict's entry."""
    out: list[tuple[Finding, KnownEntry]] = []
    by_arm_gate: dict[tuple[str, str], KnownEntry] = {}
    for f in findings:
        if f.known is not None or f.kind == "validity":
            continue
        entry = next((e for e in ledger.entries if covers(e, f, on)), None)
        if entry is not None:
            out.append((f, entry))
            if f.kind == "verdict" and f.probe is None:
                by_arm_gate[(f.arm.name, f.check)] = entry
    for f in findings:
        if f.known is not None or f.kind != "validity":
            continue
        entry = by_arm_gate.get((f.arm.name, f.derived_from or "")) if f.derived_from else None
        entry = entry or next((e for e in ledger.entries if covers(e, f, on)), None)
        if entry is not None:
            out.append((f, entry))
    return out


def known_details(details: Mapping[str, Any] | None, before: str, entry: KnownEntry) -> dict[str, Any]:
    """A covered finding's details: its own, the verdict it had and the entry (as the judge's overrides keep)."""
    return {**(details or {}), "verdict_before": before, "why": f"known finding {entry.id}: {entry.title}",
            "known": entry.about()}


def session_day(started: datetime | str | None) -> date:
    """The day a session started (what an entry's expiry is compared with); today where unknown."""
    if isinstance(started, datetime):
        return started.date()
    if isinstance(started, str):
        try:
            return date.fromisoformat(started[:10])
        except ValueError:
            pass
    return date.today()


# -- findings from the store (the judge step) and from the read model (the verdict policy) --------------------

def _validity_findings(arm: ArmFacts, codes: Iterable[Mapping[str, Any]]) -> list[Finding]:
    out = []
    for i, v in enumerate(codes):
        code, detail = str(v.get("code")), str(v.get("detail") or "")
        if code not in INVALID_CODES:
            continue  # notes (LOW_N, ...) count toward nothing: nothing to cover
        known = (v.get("known") or {}).get("id") if isinstance(v.get("known"), Mapping) else None
        gate = detail.split(": ", 1)[0] if code == INVALID and ": " in detail else None
        out.append(Finding(arm, "validity", code, None, INVALID, detail, known, i, gate))
    return out


def _perf_findings(arm: ArmFacts, perf: Iterable[Mapping[str, Any]] | None) -> list[Finding]:
    out = []
    for i, p in enumerate(perf or []):
        level = p.get("verdict_before") if p.get("verdict") == KNOWN else p.get("verdict")
        known = (p.get("known") or {}).get("id") if p.get("verdict") == KNOWN else None
        out.append(Finding(arm, "performance", str(p.get("check")), None, str(level), str(p.get("reason") or ""),
                           known, i))
    return out


def _verdict_finding(arm: ArmFacts, gate: str, probe: str | None, verdict: str, reason: str | None,
                     details: Mapping[str, Any] | None, where: Any = None) -> Finding:
    d = details or {}
    known = (d.get("known") or {}).get("id") if verdict == KNOWN and isinstance(d.get("known"), Mapping) else None
    level = str(d.get("verdict_before")) if verdict == KNOWN else verdict
    return Finding(arm, "verdict", gate, probe, level, reason or "", known, where)


def store_findings(store: Store, session_id: int) -> tuple[list[Finding], list[ArmRow], dict[int, Any]]:
    """Every finding of a stored session, its arms, and each verdict row's details by row id."""
    arms = store.arms(session_id)
    probes = {p.id: p.name for p in store.probes(session_id)}
    out: list[Finding] = []
    details: dict[int, Any] = {}
    for a in arms:
        facts = arm_facts(a.name, a.role or "", a.launch, a.engine_version, a.engine)
        for v in store.verdicts(a.id):
            details[v.id] = v.details
            out.append(_verdict_finding(facts, v.gate, probes.get(v.probe_id) if v.probe_id is not None else None,
                                        v.verdict, v.reason, v.details, v.id))
        out += _perf_findings(facts, (a.figures or {}).get("performance"))
        out += _validity_findings(facts, a.validity or [])
    return out, arms, details


def view_findings(arms: Sequence[ArmView], role_of: Any) -> list[Finding]:
    """Every finding of a session's arms as the read model holds them (ROLE_OF: an arm's role)."""
    out: list[Finding] = []
    for a in arms:
        facts = arm_facts(a.name, role_of(a), a.launch, a.engine_version, a.engine)
        for r in a.results:
            out += [_verdict_finding(facts, g, r.probe, v.verdict, v.reason, v.details) for g, v in r.verdicts.items()]
        for verdicts in (a.arm_verdicts, a.channel_verdicts):
            out += [_verdict_finding(facts, g, None, v.verdict, v.reason, v.details) for g, v in verdicts.items()]
        out += _perf_findings(facts, a.figures.performance)
        out += _validity_findings(facts, [{"code": v.code, "detail": v.detail, "known": v.known} for v in a.validity])
    return out


# -- the ledger in effect ----------------------------------------------------------------------------------

def engine_names() -> list[str]:
    """The engine names an entry may name: every installed adapter's."""
    return sorted(adapters())


def resolve(files: Sequence[str | Path] = (), use_builtin: bool = True, default_dir: Path | None = None,
            arms_file_known: Sequence[str | Path] = ()) -> Ledger:
    """The ledger a command puts in effect: the arms file's ledgers and FILES (or, with no --known, the default
    file DEFAULT_FILE in DEFAULT_DIR if there is one), then the built-in ledger unless USE_BUILTIN is off."""
    engines = engine_names()
    paths = [Path(p) for p in arms_file_known] + [Path(p) for p in files]
    if not files and default_dir is not None and (default_dir / DEFAULT_FILE).is_file():
        paths.append(default_dir / DEFAULT_FILE)
    loaded = [load_file(p, engines) for p in paths]
    return combine(builtin(engines) if use_builtin else [], loaded)


def stored_ledger(stored: Sequence[Any] | None, session_id: int) -> Ledger | None:
    """The ledger a session stored (`Store.known`; None: it has none)."""
    if stored is None:
        return None
    return Ledger.from_stored(list(stored), f"session {session_id}'s stored ledger")


def apply_ledger(store: Store, session_id: int, ledger: Ledger | None = None) -> dict[str, int]:
    """Mark every stored finding the ledger covers KNOWN (LEDGER: the one given, else the session's stored one,
    else none); returns how many findings each entry covered."""
    session = store.session(session_id)
    ledger = ledger if ledger is not None else stored_ledger(store.known(session_id), session_id)
    if ledger is None or not ledger.entries:
        return {}
    findings, arms, details = store_findings(store, session_id)
    covered = cover(ledger, findings, session_day(session.started_at))
    counts: dict[str, int] = {}
    rows: dict[int, dict[str, Any]] = {}
    by_arm: dict[str, list[tuple[Finding, KnownEntry]]] = {}
    for f, entry in covered:
        counts[entry.id] = counts.get(entry.id, 0) + 1
        if f.kind == "verdict":
            rows[int(f.where)] = {"verdict": KNOWN, "details": known_details(details[f.where], f.level, entry)}
        else:
            by_arm.setdefault(f.arm.name, []).append((f, entry))
    if rows:
        store.update_many(VerdictRow, rows)
    for a in arms:
        if a.name not in by_arm:
            continue
        figures, validity = dict(a.figures or {}), [dict(v) for v in a.validity or []]
        perf = [dict(p) for p in figures.get("performance") or []]
        for f, entry in by_arm[a.name]:
            if f.kind == "performance":
                perf[f.where] = {**perf[f.where], "verdict": KNOWN, "verdict_before": f.level, "known": entry.about()}
            else:
                validity[f.where] = {**validity[f.where], "known": entry.about()}
        if perf:
            figures["performance"] = perf
        store.update(ArmRow, a.id, figures=figures, validity=validity)
    return counts


def ledger_notes(session: SessionFacts, arms: Sequence[ArmView], role_of: Any) -> list[Reason]:
    """NOTE reasons for the session's stored ledger: each entry that applies but covered nothing ("not seen
    tonight: fixed?") and each expired entry that applies."""
    try:
        ledger = stored_ledger(session.known, session.id)
    except ObservatoryError as e:
        return [Reason(NOTE, f"the stored known-findings ledger cannot be read: {e}", code=NOT_SEEN)]
    if ledger is None:
        return []
    on = session_day(session.started_at)
    findings = view_findings(arms, role_of)
    facts = {f.arm.name: f.arm for f in findings}
    seen = {f.known for f in findings if f.known}
    out = []
    for entry in ledger.entries:
        matched = [a for a in facts.values() if applies(entry, a)]
        if not matched or entry.id in seen:
            continue
        if entry.expired(on):
            out.append(Reason(NOTE, f"known finding {entry.id} expired on {entry.expires}: it covers nothing; renew "
                                    "or remove it", code=EXPIRED, known=entry.about()))
            continue
        ran = sorted({f.arm.name for f in findings if f.arm in matched and _checked(entry, f)})
        if ran:
            out.append(Reason(NOTE, f"known finding {entry.id} not seen tonight: fixed? ({entry.title}; checked on "
                                    f"{', '.join(ran)})", arm=ran[0] if len(ran) == 1 else None, code=NOT_SEEN,
                              known=entry.about()))
    return out


def check_ledger(store: Store, session_id: int, ledger: Ledger) -> dict[str, Any]:
    """What LEDGER would do to a stored session, writing nothing: the findings it would cover (by entry) and the
    entries that apply but would cover nothing (`observatory known check`)."""
    session = store.session(session_id)
    on = session_day(session.started_at)
    findings, _, _ = store_findings(store, session_id)
    fresh = [Finding(f.arm, f.kind, f.check, f.probe, f.level, f.reason, None, f.where, f.derived_from)
             for f in findings]  # as if judged anew: what is KNOWN now is judged again
    covered = cover(ledger, fresh, on)
    by_entry: dict[str, list[str]] = {}
    for f, entry in covered:
        probe = f" / {f.probe}" if f.probe else ""
        by_entry.setdefault(entry.id, []).append(f"{f.arm.name}{probe}: {f.check}: {f.level}: {f.reason}")
    facts = {f.arm.name: f.arm for f in fresh}
    not_seen, expired = [], []
    for entry in ledger.entries:
        matched = [a for a in facts.values() if applies(entry, a)]
        if not matched or entry.id in by_entry:
            continue
        if entry.expired(on):
            expired.append(entry.id)
        elif any(f.arm in matched and _checked(entry, f) for f in fresh):
            not_seen.append(entry.id)
    return {"covered": by_entry, "not_seen": not_seen, "expired": expired}


__all__ = [
    "ArmFacts",
    "Finding",
    "KnownError",
    "applies",
    "apply_ledger",
    "arm_facts",
    "check_ledger",
    "cover",
    "covers",
    "ledger_notes",
    "resolve",
    "session_day",
    "stored_ledger",
]
