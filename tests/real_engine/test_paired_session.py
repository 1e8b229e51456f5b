"""`--timing paired` on the real CPU engine (issue 29 item 2): base kept up, the spec arm's single-stream requests
alternated with base's, the pairs stored, S paired, and base stopped at the end.

The arithmetic on rows whose true S is known and the plan's refusals are judge/test_paired_timing.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
from click.testing import CliRunner

from observatory.cli import cli
from observatory.model.vocabulary import PAIRED_BASE
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES
from tests.support.sessions import passed_but_for_speed

SUITE = FIXTURES / "channel_tiny.toml"


@requires_engine
def test_paired_session_on_the_cpu_engine(tmp_path: Path) -> None:
    """base kept up beside mtp1; every mtp1 single-stream request has base's beside it; base stopped after."""
    db = tmp_path / "runs.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "base,mtp1", "--timing", "paired", "--suite", str(SUITE),
                                 "--repeat", "3", "--no-diffs", "--db", str(db), "--log-dir", str(tmp_path / "logs"),
                                 "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert passed_but_for_speed(r.exit_code, db), r.output
    data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False).output)
    base, mtp1 = data["arms"]
    assert base["status"] == mtp1["status"] == "ok"
    assert base["launch"]["timing"] == "alone" and mtp1["launch"]["timing"] == "paired with base"
    vb = mtp1["vs_base"]
    # a timed request of mtp1 still warming up is left out of its pairs (observatory.judge.steady_state): at
    # most half of the 3 (else no steady state, nothing left out), and the pairs are the rest
    warm = (mtp1.get("steady_state") or {}).get("excluded") or []
    assert len(warm) <= 1 and all(e["probe_id"] is not None for e in warm)
    assert vb["design"] == "paired" and vb["pairs"] == 3 - len(warm) and vb["incomplete_pairs"] == 0
    assert vb["S"] is not None and vb["ci"] is not None and vb["ci"][0] <= vb["S"] <= vb["ci"][1]
    assert vb["unpaired"]["S"] is not None  # the sequential S, kept beside it
    with Store(str(db)) as store:
        arm = {a.name: a for a in store.arms(store.session().id)}
        paired_base, timed = (store.results(arm["mtp1"].id, mode) for mode in (PAIRED_BASE, "timed"))
        assert store.results(arm["base"].id, PAIRED_BASE) == []  # stored on the arm they were timed beside
    assert len(paired_base) == len(timed) == 3 and all(x.ok for x in [*paired_base, *timed])
    # base's answers timed beside mtp1 are base's greedy output: the same as mtp1's
    assert {x.text for x in paired_base} == {x.text for x in timed}
    assert "(paired, 95% CI" in r.output  # the closing headline says how S was timed
    for pid in (base["launch"].get("pid"), mtp1["launch"].get("pid")):
        assert pid is None or not psutil.pid_exists(pid), "an engine outlived the session"
