"""Arm parsing: presets, A/A copies, URL arms, arms files, faults, and clear errors (issue 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from observatory.engines.arm_engines import parse_arms
from observatory.model.arms import parse_speculative_config
from observatory.model.errors import ArmError


def test_presets_in_order() -> None:
    arms = parse_arms("base,mtp1,mtp2,ngram3")
    assert [a.name for a in arms] == ["base", "mtp1", "mtp2", "ngram3"]
    assert arms[0].speculative_config is None and not arms[0].is_spec
    assert arms[1].speculative_config == {"method": "mtp", "num_speculative_tokens": 1}
    assert arms[2].num_speculative_tokens == 2
    assert arms[3].speculative_config["method"] == "ngram"
    assert arms[3].speculative_config["prompt_lookup_max"] >= arms[3].speculative_config["prompt_lookup_min"]


def test_same_arm_twice_is_an_aa_control() -> None:
    arms = parse_arms("base,base,mtp1,base")
    assert [a.name for a in arms] == ["base", "base#2", "mtp1", "base#3"]
    assert [a.copy_of for a in arms] == [None, "base", None, "base"]


def test_url_arms_launch_nothing_but_keep_their_meaning() -> None:
    arms = parse_arms("base=http://10.0.0.5:8000,mtp2=http://10.0.0.5:8001/")
    assert arms[0].url == "http://10.0.0.5:8000" and not arms[0].is_spec
    assert arms[1].url == "http://10.0.0.5:8001" and arms[1].num_speculative_tokens == 2


def test_fault_option() -> None:
    (arm,) = parse_arms("mtp1+fault=accept_all")
    assert arm.fault == "accept_all" and arm.name == "mtp1+fault=accept_all"


def test_spec_arm_from_json() -> None:
    arms = parse_arms("base,spec", speculative_config='{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}')
    assert arms[1].speculative_config["num_speculative_tokens"] == 3


def test_arms_file(tmp_path: Path) -> None:
    f = tmp_path / "arms.toml"
    f.write_text(
        '[arms.mtp2-eager]\nspeculative_config = { method = "mtp", num_speculative_tokens = 2 }\n'
        'engine_args = ["--enforce-eager"]\nenv = { X = "1" }\n'
    )
    arms = parse_arms("base,mtp2-eager", arms_file=f)
    assert arms[1].engine_args == ["--enforce-eager"] and arms[1].env == {"X": "1"}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("bsae", "Unknown arm 'bsae'"),
        ("base,,mtp1", "comma list"),
        ("mtp0", "Unknown arm 'mtp0'"),
        ("mtp1+fault=nope", "unknown fault 'nope'"),
        ("base+fault=ghost", "needs a speculating arm"),
        ("mtp1+color=red", "unknown option"),
        ("base=ftp://x", "Unknown arm"),
    ],
    ids=["typo", "empty-item", "k-zero", "bad-fault", "fault-on-base", "bad-option", "bad-url"],
)
def test_bad_arms_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ArmError, match=message):
        parse_arms(spec)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{method: mtp}", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"num_speculative_tokens": 2}', "needs a string \"method\""),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "positive integer"),
    ],
    ids=["not-json", "not-object", "no-method", "k-zero"],
)
def test_malformed_speculative_config(text: str, message: str) -> None:
    with pytest.raises(ArmError, match=message):
        parse_speculative_config(text)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[arms.x]\nspeculative_config = 3\n", "must be a JSON object"),
        ("[arms.x]\nflags = []\n", "unknown key 'flags'"),
        ("[arms.x\n", "not valid TOML"),
        ("[other]\n", "unknown top-level key"),
        ('[arms.x]\nfault = "zap"\n', "unknown fault"),
    ],
    ids=["bad-spec", "unknown-key", "bad-toml", "bad-top", "bad-fault"],
)
def test_bad_arms_file(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "arms.toml"
    f.write_text(content)
    with pytest.raises(ArmError, match=message) as e:
        parse_arms("x", arms_file=f)
    assert str(f) in str(e.value)
