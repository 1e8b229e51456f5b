"""Issue 15 item 1: arms launch as deployed (the engine's own prefix-caching default) and a
difference in what the servers report between arms is a confound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observatory.engines.arm_engines import parse_arms
from observatory.engines.knobs import candidate_values, current_value, knobs_for
from observatory.engines.server_facts import cache_config
from observatory.engines.settings import EngineSettings
from observatory.engines.vllm import engine_args
from observatory.judge.figures import validity
from observatory.store.db import ArmRow, SessionRow
from observatory.store.session_store import Store

CACHE_INFO = ('vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="%s",'
              'engine="0",num_gpu_blocks="%d"} 1.0\n')


def _args(**kw: Any) -> list[str]:
    (arm,) = parse_arms("mtp2")
    return engine_args(arm, EngineSettings(model="/m", **kw), 8000)


def test_prefix_caching_is_the_engines_default_unless_set() -> None:
    """Issue 15 item 1: no prefix-caching flag by default; the session's setting or the user's flag passes."""
    assert not any("prefix-caching" in a for a in _args())
    assert "--no-enable-prefix-caching" in _args(prefix_caching=False)
    assert "--enable-prefix-caching" in _args(prefix_caching=True)
    user = _args(extra_args=["--no-enable-prefix-caching"])
    assert user.count("--no-enable-prefix-caching") == 1 and "--enable-prefix-caching" not in user


def test_triage_knob_reads_the_deployed_value() -> None:
    """Issue 15 item 1: triage's prefix_caching knob means the value the arm ran with: the engine's
    default (on) when nothing set it, so the flip it tries is "off"; a user's flag wins."""
    knob = next(k for k in knobs_for("vllm") if k.name == "prefix_caching")
    (arm,) = parse_arms("mtp2")
    assert current_value(knob, arm, EngineSettings(model="m")) is True
    assert candidate_values(knob, arm, EngineSettings(model="m")) == [False]
    off = EngineSettings(model="m", extra_args=["--no-enable-prefix-caching"])
    assert current_value(knob, arm, off) is False and candidate_values(knob, arm, off) == [True]
    assert current_value(knob, arm, EngineSettings(model="m", prefix_caching=False)) is False


def _arm(store: Store, sid: int, pos: int, name: str, k: int | None, served_pc: str | None) -> ArmRow:
    served = {} if served_pc is None else {"cache_config": cache_config(CACHE_INFO % (served_pc, 100 + pos))}
    sc = {"method": "mtp", "num_speculative_tokens": k} if k else None
    row: ArmRow = store.add(ArmRow(session_id=sid, position=pos, name=name, status="ok", model="m",
                                   launch={"speculative_config": sc, "argv": ["--model", "/m"], "env": {},
                                           "served": served}))
    return row


@pytest.mark.parametrize(("base_pc", "spec_pc", "confounded"), [
    ("True", "False", True),  # the engine served the spec arm without prefix caching: a confound
    ("True", "True", False),  # the clean control
    ("True", None, False),  # not reported: not compared (and not called equal by the served facts)
])
def test_launched_arms_served_differently_are_confounded(tmp_path: Path, base_pc: str, spec_pc: str | None,
                                                         confounded: bool) -> None:
    """Issue 15 item 1: the same launch flags served with different cache settings (prefix caching as
    served) make the spec arm CONFOUNDED, as a flag difference would."""
    store = Store(str(tmp_path / "runs.db"))
    sid = int(store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t",
                                   options={})).id)
    base = _arm(store, sid, 0, "base", None, base_pc)
    spec = _arm(store, sid, 1, "mtp2", 2, spec_pc)
    acc = {"drafts": 100, "problem": None}
    codes = {v["code"]: v["detail"] for v in validity(spec, base, acc, {})}
    assert ("CONFOUNDED" in codes) == confounded
    if confounded:
        assert "cache enable_prefix_caching: 'True' on base, 'False' here" in codes["CONFOUNDED"]
