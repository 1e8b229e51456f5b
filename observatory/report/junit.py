"""JUnit XML for CI: one testcase per probe x spec arm, plus one per arm's validity."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from observatory.judge.verdict import INVALID_CODES, arm_role
from observatory.model.read_model import SessionView
from observatory.model.roles import JUDGED_AGAINST_BASE

# Characters XML 1.0 cannot carry at all (model output may hold any of them).
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _clean(text: Any, limit: int) -> str:
    return _XML_BAD.sub("\ufffd", str(text))[:limit]


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=_clean(classname, 200), name=_clean(name, 200), time="0")


def junit_xml(data: SessionView) -> str:
    """The session as a JUnit XML document (text is escaped by ElementTree)."""
    sid = data.session.id
    root = ET.Element("testsuites", name="observatory")
    suite = ET.SubElement(root, "testsuite", name=f"observatory.session{sid}")
    # names come from probe files and arm names: clean them too

    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for arm in data.arms:
        counts["tests"] += 1
        case = _case(suite, f"arm.{arm.name}", "validity")
        bad = [v for v in arm.validity if v.code in INVALID_CODES]
        if bad or arm.status != "ok":
            counts["errors"] += 1
            msg = "; ".join(f"{v.code}: {v.detail}" for v in bad) or f"{arm.status}: {arm.reason}"
            err = ET.SubElement(case, "error", message=_clean(msg, 500), type="INVALID")
            err.text = _clean((arm.log_tail or msg)[-4000:], 4000)
        if arm_role(arm) not in JUDGED_AGAINST_BASE:
            continue
        for r in arm.results:
            counts["tests"] += 1
            case = _case(suite, f"arm.{arm.name}", r.probe)
            verdicts = dict(r.verdicts)
            failed = {g: v for g, v in verdicts.items() if v.verdict == "FAIL"}
            unjudged = {g: v for g, v in verdicts.items() if v.verdict in ("UNJUDGED", "INVALID")}
            if not r.ok:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=_clean(r.error, 500), type="REQUEST")
            elif unjudged and not failed:
                counts["errors"] += 1
                ET.SubElement(case, "error", type="UNJUDGED", message=_clean(
                    "; ".join(f"{g}: {v.reason}" for g, v in unjudged.items()), 500))
            elif failed:
                counts["failures"] += 1
                f = ET.SubElement(case, "failure", message=_clean("; ".join(f"{g}: {v.reason}" for g, v in failed.items()), 500),
                                  type="FAIL")
                f.text = _clean(r.text, 4000)
            elif verdicts and all(v.verdict in ("NOT_DISCRIMINATING", "SKIP") for v in verdicts.values()):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message="not discriminating: the base arm fails this probe too")
            out = ET.SubElement(case, "system-out")
            out.text = _clean(r.preview, 200)
    for ch in data.channels:  # one testcase per field channel x arm judged against base
        for a in ch.arms:
            if a.role not in JUDGED_AGAINST_BASE and not any(
                    v.verdict in ("INVALID", "UNJUDGED") for v in a.verdicts.values()):
                continue
            counts["tests"] += 1
            case = _case(suite, f"channel.{ch.name}", a.arm)
            bad_ch = {g: v for g, v in a.verdicts.items() if v.verdict in ("FAIL", "INVALID", "UNJUDGED")}
            if bad_ch:
                ch_failed = any(v.verdict == "FAIL" for v in bad_ch.values())
                counts["failures" if ch_failed else "errors"] += 1
                ET.SubElement(case, "failure" if ch_failed else "error", type="FAIL" if ch_failed else "INVALID",
                              message=_clean("; ".join(f"{g}: {v.reason}" for g, v in bad_ch.items()), 500))
            elif not a.verdicts:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=_clean(f"no verdict: arm {a.status}", 200))
    # The session verdict itself, from the one policy (the gate's exit code says the same).
    verdict = data.verdict
    counts["tests"] += 1
    case = _case(suite, "session", f"verdict {verdict.verdict}")
    if verdict.verdict in ("FAIL", "INVALID"):
        counts["failures" if verdict.verdict == "FAIL" else "errors"] += 1
        el = ET.SubElement(case, "failure" if verdict.verdict == "FAIL" else "error", type=verdict.verdict,
                           message=_clean(verdict.why, 500))
        el.text = _clean("\n".join(verdict.texts()), 8000)
    for k, v in counts.items():
        suite.set(k, str(v))
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def write_junit(data: SessionView, path: Path | str) -> None:
    """Write the JUnit file."""
    Path(path).write_text(junit_xml(data), encoding="utf-8")
