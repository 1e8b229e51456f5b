"""The state channels on the real CPU engine (issue 15 items 2-4 and 12): each catches its own fault, names
itself, and the suite alone (the quick profile's gates) misses it; the clean spec arm stays clean.

One session (one engine per arm): base, a clean mtp2, and mtp2 with each of the three faults, every arm
running the three channels. Took 33 minutes on 2 shared CPU cores (load 12-18; engine start-up
2-7.5 minutes per arm).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.store.session_store import Store
from tests.support.engine import requires_engine

pytestmark = [pytest.mark.field_engine, requires_engine]

CHANNELS = ("soak", "length_sweep", "mixed_batch")
FAULT_OF = {"soak": "soak_poison", "length_sweep": "length_poison", "mixed_batch": "batch_swap"}


def _verdicts(db: Path) -> dict[str, dict[str, str]]:
    """Arm name -> gate -> the worst verdict of that gate on the arm."""
    order = ["PASS", "SKIP", "NOT_DISCRIMINATING", "KNOWN", "WARN", "UNJUDGED", "INVALID", "FAIL"]
    out: dict[str, dict[str, str]] = {}
    with Store(str(db)) as store:
        sid = store.session().id
        for arm in store.arms(sid):
            got = out.setdefault(arm.name, {})
            for v in store.verdicts(arm.id):
                now = got.get(v.gate)
                if now is None or order.index(v.verdict) > order.index(now):
                    got[v.gate] = v.verdict
    return out


def test_each_state_channel_catches_its_fault_and_the_suite_does_not(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    arms = ",".join(["base", "mtp2", *(f"mtp2+fault={f}" for f in FAULT_OF.values())])
    r = CliRunner().invoke(cli, ["gate", "--arms", arms, "--channels", ",".join(CHANNELS), "--db", str(db),
                                 "--log-dir", str(tmp_path / "logs"), "--json", str(tmp_path / "s.json"),
                                 "--quiet"], catch_exceptions=False)
    assert r.exit_code == 1, r.output  # the fault arms FAIL
    verdicts = _verdicts(db)
    session: dict[str, Any] = json.loads((tmp_path / "s.json").read_text())
    assert session
    clean = verdicts["mtp2"]
    for ch in CHANNELS:
        assert clean[ch] in ("PASS", "WARN"), (ch, clean)  # the clean control
        assert verdicts["base"][ch] == "PASS", (ch, verdicts["base"])
    for ch, fault in FAULT_OF.items():
        got = verdicts[f"mtp2+fault={fault}"]
        assert got[ch] == "FAIL", (fault, got)  # caught by its channel, which names itself
        # The quick profile's correctness gates miss it. Timed diffs (token_diff:cN) are left out: in a
        # nightly session the timed pass runs after the channels, so for soak_poison it is the prompt's
        # 7th serving or later (in a quick session it is the 5th at most: clean).
        suite_gates = {g: v for g, v in got.items() if g.split(":")[0] not in CHANNELS
                       and not g.startswith("token_diff:c")}
        assert "FAIL" not in suite_gates.values(), (fault, suite_gates)
