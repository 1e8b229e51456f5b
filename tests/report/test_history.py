"""History across sessions (issue 6, part 3): figures per session and arm, and regression alerts.

Sessions are real judged sessions made by `make_session` (tests/support/judged_sessions.py):
acceptance comes from the stored counter deltas, S from the stored timings.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.model.read_model import ValidityFlag
from observatory.report.data import build
from observatory.report.trends import Alert, find_alerts, load_points, render_history, session_points
from observatory.store.session_store import Store
from tests.support.judged_sessions import HOSTILE, HOSTILE_ESCAPED, PROBES, make_session, report_cli


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A fresh database (the one OBSERVATORY_DB points at)."""
    return Store(str(tmp_path / "test.db"))


def _alerts(store: Store, **kw: object) -> list[Alert]:
    return find_alerts(load_points(store, **kw))  # type: ignore[arg-type]


def _figures(alerts: list[Alert], arm: str) -> set[str]:
    return {a.figure for a in alerts if a.arm == arm}


def test_points_carry_acceptance_speedup_and_verdicts(store: Store) -> None:
    make_session(store)
    points = load_points(store)
    assert [p.arm for p in points] == ["base", "base#2", "mtp1", "mtp2"]
    mtp1 = points[2]
    assert mtp1.alpha == pytest.approx(0.7) and mtp1.tau == pytest.approx(1.7)
    assert mtp1.S == pytest.approx(62.4 / 47.3, rel=0.01) and mtp1.S_ci is not None
    assert mtp1.spread == pytest.approx(0.02, abs=0.005)
    assert points[3].verdicts == {"FAIL": 1, "PASS": 3} and points[3].failing == ["count"]
    # its near-tie divergence is within the A/A copy's rate (observatory.judge.rates): a NOTE, not a WARN
    assert mtp1.verdicts == {"PASS": 3, "NOTE": 1}
    assert points[0].notes == [] and mtp1.trusted


def test_acceptance_within_tolerance_raises_nothing(store: Store) -> None:
    make_session(store, accept=0.70)
    make_session(store, accept=0.69)  # alpha -1.4%, tau -0.6%: inside 5%
    assert _alerts(store) == []


def test_acceptance_drop_beyond_tolerance_is_a_regression(store: Store) -> None:
    make_session(store, accept=0.70)
    make_session(store, accept=0.69)
    make_session(store, accept=0.55)
    alerts = _alerts(store)
    assert _figures(alerts, "mtp1") == {"alpha", "tau"}
    alpha = next(a for a in alerts if a.arm == "mtp1" and a.figure == "alpha")
    assert alpha.session == 3 and alpha.previous == 2 and alpha.regression
    # counters are integers: round(60 * 0.69) = 41 accepted
    assert alpha.before == pytest.approx(41 / 60) and alpha.after == pytest.approx(33 / 60)
    assert "alpha dropped 19.51% (0.683 -> 0.550) since session 2" in alpha.message
    assert "beyond the 5.00% tolerance" in alpha.message
    assert find_alerts(load_points(store), acceptance_tolerance=0.5) == []


def test_speedup_moves_are_judged_against_the_aa_noise_floor(store: Store) -> None:
    make_session(store, spec_rate=70.0, spread=0.02)
    make_session(store, spec_rate=50.0, spread=0.02)  # S 1.32 -> 1.0: far beyond a 2% spread
    alerts = [a for a in _alerts(store) if a.figure == "S"]
    assert {a.arm for a in alerts} == {"mtp1", "mtp2"} and all(a.regression for a in alerts)
    assert "A/A throughput spread" in alerts[0].message


def test_speedup_within_a_wide_noise_floor_is_not_an_alert(store: Store) -> None:
    make_session(store, spec_rate=70.0, spread=0.5)
    make_session(store, spec_rate=60.0, spread=0.5)
    assert [a for a in _alerts(store) if a.figure == "S"] == []


