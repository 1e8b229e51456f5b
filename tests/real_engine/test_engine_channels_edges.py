"""Issue 49's channels and the deployed depth on the real CPU engine: prefix_cache catches spec_cache_miss, prompt_embeds catches
embeds_drafts, each naming itself; the clean spec arm (with the embeddings repair) is clean, its one block
recomputed by design a NOTE; base is clean. The shipped MTP arm's engine dies at the first prompt_embeds request
(docs/engines.md): prompt_embeds:engine FAILs it, and the arm itself runs to its end.

One session on the bundled tiny model (one engine per arm, a second one per arm for prompt_embeds): base,
mtp1 as shipped, mtp1 repaired, and the repaired arm with each fault. Marked field_engine (not in the default
run): about as long as the other field channels' engine tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine
from tests.support.sessions import verdict_exit

pytestmark = [pytest.mark.field_engine, requires_engine]

CHANNELS = ("prefix_cache", "input_paths", "prompt_embeds")
CLEAN = "mtp1+repair=embeds_backup"


def _verdicts(db: Path) -> dict[str, dict[str, str]]:
    """Arm name -> gate -> the worst verdict of that gate on the arm (FAIL worst)."""
    order = ["PASS", "SKIP", "NOTE", "WARN", "UNJUDGED", "INVALID", "FAIL"]
    out: dict[str, dict[str, str]] = {}
    with Store(str(db)) as store:
        sid = store.session().id
        for arm in store.arms(sid):
            got = out.setdefault(arm.name, {"status": arm.status})
            for v in store.verdicts(arm.id):
                now = got.get(v.gate)
                if now is None or order.index(v.verdict) > order.index(now):
                    got[v.gate] = v.verdict
    return out


def test_each_edge_channel_catches_its_fault_and_the_clean_arm_is_clean(tmp_path: Path) -> None:
    db = tmp_path / "edges.db"
    arms = ",".join(["base", "mtp1", CLEAN, f"{CLEAN}+fault=spec_cache_miss", f"{CLEAN}+fault=embeds_drafts"])
    r = CliRunner().invoke(cli, ["compare", "--arms", arms, "--channels", ",".join(CHANNELS), "--no-diffs",
                                 "--db", str(db), "--log-dir", str(tmp_path / "logs"), "--quiet"],
                           catch_exceptions=False)
    # the two fault arms FAIL their channels, so compare exits 1 (issue 46 item 4); the shipped arm's engine death is
    # a built-in ledger entry (KNOWN), never counted
    assert r.exit_code == verdict_exit(db) == 1, r.output
    v = _verdicts(db)
    assert all(v["base"][c] == "PASS" for c in CHANNELS), v["base"]
    clean = v[CLEAN]
    assert clean["prefix_cache"] == "NOTE" and clean["input_paths"] == "PASS", clean
    assert clean["prompt_embeds"] == "PASS" and clean["prompt_embeds:engine"] == "PASS", clean
    assert v[f"{CLEAN}+fault=spec_cache_miss"]["prefix_cache"] == "FAIL"
    assert v[f"{CLEAN}+fault=spec_cache_miss"]["prompt_embeds"] == "PASS"
    assert v[f"{CLEAN}+fault=embeds_drafts"]["prompt_embeds"] == "FAIL"
    assert v[f"{CLEAN}+fault=embeds_drafts"]["input_paths"] == "PASS"  # text and ids untouched
    shipped = v["mtp1"]
    assert shipped["prompt_embeds:engine"] == "FAIL" and shipped["status"] == "ok", shipped


def test_a_fault_at_one_depth_hides_at_k1_and_fails_the_deployed_arm(tmp_path: Path) -> None:
    """depth_only injected into mtp1 (clean there: k = 1) and, through --deployed-spec k = 3, into the mtp3 arm the
    session adds like mtp1 (FAIL). 520 s at load 16-27 (2026-12-05)."""
    import json

    out = tmp_path / "s.json"
    k3 = json.dumps({"method": "mtp", "num_speculative_tokens": 3})
    r = CliRunner().invoke(cli, ["gate", "--arms", "base,mtp1+fault=depth_only", "--deployed-spec", k3, "--no-diffs",
                                 "--db", str(tmp_path / "d.db"), "--log-dir", str(tmp_path / "logs"), "--quiet",
                                 "--report", str(tmp_path / "report"), "--json", str(out)], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    arms = {a["name"]: a for a in json.loads(out.read_text())["arms"]}
    assert list(arms) == ["base", "mtp1+fault=depth_only", "mtp3+fault=depth_only"]
    fails = {a: [g for res in arms[a]["results"] for g, v in res["verdicts"].items() if v["verdict"] == "FAIL"]
             for a in arms}
    assert not fails["mtp1+fault=depth_only"], fails  # k = 1: the fault hides
    assert any(g.startswith("token_diff") for g in fails["mtp3+fault=depth_only"]), fails
