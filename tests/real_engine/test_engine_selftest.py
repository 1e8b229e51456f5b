"""`observatory selftest` on the real engine and the default model: 3 of 3 faults caught, the A/A and the
clean spec controls clean (issue 7)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from observatory.cli import cli
from observatory.report.data import build
from observatory.session.fault_selftest import FAULTS, selftest_findings
from observatory.store.session_store import Store
from tests.support.engine import requires_engine

pytestmark = requires_engine


def test_selftest_catches_every_fault(tmp_path: Path) -> None:
    db = tmp_path / "selftest.db"
    r = CliRunner().invoke(cli, ["selftest", "--db", str(db), "--log-dir", str(tmp_path / "logs"), "--no-diffs",
                                 "--quiet"], catch_exceptions=False)
    with Store(str(db)) as store:
        findings = selftest_findings(build(store))
    assert r.exit_code == 0, (r.output, findings)
    assert set(findings["faults"]) == set(FAULTS)
    for fault, f in findings["faults"].items():
        assert f["status"] == "ok" and f["drafts"] > 0, (fault, f)
        assert f["caught_by"], fault
    # the token diff against base catches every one of them
    assert all("token_diff" in f["caught_by"] for f in findings["faults"].values())
    assert findings["aa"]["clean"]
    # the clean spec arm passes, and its rejected drafts are what accept_all had to change
    assert findings["clean"]["clean"] and findings["clean"]["rejected"] > 0, findings["clean"]
    for fault in FAULTS:
        assert fault in r.output
    assert "MISSED" not in r.output
