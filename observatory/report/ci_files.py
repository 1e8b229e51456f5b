"""What CI reads, written on every exit (issue 50 item 3): JUnit, OpenMetrics, the session JSON, a markdown summary.

`CiFiles.checked` checks each path before anything launches (exit 3 on a bad
one). After a session, `write_session` writes every file from the read model.
A run that ends before a session could be judged (a setup error, exit 3; an
internal error, 4; a storage failure, 5) still writes what CI reads, through
`write_failure`: a JUnit file with one failing case (``session`` / ``setup``,
``internal``, ``storage`` or ``interrupted``), metrics that carry the exit code and the time
(so a dashboard shows the failed night instead of the previous night's
figures), and a summary that says what went wrong. A path that is itself the
setup error is skipped there (nothing can be written to it).

JUnit class names are made safe for Jenkins, which reads the last dot of a
class name as the package separator (`junit.safe_class`).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from observatory.model.errors import ObservatoryError
from observatory.model.read_model import SessionView
from observatory.model.redact import redact_text
from observatory.report.console import printable
from observatory.report.jsonout import to_json
from observatory.report.junit import junit_xml
from observatory.report.markdown import failure_markdown, summary_markdown
from observatory.report.openmetrics import failure_text, openmetrics_text
from observatory.report.outputs import OutputFile

# exit code -> the failing JUnit case's name and the words for it
FAILURE_CASES = {3: ("setup", "setup error"), 4: ("internal", "internal error"), 5: ("storage", "storage failure"),
                 130: ("interrupted", "interrupted")}


def failure_junit(exit_code: int, message: str) -> str:
    """A JUnit document with one failing case for a run that measured nothing."""
    name, words = FAILURE_CASES.get(exit_code, ("setup", "setup error"))
    root = ET.Element("testsuites", name="observatory")
    suite = ET.SubElement(root, "testsuite", name="observatory", tests="1", failures="1", errors="0", skipped="0",
                          timestamp=datetime.now(timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds"))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="exit_code", value=str(exit_code))
    case = ET.SubElement(suite, "testcase", classname="session", name=name)
    failure = ET.SubElement(case, "failure", type=words.upper().replace(" ", "_"), message=message[:500])
    failure.text = message[:8000]
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


@dataclass
class CiFiles:
    """The CI files of one run (each None when not asked for)."""

    junit: OutputFile | None = None
    metrics: OutputFile | None = None
    json: OutputFile | None = None
    summary: OutputFile | None = None

    @classmethod
    def checked(cls, junit: str | None = None, metrics: str | None = None, json_file: str | None = None,
                summary: str | None = None) -> CiFiles:
        """Each given path checked now (ObservatoryError, exit 3, on one that cannot be written)."""
        return cls(*(OutputFile(Path(p), opt) if p else None for p, opt in (
            (junit, "--junit"), (metrics, "--metrics-out"), (json_file, "--json"), (summary, "--summary-md"))))

    @classmethod
    def best_effort(cls, junit: str | None = None, metrics: str | None = None, json_file: str | None = None,
                    summary: str | None = None) -> CiFiles:
        """The paths that can be written (for a failure: a path that is itself the setup error is left out)."""
        out = cls()
        for attr, p, opt in (("junit", junit, "--junit"), ("metrics", metrics, "--metrics-out"),
                             ("json", json_file, "--json"), ("summary", summary, "--summary-md")):
            if p:
                try:
                    setattr(out, attr, OutputFile(Path(p), opt))
                except ObservatoryError:
                    pass
        return out

    def paths(self) -> dict[str, str]:
        """label -> path of each file asked for (for the closing block)."""
        return {k: str(f.path) for k, f in (("junit", self.junit), ("metrics", self.metrics), ("json", self.json),
                                             ("summary", self.summary)) if f is not None}

    def write_session(self, data: SessionView, exit_code: int, report: str | None = None) -> None:
        """Every file from the judged session; EXIT_CODE: the status the command ends with."""
        if self.junit is not None:
            self.junit.write_text(junit_xml(data))
        if self.metrics is not None:
            self.metrics.write_text(openmetrics_text(data, exit_code))
        if self.json is not None:
            self.json.write_text(to_json(data))
        if self.summary is not None:
            self.summary.write_text(summary_markdown(data, report, exit_code))

    def write_failure(self, exit_code: int, message: str, model: str | None) -> None:
        """The files of a run that ended with EXIT_CODE before a session was judged; never raises."""
        message = printable(redact_text(" ".join(message.split())))  # no control character (XML 1.0 has none)
        words = FAILURE_CASES.get(exit_code, ("setup", "setup error"))[1]
        # no session JSON: there is no session, and that file's readers expect show --json's shape
        for f, text in ((self.junit, failure_junit(exit_code, message)), (self.metrics, failure_text(model, exit_code)),
                        (self.summary, failure_markdown(exit_code, words, message))):
            if f is None:
                continue
            try:
                f.write_text(text)
            except OSError:
                pass  # the run's own error is what it exits with
