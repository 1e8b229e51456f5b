"""docs/ci.md's example workflows parse, run only real commands and flags, and work as written (issues 30.5, 50.3).

The GitHub workflow's `run` steps are executed as written (bash -e -o pipefail, as
Actions runs them) in a scratch directory: with no model at /models/m the gate
ends in its setup error (exit 3), and what CI then reads must be there: a JUnit
file with one failing `setup` case, OpenMetrics text with the exit code, the
step summary; the textfile-collector step hands the metrics on. The Grafana
dashboard's every query names a metric the exporter writes.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.cli_docs import unknown
from tests.support.paths import REPO

yaml = pytest.importorskip("yaml")

DOC = REPO / "docs" / "ci.md"
DASHBOARD = REPO / "docs" / "grafana" / "observatory-dashboard.json"


def _blocks() -> list[Any]:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)]


def _commands(node: Any) -> list[str]:
    """Every shell line of a workflow (GitHub `run`, GitLab `script`) that runs `observatory`."""
    out: list[str] = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("run", "script"):
                lines = v if isinstance(v, list) else [v]
                out += [" ".join(str(x).split()) for x in lines if str(x).strip().startswith("observatory ")]
            else:
                out += _commands(v)
    elif isinstance(node, list):
        for v in node:
            out += _commands(v)
    return out


def test_both_workflows_parse_and_keep_what_ci_reads() -> None:
    gh, gl = _blocks()[:2]
    # the JUnit action publishes a check run: the default token needs checks: write (and checkout contents: read)
    assert gh["permissions"] == {"contents": "read", "checks": "write"}
    steps = gh["jobs"]["gate"]["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache/restore") for u in uses)
    save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save"))
    assert save["if"] == "always()" and save["with"]["path"] == "nightly.db"
    assert any(u.startswith("mikepenz/action-junit-report") for u in uses)
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "report/" in upload["with"]["path"]
    job = gl["observatory-nightly"]
    assert job["artifacts"]["reports"]["junit"] == "junit.xml" and job["artifacts"]["when"] == "always"
    assert job["artifacts"]["reports"]["metrics"] == "observatory.prom"
    assert "report/" in job["artifacts"]["paths"]
    assert job["cache"]["paths"] == ["nightly.db"] and job["cache"]["when"] == "always"
    for wf in (gh, gl):
        (gate,) = [c for c in _commands(wf) if c.startswith("observatory gate")]
        for needed in ("--db nightly.db", "--junit junit.xml", "--report report/", "--metrics-out observatory.prom",
                       "--summary-md"):
            assert needed in gate, (needed, gate)
    assert '--summary-md "$GITHUB_STEP_SUMMARY"' in " ".join(_commands(gh))


def test_every_command_and_flag_they_run_is_real() -> None:
    commands = [c for wf in _blocks() for c in _commands(wf)]
    assert len(commands) == 2
    text = DOC.read_text()
    commands += [" ".join(line.split("#")[0].split()) for line in re.findall(r"```sh\n(.*?)```", text, re.S)[0].splitlines()]
    for c in commands:
        assert unknown(c) == [], c
        sub = shlex.split(c)[1]
        r = CliRunner().invoke(cli, [sub, "--help"])
        assert r.exit_code == 0
        for flag in (w for w in shlex.split(c) if w.startswith("--")):
            assert flag in r.output, (flag, sub)
    # the negative control: the checker catches a flag or a command that does not exist
    assert unknown("observatory gate --report r/ --no-such-flag 1") == ["--no-such-flag"]
    assert unknown("observatory nightly --db x") == ["nightly"]


def test_the_exit_codes_ci_reads_are_the_observatorys() -> None:
    """docs/ci.md names every exit status the gate can end with (it named 0-3 while 4 and 5 existed)."""
    from observatory.model.vocabulary import EXIT, INTERNAL_ERROR, SETUP_ERROR, STORAGE_ERROR

    head = DOC.read_text().split("\n\n", 2)[1]  # the paragraph that lists them
    named = {int(n) for n in re.findall(r"\b(\d)\s\(", head)}
    assert named == {*EXIT.values(), SETUP_ERROR, INTERNAL_ERROR, STORAGE_ERROR}, head
    assert "internal error" in head and "storage" in head


def _bin_dir(tmp: Path) -> Path:
    """A PATH folder whose `observatory` is this interpreter running this tree's command line."""
    d = tmp / "bin"
    d.mkdir()
    exe = d / "observatory"
    exe.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m observatory.cli \"$@\"\n")
    exe.chmod(0o755)
    return d


