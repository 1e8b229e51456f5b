"""The deployed depth on the real CPU engine (issue 49 item 5): the session given the deployment's config
(--deployed-spec, k = 3) runs an arm at exactly that k, and a fault that corrupts only at k = 3 FAILs it; the
session states the depths it covered.

One session on the bundled tiny model, quick profile without the diff passes: base and the mtp3 arm the deployed
config adds, the fault in the session's environment (an engine's children inherit it; base has no spec steps to
corrupt): 2 engine starts. That the same fault hides behind an arm at k = 1 is the field_engine test's
(tests/real_engine/test_engine_channels_edges.py: 520 s at load 16-27 for the three arms, 2026-12-05).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.engine import requires_engine

pytestmark = requires_engine

K3 = json.dumps({"method": "mtp", "num_speculative_tokens": 3})


def test_a_fault_at_the_deployed_depth_fails_the_session_that_was_given_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVATORY_FAULT", "depth_only")
    out = tmp_path / "s.json"
    r = CliRunner().invoke(cli, ["gate", "--arms", "base", "--deployed-spec", K3, "--no-diffs",
                                 "--db", str(tmp_path / "d.db"), "--log-dir", str(tmp_path / "logs"), "--quiet",
                                 "--report", str(tmp_path / "report"), "--json", str(out)], catch_exceptions=False)
    assert r.exit_code == 1, r.output  # FAIL: the arm at the deployed k
    session: dict[str, Any] = json.loads(out.read_text())
    arms = {a["name"]: a for a in session["arms"]}
    assert list(arms) == ["base", "mtp3"] and arms["mtp3"]["launch"]["deployed"] is True
    fails = [g for res in arms["mtp3"]["results"] for g, v in res["verdicts"].items() if v["verdict"] == "FAIL"]
    assert any(g.startswith("token_diff") for g in fails), fails
    depths = session["depths"]
    assert depths["covered"] == [3] and depths["deployed_k"] == 3
    assert depths["deployed_arm"] == "mtp3" and depths["deployed_measured"] is True
    assert any(x["code"] == "DEPTHS" and "deployed k = 3" in x["text"] for x in session["verdict"]["reasons"])
