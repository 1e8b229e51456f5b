"""JUnit XML for CI: one testcase per arm's validity, probe x judged arm, performance check and channel x arm.

Test names are stable from night to night (CI viewers keep per-test history
by classname and name): ``arm.NAME`` / ``validity``, a probe's name, or
``performance.CHECK``; ``channel.NAME`` / the arm; ``session`` / ``verdict``.
Dots in NAME become ``_`` (``arm.llama_cpp:draft2``): Jenkins reads the last
dot of a class name as the package separator (`safe_class`).
A verdict is never part of a name. Times are the stored ones (an arm's
start to finish, stored to the second, or its requests' summed durations
where longer; a request's duration; a channel's requests' summed durations on
the arm; the arm's timed traffic for its performance checks; the session's start to finish);
a case with no timing of its own has no ``time``. FAIL is a ``failure``,
INVALID and UNJUDGED an ``error``, SKIP and NOT_DISCRIMINATING ``skipped``;
KNOWN (a finding a known-findings ledger covers, docs/known.md) is ``skipped``
with the entry and the finding as its message; a WARN fails nothing but is
visible: a ``warnings`` property (their count) and a ``WARN:`` line each in
the case's ``system-out``. The session case lists the verdict's reasons one
line per cause (`observatory.judge.reasons`), known findings and notes apart.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from observatory.judge.reasons import group_reasons, known_summary
from observatory.judge.verdict import arm_role
from observatory.model.read_model import ArmView, SessionView
from observatory.model.vocabulary import (
    COUNTED_LEVELS,
    FAIL,
    INVALID,
    INVALID_CODES,
    JUDGED_AGAINST_BASE,
    KNOWN,
    NOT_DISCRIMINATING,
    NOTE,
    PASS,
    SKIP,
    UNJUDGED,
    WARN,
)

# Characters XML 1.0 cannot carry at all (model output may hold any of them).
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: Any, limit: int) -> str:
    return _XML_BAD.sub("\ufffd", str(text))[:limit]


def _seconds(start: str | None, end: str | None) -> float | None:
    """Seconds from START to END (stored ISO times), None when either is unknown or they are out of order."""
    if not start or not end:
        return None
    try:
        s = (datetime.fromisoformat(end.removesuffix("Z")) - datetime.fromisoformat(start.removesuffix("Z"))).total_seconds()
    except (TypeError, ValueError):
        return None
    return s if s >= 0 else None


def _arm_seconds(arm: ArmView) -> float | None:
    """The arm's start to finish (stored to the second), or its requests' summed durations where longer."""
    span = _seconds(arm.started_at, arm.finished_at)
    busy = sum(r.duration_ms for r in arm.results if r.duration_ms is not None) / 1000.0
    return max(span or 0.0, busy) if span is not None or busy else None


def _timed_seconds(arm: ArmView) -> float | None:
    """The timed traffic the arm's performance checks judged (its side of ``vs_base.timed_s``), if stored."""
    timed = ((arm.figures.vs_base or {}).get("timed_s") or {}).get("arm")
    if isinstance(timed, (int, float)) and not isinstance(timed, bool) and timed >= 0:
        return float(timed)
    # sessions judged before vs_base carried timed_s: the single-stream samples' seconds ([tokens, seconds])
    secs = [x[1] for x in (arm.figures.speed or {}).get("samples") or []
            if isinstance(x, (list, tuple)) and len(x) == 2 and isinstance(x[1], (int, float)) and x[1] >= 0]
    return float(sum(secs)) if secs else None


def safe_class(prefix: str, name: str) -> str:
    """A class name Jenkins reads whole: it takes the last dot as the package separator, so an arm named
    ``llama.cpp:draft2`` would become package ``arm.llama``, class ``cpp:draft2``; dots in NAME become ``_``."""
    return f"{prefix}.{name.replace('.', '_')}"


def _case(suite: ET.Element, classname: str, name: str, seconds: float | None = None) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=_clean(classname, 200), name=_clean(name, 200))
    if seconds is not None:
        case.set("time", f"{seconds:.3f}")
    return case