@pytest.mark.skipif(Path("/models/m").exists(), reason="a model at /models/m: the gate would really run")
def test_the_github_workflow_steps_run_as_written(tmp_path: Path) -> None:
    """Each `run` step but the install, as Actions runs it, in order; the gate's setup error still leaves CI its
    files: one failing `setup` JUnit case, metrics with exit code 3 and the time, the step summary."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    gh = _blocks()[0]
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "textfile").mkdir()
    summary = tmp_path / "step_summary.md"
    summary.write_text("")
    env = {**os.environ, "PATH": f"{_bin_dir(tmp_path)}{os.pathsep}{os.environ['PATH']}",
           "GITHUB_STEP_SUMMARY": str(summary), "TEXTFILE_DIR": str(tmp_path / "textfile"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    codes = {}
    for step in gh["jobs"]["gate"]["steps"]:
        if "run" not in step or "pip install" in step["run"]:
            continue
        r = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=work,
                           env=env, capture_output=True, text=True, timeout=300)
        codes[step["name"]] = r.returncode
        if step["name"] == "Gate":
            assert "does not exist" in r.stderr and "internal error" not in r.stderr, r.stderr
    assert codes == {"Gate": 3, "Hand the metrics to the node exporter's textfile collector": 0}, codes
    junit = (work / "junit.xml").read_text()
    assert 'classname="session" name="setup"' in junit and "<failure" in junit and "/models/m" in junit
    metrics = (tmp_path / "textfile" / "observatory.prom").read_text()
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    (code,) = families["observatory_exit_code"].samples
    assert code.value == 3 and code.labels == {"model": "m"}
    assert "observatory_speedup" not in families and "observatory_last_run_timestamp_seconds" in families
    assert "setup error (exit 3)" in summary.read_text()


def dashboard_metrics(dashboard: Any) -> set[str]:
    """Every metric name the dashboard's queries (panel targets, template variables) read."""
    exprs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("expr", "definition") and isinstance(v, str):
                    exprs.append(v)
                elif k == "query" and isinstance(v, str) and dashboard is not None:
                    exprs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(dashboard)
    return {m for e in exprs for m in re.findall(r"\b(observatory_[a-z_]+)\b", e)}


def test_the_grafana_dashboard_reads_only_what_the_exporter_writes(tmp_path: Path) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    from observatory.report.data import build
    from observatory.report.openmetrics import METRIC_NAMES, failure_text, openmetrics_text
    from observatory.store.session_store import Store
    from tests.support.paths import example_db

    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["panels"] and all(p.get("targets") for p in dashboard["panels"])
    used = dashboard_metrics(dashboard)
    assert used and used <= set(METRIC_NAMES), used - set(METRIC_NAMES)
    # what a real stored session and a setup error write (the families prometheus' parser finds)
    data = build(Store(str(example_db("h200-nightly/nightly-tiny.db", tmp_path / "n.db")), create=False))
    written = {f.name for text in (openmetrics_text(data), failure_text(None, 3))
               for f in text_string_to_metric_families(text) if f.samples}
    assert used <= written, used - written
    assert set(METRIC_NAMES) >= written
    # the negative control: a query naming a metric nobody writes is caught
    assert dashboard_metrics({"panels": [{"targets": [{"expr": "rate(observatory_nope[5m])"}]}]}) == {"observatory_nope"}
