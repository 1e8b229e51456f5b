"""Channel history (issue 15 item 9): acceptance and speed against the earlier nights of the same arm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from semantics_store import result, session

from observatory.channels import history
from observatory.channels.view import ChannelView
from observatory.judge.perf_gates import parse_fail_on
from observatory.judge.summaries import suite_hash
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.model.roles import stored_roles
from observatory.store.db import SummaryRow
from observatory.store.session_store import Store

SUITE = [Probe("prose", "prose_en", messages=[{"role": "user", "content": "Write"}], gates=["content", "degeneracy"])]
HEALTHY = "The ocean covers most of the planet and holds a great variety of life, from plankton to whales."
LOOPING = "the sea the sea the sea the sea the sea the sea the sea the sea the sea the sea the sea the sea"


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A fresh database."""
    return Store(str(tmp_path / "runs.db"))


def _counters(alpha: float, drafts: int = 100, k: int = 2) -> dict[str, Any]:
    acc = round(alpha * drafts * k)
    return {"drafts": drafts, "draft_tokens": drafts * k, "accepted": acc, "accepted_per_pos": [acc - acc // 2, acc // 2]}


def _night(store: Store, day: int, alpha: float, text: str = HEALTHY, version: str = "0.1") -> None:
    """An earlier session, judged: its stream results and its stored summaries."""
    sid, arms, pids = session(store, SUITE, ["base", "mtp2"], day=day, version=version)
    sh = suite_hash(p.content_hash for p in SUITE)
    for pos, (name, arm) in enumerate(arms.items()):
        result(store, arm, pids["prose"], "stream", [1, 2], ["a", "b"], text=text)
        spec = name == "mtp2"
        store.add(SummaryRow(session_id=sid, arm_id=arm.id, position=pos, arm=name, model="m", engine_version=version,
                             suite_hash=sh, status="ok", validity=[], trusted=True,
                             alpha=alpha if spec else None, tau=1 + 2 * alpha if spec else None, S=None,
                             verdicts={}, failing=[], session_verdict="PASS", verdict_status="complete"))


def _tonight(store: Store, alpha: float, text: str = HEALTHY, fail_on: str | None = None) -> dict[str, Any]:
    options = {"channels": ["history"], "fail_on": parse_fail_on(fail_on)}
    sid, arms, pids = session(store, SUITE, ["base", "mtp2"], options=options, day=30)
    result(store, arms["base"], pids["prose"], "stream", [1, 2], ["a", "b"], text=text, counters_delta=_counters(0))
    result(store, arms["mtp2"], pids["prose"], "stream", [1, 2], ["a", "b"], text=text,
           counters_delta=_counters(alpha))
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "history", all_arms, stored_roles([(a.name, a.launch) for a in all_arms]), {},
                       default_registry())
    rows = history.judge(view)
    assert len(rows) == 1 and rows[0].arm_id == arms["mtp2"].id  # spec arms only
    return {"verdict": rows[0].verdict, "reason": rows[0].reason, "table": rows[0].details.get("table", [])}


def _nights(store: Store, alphas: list[float], **kw: Any) -> None:
    for day, a in enumerate(alphas):
        _night(store, day, a, **kw)


def test_fewer_than_three_nights_is_not_measurable(store: Store) -> None:
    """Issue 15 item 9: with 2 earlier sessions the verdict says so, not a pass or a fail."""
    _nights(store, [0.6, 0.61])
    got = _tonight(store, 0.3)
    assert got["verdict"] == "SKIP" and got["reason"].startswith("not measurable: 2 earlier sessions")


def test_an_acceptance_drop_beyond_the_nights_noise_warns(store: Store) -> None:
    """Issue 15 item 9 (fault: drafts replaced by noise, acceptance collapses): WARN by default."""
    _nights(store, [0.60, 0.62, 0.61, 0.59])
    got = _tonight(store, 0.20)
    assert got["verdict"] == "WARN" and "drop" in got["reason"]


def test_a_drop_fails_with_a_threshold(store: Store) -> None:
    """Issue 15 item 9: --fail-on 'history_drop>0.3' makes a drop larger than 30% a FAIL."""
    _nights(store, [0.60, 0.62, 0.61, 0.59])
    got = _tonight(store, 0.20, fail_on="history_drop>0.3")
    assert got["verdict"] == "FAIL" and "history_drop" in got["reason"]


def test_a_move_within_the_nights_noise_passes(store: Store) -> None:
    """Issue 15 item 9, clean control: tonight within the spread of noisy nights passes."""
    _nights(store, [0.50, 0.62, 0.55, 0.66])
    got = _tonight(store, 0.52, fail_on="history_drop>0.01")
    assert got["verdict"] == "PASS"


def test_other_engine_versions_are_not_history(store: Store) -> None:
    """Issue 15 item 9: only earlier sessions with the same engine version count."""
    _nights(store, [0.60, 0.62, 0.61, 0.59], version="0.0")
    got = _tonight(store, 0.20)
    assert got["verdict"] == "SKIP" and "0 earlier sessions" in got["reason"]


def test_an_acceptance_jump_with_repetitive_output_warns(store: Store) -> None:
    """Issue 15 item 9: acceptance up while the output degenerates is flagged."""
    _nights(store, [0.40, 0.42, 0.41])
    got = _tonight(store, 0.90, text=LOOPING)
    assert got["verdict"] == "WARN" and "repetitive" in got["reason"]


def test_an_acceptance_jump_with_healthy_output_passes(store: Store) -> None:
    """Issue 15 item 9, clean control: better acceptance with healthy output is not flagged."""
    _nights(store, [0.40, 0.42, 0.41])
    got = _tonight(store, 0.90)
    assert got["verdict"] == "PASS"
    assert any(r["figure"] == "degeneracy" and r["result"] == "within noise" for r in got["table"])


def test_history_drop_is_a_known_threshold() -> None:
    """--fail-on accepts history_drop> (and only with >)."""
    assert parse_fail_on("history_drop>0.2") == {"history_drop": 0.2}
    with pytest.raises(Exception, match="history_drop>"):
        parse_fail_on("history_drop<0.2")
