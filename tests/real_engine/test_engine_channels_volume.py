"""The volume replay and the speculates proof on the real CPU engine (issue 48 items 2-3, issue 49 item 10).

- `test_one_spec_arm_replays_at_volume`: one speculating engine of the bundled tiny model (fp32), 150
  requests: every answer carries its own counters, they sum exactly to /metrics, every answer is
  teacher-forced and the target's choice, every class drafts. One engine: 85 s on the 2-core host at load
  about 14 (2026-12-05).
- `test_volume_faults_are_caught_with_clean_controls` (field_engine): the selftest of the three faults on
  the field model at the nightly's 2,000 requests per arm, the A/A copy and the clean (repaired) spec arm
  clean, the shipped arm's FAILs the float-expand bug's (docs/channels.md, "The volume replay on the CPU
  engine": 26 min 27 s on 2 shared cores at load 15-24, with --no-diffs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine

pytestmark = requires_engine


def test_one_spec_arm_replays_at_volume(tmp_path: Path) -> None:
    """Clean control on a real engine: identity exact, no corrupted answer, the power stated, every class drafts."""
    db = tmp_path / "v.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "mtp1+repair=cpu_expand", "--channels", "volume,speculates", "--volume", "150",
                                 "--no-diffs", "--db", str(db), "--log-dir", str(tmp_path / "logs"), "--quiet"],
                           catch_exceptions=False)
    assert r.exit_code in (0, 2), r.output  # no base arm: the session cannot be PASS, nothing may FAIL
    with Store(str(db)) as store:
        sid = store.session().id
        arm = store.arms(sid)[0]
        got = {v.gate: v for v in store.verdicts(arm.id)}
        sent = [x for x in store.results(arm.id, "volume") if x.repeat >= 0]
        assert len(sent) == 150 and all(x.ok for x in sent)
        assert all(x.request_counters and x.request_counters["drafts"] is not None for x in sent)
        assert any(x.repeat < 0 for x in store.results(arm.id, "volume"))  # the forced rows
        assert "--per-request-spec-decode-metrics" in arm.launch["argv"]
    assert got["volume:identity"].verdict == "PASS", got["volume:identity"].reason
    assert got["volume"].verdict == "PASS", got["volume"].reason
    assert got["volume"].reason.startswith("150 requests, 0 corrupted; a corruption in at least 1.98%")
    assert got["volume:acceptance"].verdict in ("PASS", "WARN"), got["volume:acceptance"].reason
    assert got["speculates:classes"].verdict == "PASS", got["speculates:classes"].reason


@pytest.mark.field_engine
def test_volume_faults_are_caught_with_clean_controls(tmp_path: Path) -> None:
    """Negative controls: mixed_typo (volume), tools_bad_drafts (volume:acceptance), sampled_no_drafts
    (speculates:classes), each FAILed by its check; the A/A copy and the clean spec arm clean."""
    r = CliRunner().invoke(cli, ["selftest", "--profile", "nightly", "--channels", "volume,speculates", "--faults",
                                 "mixed_typo,tools_bad_drafts,sampled_no_drafts", "--volume", "2000", "--no-diffs", "--db",
                                 str(tmp_path / "st.db"), "--log-dir", str(tmp_path / "logs")],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    for fault in ("mixed_typo", "tools_bad_drafts", "sampled_no_drafts"):
        line = next(x for x in r.output.splitlines() if x.startswith(f"│ {fault}"))
        assert "CAUGHT" in line, line
