"""Issue 30 item 7: the nightly profile carries an A/A copy of each base arm unless told not to."""

from __future__ import annotations

from observatory.engines.arm_engines import parse_arms
from observatory.session.options import SessionPlan
from observatory.session.plan import plan_compare, with_aa_copies


def _names(arms: str, **kw: object) -> list[str]:
    return [a.name for a in plan_compare(SessionPlan(arms=arms, **kw)).arms]  # type: ignore[arg-type]


def test_nightly_adds_a_copy_of_base_right_after_it() -> None:
    """And, last, stream_fields' chunked-stream control (issue 49 item 3; --no-channel-controls: not)."""
    assert _names("base,mtp1,mtp2", profile="nightly") == ["base", "base#2", "mtp1", "mtp2",
                                                           "base+stream_interval=3"]
    assert _names("base,mtp1,mtp2", profile="nightly", channel_controls=False) == ["base", "base#2", "mtp1", "mtp2"]
    copy = plan_compare(SessionPlan(arms="base,mtp1", profile="nightly")).arms[1]
    assert copy.copy_of == "base" and copy.speculative_config is None


def test_a_named_copy_the_quick_profile_and_no_aa_copy_add_nothing() -> None:
    """The controls: what the user wrote runs as written."""
    assert _names("base,base,mtp1", profile="nightly", channel_controls=False) == ["base", "base#2", "mtp1"]
    assert _names("base,mtp1", profile="quick") == ["base", "mtp1"]
    assert _names("base,mtp1", profile="nightly", aa_copy=False, channel_controls=False) == ["base", "mtp1"]


def test_one_copy_per_engine_base_and_never_of_a_spec_arm() -> None:
    arms = with_aa_copies(parse_arms("vllm:base,vllm:mtp2,llama.cpp:base,llama.cpp:draft2"))
    assert [(a.name, a.copy_of) for a in arms] == [
        ("base", None), ("base#2", "base"), ("mtp2", None),  # vllm: names plain
        ("llama.cpp:base", None), ("llama.cpp:base#2", "llama.cpp:base"), ("llama.cpp:draft2", None)]


def test_a_plan_stored_before_the_field_resumes_without_a_copy() -> None:
    """Sessions planned before issue 30 item 7 ran without one: resuming them must not add an arm."""
    stored = {"version": 1, "arms": "base,mtp1", "profile": "nightly"}
    assert SessionPlan.from_stored(stored, 1).aa_copy is False
    assert SessionPlan.from_stored(stored, 1).channel_controls is False  # nor the channels' control arms
    assert SessionPlan.from_stored({**SessionPlan(arms="base").to_stored()}, 1).aa_copy is True
