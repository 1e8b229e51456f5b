"""The deployed depth on the real CPU engine (issue 49 item 5): a fault that corrupts only at k = 3 hides behind
arms at k = 1, and the session given the deployment's config (--deployed-spec, k = 3) runs an arm at exactly
that k, launched like the spec arm it has, and FAILs it; the session states the depths it covered.

One session on the bundled tiny model, quick profile without the diff passes: base, mtp1 with the fault, and the
mtp3 arm the deployed config adds (3 engine starts).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import requires_engine

from observatory.cli import cli

pytestmark = [pytest.mark.engine, requires_engine]

K3 = json.dumps({"method": "mtp", "num_speculative_tokens": 3})


def test_a_fault_at_the_deployed_depth_fails_the_session_that_was_given_it(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    r = CliRunner().invoke(cli, ["gate", "--arms", "base,mtp1+fault=depth_only", "--deployed-spec", K3, "--no-diffs",
                                 "--db", str(tmp_path / "d.db"), "--log-dir", str(tmp_path / "logs"), "--quiet",
                                 "--report", str(tmp_path / "report"), "--json", str(out)], catch_exceptions=False)
    assert r.exit_code == 1, r.output  # FAIL: the arm at the deployed k
    session: dict[str, Any] = json.loads(out.read_text())
    arms = {a["name"]: a for a in session["arms"]}
    assert list(arms) == ["base", "mtp1+fault=depth_only", "mtp3+fault=depth_only"]
    assert arms["mtp3+fault=depth_only"]["launch"]["deployed"] is True
    fails = {a: [g for res in arms[a]["results"] for g, v in res["verdicts"].items() if v["verdict"] == "FAIL"]
             for a in arms}
    assert not fails["mtp1+fault=depth_only"], fails  # k = 1: the fault hides
    assert any(g.startswith("token_diff") for g in fails["mtp3+fault=depth_only"]), fails
    depths = session["depths"]
    assert depths["covered"] == [1, 3] and depths["deployed_k"] == 3
    assert depths["deployed_arm"] == "mtp3+fault=depth_only" and depths["deployed_measured"] is True
    assert any(x["code"] == "DEPTHS" and "deployed k = 3" in x["text"] for x in session["verdict"]["reasons"])
