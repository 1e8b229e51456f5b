"""Channel long_prompts in the nightly (issue 49 item 7): acceptance per prompt-length bucket judged against the
clean curve (a fault arm's clean twin tonight, the store's clean history, the documented platform curve), on
stored rows; the long_noise fault's decision. No engine: cheap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observatory.channels import get, long_prompts, resolve
from observatory.channels.view import ChannelView
from observatory.faults import FAULTS, field_conditions
from observatory.judge import curves
from observatory.model.env_vars import ENV_VARS, FAULT_KNOBS
from observatory.model.probes import Probe
from observatory.session.fault_selftest import ISSUE_ITEMS, Catcher, fault_plan
from observatory.store.stored import verdict_row
from tests.support.state_channels import CLEAN, build, by_arm

# the clean curve's per-sample rates: by content, not flat with length (the field model's is not either)
CURVE = {0: 0.30, 1: 0.40, 2: 0.35, 3: 0.20, 4: 0.25, 5: 0.24}
SPREAD = (0.10, -0.05, 0.0, 0.05, -0.10, 0.0)  # per sample: the same question accepts differently
ROLES = {"base": "base", "mtp2": "spec"}


def _rate(b: int, s: int) -> float:
    return max(0.0, CURVE[b] + SPREAD[s % len(SPREAD)])


def _answer(rates: dict[str, Any]) -> Any:
    """Each arm's accepted/drafted per (bucket, sample): RATES[arm](bucket, sample), base none."""
    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        b, s = int(p.meta["bucket"]), int(p.meta["sample"])
        rate = rates.get(arm, _rate)(b, s) if arm in rates else None
        return [{"tokens": CLEAN, "repeat": rep, "ttft_ms": 10.0 * (b + 1), "duration_ms": 400.0 + 20 * b,
                 "usage": {"prompt_tokens": long_prompts.length_of(float(p.meta["fraction"]), 1024)},
                 "counters": {"drafts": 100, "draft_tokens": 200, "accepted": round(200 * rate)}
                 if rate is not None else {}} for rep in range(long_prompts.REPEATS)]
    return answer


def _facts(view: ChannelView, max_model_len: int = 1024) -> ChannelView:
    """The max_model_len each arm's server reported (what measure notes): part of the curve's key."""
    for arm in view.arms:
        arm.launch = {**arm.launch, "channel_facts": {long_prompts.NAME: {"max_model_len": max_model_len}}}
    return view


def _night(tmp_path: Path, rates: dict[str, Any], roles: dict[str, str] | None = None,
           max_model_len: int = 1024) -> ChannelView:
    """One session in TMP_PATH's store (earlier nights stay), judged, its verdicts stored; its view."""
    view = _facts(build(tmp_path, long_prompts.CHANNEL, roles or ROLES, _answer(rates)), max_model_len)
    rows = long_prompts.judge(view)
    with view.store.tx() as s:
        s.add_all([verdict_row(v) for v in rows])
    view.__dict__["rows"] = rows
    return view


def _acc(view: ChannelView, arm: str = "mtp2") -> Any:
    return by_arm(view.__dict__["rows"], view)[arm]


def _noise_from(bucket: int) -> Any:
    """A drafter that is noise from BUCKET on (long_noise's signature)."""
    return lambda b, s: 0.0 if b >= bucket else _rate(b, s)


# -- the nightly's plan ------------------------------------------------------------------------------------
def test_long_prompts_runs_in_the_nightly_with_its_faults() -> None:
    nightly = resolve("nightly")
    assert "long_prompts" in nightly and nightly[-1] == "speculates"
    assert "long_prompts" not in [n for n in resolve("deep") if get(n).profile == "deep"]
    plan = fault_plan("nightly", None)
    assert plan["long_noise"] == Catcher("channel", "long_prompts") and ISSUE_ITEMS["long_noise"] == "49.7"
    assert {"long_noise", "length_decay"} <= set(FAULTS)


def test_the_nightly_plan_is_small_and_reaches_the_context_limit() -> None:
    probes = long_prompts.plan([])
    assert len(probes) * long_prompts.REPEATS == 36  # the measured cost: docs/channels.md
    assert len({p.prompt for p in probes}) == long_prompts.SAMPLES  # six questions, each at every bucket
    lengths = sorted({long_prompts.length_of(float(p.meta["fraction"]), 1024) for p in probes})
    assert lengths == [62, 124, 249, 499, 749, 999]


# -- no control --------------------------------------------------------------------------------------------
def test_no_control_is_not_judged_and_never_warns(tmp_path: Path) -> None:
    """The first night of a platform with no documented curve: SKIP "no control", the curve stored."""
    view = _night(tmp_path, {"mtp2": _rate})
    acc = _acc(view)
    assert acc.verdict == "SKIP" and acc.reason.startswith("no control: not judged"), acc.reason
    assert acc.details["no_control"] and acc.details["kind"] == "spec"
    assert [r["acceptance"] for r in acc.details["table"]] == pytest.approx(list(CURVE.values()), abs=0.01)
    assert by_arm(view.__dict__["rows"], view, "outputs")["mtp2"].verdict == "PASS"


