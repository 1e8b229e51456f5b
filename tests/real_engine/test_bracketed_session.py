"""`--timing bracketed` on the real CPU engine (issue 46 item 3): base kept up, each spec repeat between two of
base's blocks, the drift and the drift-corrected interval stored.

The arithmetic on rows whose truth is known and the plan's choice of design are judge/test_bracketed_timing.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
from click.testing import CliRunner

from observatory.cli import cli
from observatory.model.vocabulary import BRACKET_BASE
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.paths import FIXTURES
from tests.support.sessions import passed_but_for_speed

SUITE = FIXTURES / "channel_tiny.toml"


@requires_engine
def test_bracketed_session_on_the_cpu_engine(tmp_path: Path) -> None:
    """base kept up beside mtp1; each of mtp1's repeats between two of base's blocks; the drift stored."""
    db = tmp_path / "runs.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "base,mtp1", "--suite", str(SUITE), "--repeat", "2",
                                 "--no-diffs", "--db", str(db), "--log-dir", str(tmp_path / "logs"),
                                 "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert passed_but_for_speed(r.exit_code, db), r.output
    data = json.loads(CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False).output)
    base, mtp1 = data["arms"]
    assert base["status"] == mtp1["status"] == "ok"
    assert mtp1["launch"]["timing"] == "bracketed by base"
    vb = mtp1["vs_base"]
    assert vb["design"] == "bracketed" and vb["pairs"] >= 1 and vb["drift"] is not None
    assert vb["ci"] is not None and vb["ci"][0] <= vb["S"] <= vb["ci"][1]
    with Store(str(db)) as store:
        arm = {a.name: a for a in store.arms(store.session().id)}
        around = store.results(arm["mtp1"].id, BRACKET_BASE)
        timed = [x for x in store.results(arm["mtp1"].id, "timed") if x.concurrency == 1]
    assert sorted({x.repeat for x in around}) == [0, 1, 2] and len(around) == 3 * len(timed) // 2
    assert {x.text for x in around} == {x.text for x in timed}  # base's greedy answers equal mtp1's
    for pid in (base["launch"].get("pid"), mtp1["launch"].get("pid")):
        assert pid is None or not psutil.pid_exists(pid), "an engine outlived the session"