def _warn(case: ET.Element, lines: Iterable[str], extra: str | None = None) -> bool:
    """Mark CASE as WARN (a property and ``WARN:`` lines in system-out) when LINES has any; True if so."""
    lines = list(lines)
    text = "\n".join(f"WARN: {line}" for line in lines)
    if lines:
        props = ET.SubElement(case, "properties")
        ET.SubElement(props, "property", name="warnings", value=str(len(lines)))
    if lines or extra:
        out = ET.SubElement(case, "system-out")
        out.text = _clean("\n".join(t for t in (text, extra) if t), 4000)
    return bool(lines)


def known_message(known: Any, what: str) -> str:
    """A KNOWN case's ``skipped`` message: the ledger entry (id, title, link or reproduction) and the finding."""
    k = known if isinstance(known, Mapping) else {}
    where = k.get("link") or k.get("reproduction") or "no link"
    return _clean(f"KNOWN {k.get('id')}: {k.get('title')} ({where}): {what}", 500)


def _skip_known(case: ET.Element, found: list[tuple[Any, str]]) -> bool:
    """Mark CASE skipped for its known findings FOUND ((entry, what) pairs); True if there are any."""
    if found:
        ET.SubElement(case, "skipped", message="; ".join(known_message(k, w) for k, w in found)[:1000])
    return bool(found)