def test_a_noise_arm_without_any_control_is_not_judged_either(tmp_path: Path) -> None:
    """No control, no verdict on acceptance: its own short buckets are no control (the clean curve moves by
    content too); the curve is kept, and never joins a history (it is not PASS and not a spec arm's)."""
    view = _night(tmp_path, {"mtp2+fault=long_noise": _noise_from(3)}, {"base": "base", "mtp2+fault=long_noise": "fault"})
    acc = _acc(view, "mtp2+fault=long_noise")
    assert acc.verdict == "SKIP" and acc.details["kind"] == "fault"


# -- against the clean history -----------------------------------------------------------------------------
def test_clean_nights_pass_against_their_history(tmp_path: Path) -> None:
    _night(tmp_path, {"mtp2": _rate})
    # a clean night on other numerics: a few samples answer differently, the curve moves a little
    view = _night(tmp_path, {"mtp2": lambda b, s: _rate(b, s) + (0.06 if s == 1 else -0.04 if s == 4 else 0.0)})
    acc = _acc(view)
    assert acc.verdict == "PASS", acc.reason
    assert "the clean history: 1 earlier night" in acc.reason


def test_noise_past_a_length_fails_against_the_history(tmp_path: Path) -> None:
    for _ in range(2):
        _night(tmp_path, {"mtp2": _rate})
    view = _night(tmp_path, {"mtp2": _noise_from(4)})  # the last two buckets: 749 and 999 tokens
    acc = _acc(view)
    assert acc.verdict == "FAIL" and "collapses on long prompts" in acc.reason, acc.reason
    worst = acc.details["worst"]
    assert worst["from_tokens"] == 749 and worst["acceptance"] == 0.0
    assert "2 earlier night(s)" in acc.details["against"]
    assert by_arm(view.__dict__["rows"], view, "outputs")["mtp2"].verdict == "PASS"  # output intact


def test_noise_in_the_longest_bucket_alone_fails(tmp_path: Path) -> None:
    _night(tmp_path, {"mtp2": _rate})
    acc = _acc(_night(tmp_path, {"mtp2": _noise_from(5)}))
    assert acc.verdict == "FAIL" and acc.details["worst"]["from_tokens"] == 999


def test_a_drop_that_is_no_collapse_warns(tmp_path: Path) -> None:
    """A long-prompt drop well beyond the noise, leaving more than a third of the control's acceptance: WARN."""
    high = {"mtp2": lambda b, s: 0.3 + _rate(b, s)}  # a drafter accepting 0.5-0.7 (k = 1 accepts more)
    _night(tmp_path, high)
    acc = _acc(_night(tmp_path, {"mtp2": lambda b, s: (0.3 + _rate(b, s)) * (0.55 if b >= 3 else 1.0)}))
    assert acc.verdict == "WARN" and "drops on long prompts" in acc.reason, acc.reason


def test_a_flagged_night_and_a_fault_arm_never_join_the_history(tmp_path: Path) -> None:
    _night(tmp_path, {"mtp2": _rate})
    _night(tmp_path, {"mtp2": _noise_from(3)})  # FAIL: kept out
    _night(tmp_path, {"mtp2#f": _noise_from(0)}, {"base": "base", "mtp2#f": "fault"})  # a fault arm: kept out
    acc = _acc(_night(tmp_path, {"mtp2": _rate}))
    assert acc.verdict == "PASS" and "1 earlier night" in acc.details["against"], acc.details["against"]


def test_history_of_another_context_length_is_no_control(tmp_path: Path) -> None:
    """A night that served another max_model_len had its buckets at other lengths: not this curve's history."""
    first = _acc(_night(tmp_path, {"mtp2": _rate}, max_model_len=2048))
    assert first.details["key"]["max_model_len"] == 2048 and first.details["key"]["k"] == 2
    acc = _acc(_night(tmp_path, {"mtp2": _noise_from(3)}))
    assert acc.verdict == "SKIP" and acc.details["key"]["max_model_len"] == 1024


# -- a fault arm beside its clean twin ---------------------------------------------------------------------
def test_a_fault_arm_fails_against_its_clean_twin_tonight(tmp_path: Path) -> None:
    """selftest's session: mtp2 and mtp2+fault=long_noise; the twin is the control, itself not judged."""
    roles = {"base": "base", "mtp2": "spec", "mtp2+fault=long_noise": "fault"}
    view = _night(tmp_path, {"mtp2": _rate, "mtp2+fault=long_noise": _noise_from(4)}, roles)
    assert _acc(view, "mtp2+fault=long_noise").verdict == "FAIL"
    assert "the clean twin mtp2 tonight" in _acc(view, "mtp2+fault=long_noise").reason
    assert _acc(view, "mtp2").verdict == "SKIP"  # no control of its own