def test_without_an_aa_control_speed_is_not_judged(store: Store) -> None:
    make_session(store, arms=("base", "mtp1"), spec_rate=70.0)
    make_session(store, arms=("base", "mtp1"), spec_rate=40.0)
    points = load_points(store)
    assert [a for a in find_alerts(points) if a.figure == "S"] == []
    assert "speedup not judged: no A/A control" in points[-1].notes[0]


def test_a_changed_suite_is_not_compared(store: Store) -> None:
    make_session(store, accept=0.7)
    make_session(store, accept=0.3, probes=PROBES[:3])
    points = load_points(store, arm="mtp1")
    assert find_alerts(points) == []
    assert points[1].notes == ["suite changed since session 1: not compared"]


def test_a_newly_failing_probe_is_a_regression_and_a_fixed_one_is_reported(store: Store) -> None:
    make_session(store, divergences={})
    make_session(store)  # mtp2 now diverges on count
    make_session(store, divergences={})
    alerts = [a for a in _alerts(store, arm="mtp2") if a.figure == "verdicts"]
    assert [(a.session, a.regression) for a in alerts] == [(2, True), (3, False)]
    assert "newly FAILs count" in alerts[0].message


def test_untrusted_arms_are_neither_judged_nor_a_baseline(store: Store) -> None:
    first = build(store, make_session(store, accept=0.7))
    arms = [replace(a, figures=replace(a.figures, acceptance={**a.figures.acceptance, "alpha": 0.1}))
            if a.figures.acceptance else a for a in first.arms]
    arms[2] = replace(arms[2], status="crashed", validity=(ValidityFlag("CRASHED", "exit 1"),))
    crashed = replace(first, session=replace(first.session, id=2), arms=tuple(arms))
    third = build(store, make_session(store, accept=0.7))
    points = [p for d in (first, crashed, third) for p in session_points(d, "mtp1")]
    assert find_alerts(points) == []
    assert points[1].notes == ["not compared: crashed CRASHED"]


def test_models_and_arms_filter(store: Store) -> None:
    make_session(store, model="/models/Qwen3-27B")
    make_session(store, model="/models/other")
    assert {p.session for p in load_points(store, model="qwen3")} == {1}
    assert {p.arm for p in load_points(store, arm="mtp2")} == {"mtp2"}


def test_history_command_json(store: Store, tmp_path: Path) -> None:
    make_session(store, accept=0.7)
    make_session(store, accept=0.5)
    result = CliRunner().invoke(report_cli(), ["history", "--json", "--arm", "mtp1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [p["session"] for p in out["points"]] == [1, 2]
    assert {a["figure"] for a in out["alerts"]} == {"alpha", "tau"}


def test_history_command_table_and_html(store: Store, tmp_path: Path) -> None:
    make_session(store, accept=0.7, model=f"/models/{HOSTILE}")
    make_session(store, accept=0.5, model=f"/models/{HOSTILE}")
    result = CliRunner().invoke(report_cli(), ["history", "--out", str(tmp_path / "site")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "REGRESSION (session 2): mtp1: alpha dropped" in result.output.replace("\n", " ")
    html = (tmp_path / "site" / "history.html").read_text()
    assert html.count("<svg") >= 4 and "<polyline" in html
    assert HOSTILE_ESCAPED in html and "<script" not in html
    # issue 30: trends with axes (first and last session), a noise band, each point linked to its run's row
    assert ">s1</text>" in html and ">s2</text>" in html and "<polygon" in html
    links = set(re.findall(r'<a href="#(run-\d+)">', html))
    assert links and links <= set(re.findall(r'<tr id="(run-\d+)"', html))


def test_history_with_nothing_to_show_says_what_to_do(store: Store) -> None:
    make_session(store)
    result = CliRunner().invoke(report_cli(), ["history", "--arm", "mtp9"])
    assert result.exit_code == 3 and "No matching sessions" in result.output


def test_render_history_with_missing_figures(store: Store, tmp_path: Path) -> None:
    make_session(store, arms=("base",))
    points = load_points(store)
    html = render_history(points, find_alerts(points), tmp_path).read_text()
    assert "first comparable session" in html and "—" in html