def junit_xml(data: SessionView) -> str:
    """The session as a JUnit XML document (text is escaped by ElementTree)."""
    s = data.session
    root = ET.Element("testsuites", name="observatory")
    suite = ET.SubElement(root, "testsuite", name="observatory")  # stable: not the session id
    if s.started_at:
        suite.set("timestamp", s.started_at.removesuffix("Z"))  # UTC; the JUnit schema's timestamp has no zone
    if s.host:
        suite.set("hostname", _clean(s.host, 200))
    session_s = _seconds(s.started_at, s.finished_at)
    arm_s = [t for t in (_arm_seconds(a) for a in data.arms) if t is not None]
    if arm_s:  # stored to the second: a session is never shorter than the longest arm that ran in it
        session_s = max(session_s or 0.0, max(arm_s))
    if session_s is not None:
        suite.set("time", f"{session_s:.3f}")
    props = ET.SubElement(suite, "properties")
    for name, value in (("session", s.id), ("model", s.model), ("suite", s.suite), ("verdict", data.verdict.verdict)):
        if value is not None:
            ET.SubElement(props, "property", name=name, value=_clean(value, 500))
    # names come from probe files and arm names: clean them too

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for arm in data.arms:
        counts["tests"] += 1
        case = _case(suite, safe_class("arm", arm.name), "validity", _arm_seconds(arm))
        bad = [v for v in arm.validity if v.code in INVALID_CODES and not v.known]
        known_codes = [(v.known, f"{v.code}: {v.detail}") for v in arm.validity if v.known]
        if bad or (arm.status != "ok" and not known_codes):
            counts["errors"] += 1
            msg = "; ".join(f"{v.code}: {v.detail}" for v in bad) or f"{arm.status}: {arm.reason}"
            err = ET.SubElement(case, "error", message=_clean(msg, 500), type=INVALID)
            err.text = _clean((arm.log_tail or msg)[-4000:], 4000)
        elif _skip_known(case, known_codes):
            counts["skipped"] += 1
        if arm_role(arm) not in JUDGED_AGAINST_BASE:
            continue
        for r in arm.results:
            counts["tests"] += 1
            case = _case(suite, safe_class("arm", arm.name), r.probe,
                         r.duration_ms / 1000.0 if r.duration_ms is not None else None)
            verdicts = dict(r.verdicts)
            failed = {g: v for g, v in verdicts.items() if v.verdict == FAIL}
            unjudged = {g: v for g, v in verdicts.items() if v.verdict in (UNJUDGED, INVALID)}
            if not r.ok:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=_clean(r.error, 500), type="REQUEST")
            elif unjudged and not failed:
                counts["errors"] += 1
                ET.SubElement(case, "error", type=UNJUDGED, message=_clean(
                    "; ".join(f"{g}: {v.reason}" for g, v in unjudged.items()), 500))
            elif failed:
                counts["failures"] += 1
                f = ET.SubElement(case, "failure", message=_clean("; ".join(f"{g}: {v.reason}" for g, v in failed.items()), 500),
                                  type=FAIL)
                f.text = _clean(r.text, 4000)
            elif _skip_known(case, [((v.details or {}).get("known"), f"{g}: {v.reason}")
                                    for g, v in verdicts.items() if v.verdict == KNOWN]):
                counts["skipped"] += 1
            elif verdicts and all(v.verdict in (NOT_DISCRIMINATING, SKIP) for v in verdicts.values()):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="not discriminating: the base arm fails this probe too")
            _warn(case, [f"{g}: {v.reason}" for g, v in verdicts.items() if v.verdict == WARN], _clean(r.preview, 200))
        for p in arm.figures.performance or []:
            counts["tests"] += 1
            case = _case(suite, safe_class("arm", arm.name), f"performance.{p.get('check')}", _timed_seconds(arm))
            verdict, reason = p.get("verdict"), _clean(p.get("reason"), 500)
            if verdict == FAIL:
                counts["failures"] += 1
                ET.SubElement(case, "failure", type=FAIL, message=reason)
            elif verdict == SKIP:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=reason)
            elif verdict == KNOWN:
                counts["skipped"] += 1
                _skip_known(case, [(p.get("known"), f"{p.get('check')}: {reason}")])
            elif verdict == INVALID:  # figures of a lossy configuration (validity LOSSY)
                counts["errors"] += 1
                ET.SubElement(case, "error", type=INVALID, message=reason)
            _warn(case, [reason] if verdict == WARN else [], reason if verdict == PASS else None)
    for ch in data.channels:  # one testcase per field channel x arm judged against base
        for a in ch.arms:
            if a.role not in JUDGED_AGAINST_BASE and not any(
                    v.verdict in (INVALID, UNJUDGED) for v in a.verdicts.values()):
                continue
            counts["tests"] += 1
            case = _case(suite, safe_class("channel", ch.name), a.arm, a.seconds)
            bad_ch = {g: v for g, v in a.verdicts.items() if v.verdict in (FAIL, INVALID, UNJUDGED)}
            if bad_ch:
                ch_failed = any(v.verdict == FAIL for v in bad_ch.values())
                counts["failures" if ch_failed else "errors"] += 1
                ET.SubElement(case, "failure" if ch_failed else "error", type=FAIL if ch_failed else INVALID,
                              message=_clean("; ".join(f"{g}: {v.reason}" for g, v in bad_ch.items()), 500))
            elif not a.verdicts:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_clean(f"no verdict: arm {a.status}", 200))
            elif _skip_known(case, [((v.details or {}).get("known"), f"{g}: {v.reason}")
                                    for g, v in a.verdicts.items() if v.verdict == KNOWN]):
                counts["skipped"] += 1
            _warn(case, [f"{g}: {v.reason}" for g, v in a.verdicts.items() if v.verdict == WARN])
    # The session verdict itself, from the one policy (the gate's exit code says the same).
    verdict = data.verdict
    counts["tests"] += 1
    case = _case(suite, "session", "verdict", session_s)
    apart = "\n".join(g.line() for g in group_reasons(verdict.reasons, (KNOWN, NOTE)))
    if verdict.verdict in (FAIL, INVALID):
        counts["failures" if verdict.verdict == FAIL else "errors"] += 1
        el = ET.SubElement(case, "failure" if verdict.verdict == FAIL else "error", type=verdict.verdict,
                           message=_clean(f"{verdict.verdict}: {verdict.why}", 500))
        el.text = _clean("\n".join(g.line() for g in group_reasons(verdict.reasons, COUNTED_LEVELS)), 8000)
        if apart:
            ET.SubElement(case, "system-out").text = _clean(apart, 4000)
    else:
        known = known_summary(verdict)
        _warn(case, [g.text for g in group_reasons(verdict.reasons, (WARN,))],
              "\n".join(x for x in (f"{verdict.verdict}: {verdict.why}", known, apart) if x))
    for k, v in counts.items():
        suite.set(k, str(v))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def write_junit(data: SessionView, path: Path | str) -> None:
    """Write the JUnit file."""
    Path(path).write_text(junit_xml(data), encoding="utf-8")
