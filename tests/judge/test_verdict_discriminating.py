"""Which verdicts make a probe discriminating is read from gate metadata, not gate names (issue 14 item 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from observatory.judge.verdict import decide, discriminates
from observatory.model.gates import default_registry
from observatory.model.read_model import ArmView, SessionFacts
from tests.support.views import facts, hand_arm, hand_result

USER_GATE = '''
from observatory.model.gates import PASS, GateResult, gate


@gate("token_diff_strict", "A user correctness gate whose name only looks like a token diff.",
      kind="result", correctness=True)
def strict(output, probe):
    return GateResult(PASS, "ok")


@gate("timing_note", "A diagnostic user gate.", kind="result")
def note(output, probe):
    return GateResult(PASS, "ok")
'''

NO_PROBE = "no probe discriminates"


def _session(gates_dir: Path, verdicts: dict[str, str]) -> tuple[SessionFacts, list[ArmView]]:
    def arm(name: str, role: str) -> ArmView:
        return hand_arm(name, role, (hand_result("p", verdicts),))

    return (facts(options={"plan": {"gates_dirs": [str(gates_dir)]}}),
            [arm("base", "base"), arm("mtp1", "spec")])


@pytest.fixture
def gates_dir(tmp_path: Path) -> Path:
    d = tmp_path / "gates"
    d.mkdir()
    (d / "user.py").write_text(USER_GATE)
    return d


@pytest.mark.parametrize(
    ("verdicts", "warned"),
    [({"token_diff": "PASS", "token_diff_strict": "PASS"}, False),
     ({"token_diff": "PASS", "timing_note": "PASS"}, True),
     ({"token_diff": "PASS", "token_diff:nonstream": "PASS", "token_diff:c4": "PASS"}, True),
     ({"token_diff": "PASS", "special_tokens": "PASS"}, False),
     ({"token_diff": "PASS", "gone_gate": "PASS"}, True)],
    ids=["user-correctness-gate", "user-diagnostic-gate", "token-diff-channels", "builtin-pair-gate",
         "unknown-gate"],
)
def test_discriminating_is_decided_by_gate_metadata(gates_dir: Path, verdicts: dict[str, str], warned: bool) -> None:
    """Issue 14 item 9: a user result gate with correctness=True counts as discriminating whatever its name
    (the old rule dropped names starting with "token_diff"); a diagnostic gate, the sequence gates and their
    channels, and a gate no longer registered do not (the old rule counted any name without a colon)."""
    v = decide(*_session(gates_dir, verdicts))
    assert any(NO_PROBE in r.text for r in v.reasons) is warned


def test_builtin_metadata_rule() -> None:
    counts = discriminates(default_registry())
    assert [g for g in ("content", "degeneracy", "expect", "tool_calls", "special_tokens") if counts(g)] == \
        ["content", "degeneracy", "expect", "tool_calls", "special_tokens"]
    assert not any(counts(g) for g in ("token_diff", "token_diff:batch", "token_diff:c16", "answers"))