# -- the documented platform curve -------------------------------------------------------------------------
def _platform(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sd: float | None) -> None:
    probe = _facts(build(tmp_path / "probe", long_prompts.CHANNEL, ROLES, _answer({"mtp2": _rate})))
    key = long_prompts.curve_key(probe, probe.arms[1])
    curve = curves.Curve("documented: test platform", {b: (long_prompts.length_of(f, 1024), CURVE[b], sd)
                                                       for b, f in enumerate(long_prompts.BUCKETS)}, 3)
    monkeypatch.setitem(curves.PLATFORM_CURVES, (str(key["engine"]), str(key["version"]), str(key["platform"]),
                                                 str(key["dtype"]), str(key["model"]), "mtp", 2, 1024,
                                                 str(key["plan"])), curve)


def test_without_history_the_documented_platform_curve_is_the_control(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _platform(monkeypatch, tmp_path, 0.01)
    clean = _acc(_night(tmp_path / "a", {"mtp2": _rate}))
    assert clean.verdict == "PASS" and "documented: test platform" in clean.reason
    noisy = _acc(_night(tmp_path / "b", {"mtp2": _noise_from(3)}))
    assert noisy.verdict == "FAIL"


def test_a_drop_must_stand_against_every_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This platform's history (stored before a documented curve existed) accepts nothing on the longest prompts
    where the documented curve accepts 0.24: a night like its history collapses against the curve and not
    against the history, so the verdict is the history's (the mildest over the controls present)."""
    lower = {"mtp2": _noise_from(5)}
    assert _acc(_night(tmp_path, lower)).verdict == "SKIP"  # no control yet: stored as the history
    _platform(monkeypatch, tmp_path, 0.01)
    acc = _acc(_night(tmp_path, lower))
    levels = {c["source"].split(":")[0]: c["level"] for c in acc.details["controls"]}
    assert levels == {"documented": "FAIL", "the clean history": "PASS"} and acc.verdict == "PASS"


# -- the test itself ---------------------------------------------------------------------------------------
def test_the_sigma_floor_keeps_a_deterministic_history_from_flagging_small_moves() -> None:
    control = curves.Curve("history", {b: (b, 0.3, 0.0) for b in range(6)}, 5)  # nights identical: SD 0
    moved = {b: (b, 0.3 - 0.04) for b in range(6)}
    level, worst, _ = curves.against(moved, control)
    assert level == "PASS" and worst is not None and worst["sigma"] == curves.SIGMA_FLOOR
    collapsed = {b: (b, 0.3 if b < 5 else 0.0) for b in range(6)}
    assert curves.against(collapsed, control)[0] == "FAIL"


def test_combine_takes_the_mean_and_the_between_run_sd() -> None:
    c = curves.combine("x", [{0: (62, 0.2)}, {0: (62, 0.4)}])
    assert c is not None and c.buckets[0][0] == 62 and c.buckets[0][1] == pytest.approx(0.3)
    assert c.buckets[0][2] == pytest.approx(0.1414, abs=1e-3)
    assert curves.combine("x", []) is None


def test_buckets_of_other_lengths_are_not_compared() -> None:
    control = curves.Curve("c", {0: (100, 0.3, None), 1: (200, 0.3, None)})
    assert [r["from_bucket"] for r in curves.tails({0: (100, 0.0), 1: (300, 0.0)}, control)] == [0]


# -- speed -------------------------------------------------------------------------------------------------
def test_speed_per_bucket_against_base_is_reported_not_judged(tmp_path: Path) -> None:
    view = _night(tmp_path, {"mtp2": _rate})
    speed = by_arm(view.__dict__["rows"], view, "speed")["mtp2"]
    assert speed.verdict == "PASS" and "not judged" in speed.reason
    assert [r["S"] for r in speed.details["table"]] == [1.0] * 6  # the same decode times as base here


# -- the fault --------------------------------------------------------------------------------------------
def test_long_noise_noises_every_draft_past_its_length_only(monkeypatch: pytest.MonkeyPatch) -> None:
    assert field_conditions.rows_past([100, 512, 513, None], 512) == [False, False, True, False]
    monkeypatch.delenv(field_conditions.LONG_NOISE_FROM_VAR, raising=False)
    assert field_conditions.long_noise_from() == 512
    assert field_conditions.long_noise_from({field_conditions.LONG_NOISE_FROM_VAR: "300"}) == 300
    with pytest.raises(ValueError, match="OBSERVATORY_LONG_NOISE_FROM"):
        field_conditions.long_noise_from({field_conditions.LONG_NOISE_FROM_VAR: "-3"})
    assert FAULT_KNOBS[field_conditions.LONG_NOISE_FROM_VAR] == "long_noise"
    assert field_conditions.LONG_NOISE_FROM_VAR in ENV_VARS
