"""Tool-call and reasoning parsers settable per session and per arm (issue 30 item 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.engines.arm_engines import parse_arms
from observatory.engines.settings import EngineSettings
from observatory.engines.vllm import engine_args
from observatory.judge.figures import launch_differences, validity
from observatory.model.arms import Arm
from observatory.model.errors import ArmError, ObservatoryError
from observatory.session.options import SessionPlan
from observatory.session.plan import plan_compare
from observatory.store.db import ArmRow
from observatory.store.session_store import Store
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import compare_ok, interrupt_arm, tiny_suite

ARMS = """
[arms.base-qwen]
tool_parser = "qwen3_coder"
reasoning_parser = "qwen3"

[arms.mtp1-qwen]
speculative_config = { method = "mtp", num_speculative_tokens = 1 }
tool_parser = "qwen3_coder"
reasoning_parser = "qwen3"

[arms.mtp1-plain]
speculative_config = { method = "mtp", num_speculative_tokens = 1 }
tool_parser = "none"
"""


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_default_is_hermes_and_no_reasoning_parser() -> None:
    (arm,) = parse_arms("mtp1")
    argv = engine_args(arm, EngineSettings(model="/m"), 8000)
    assert _flag(argv, "--tool-call-parser") == "hermes" and "--enable-auto-tool-choice" in argv
    assert "--reasoning-parser" not in argv


def test_session_parsers_and_none() -> None:
    (arm,) = parse_arms("mtp1")
    argv = engine_args(arm, EngineSettings(model="/m", tool_parser="qwen3_coder", reasoning_parser="deepseek_r1"), 1)
    assert _flag(argv, "--tool-call-parser") == "qwen3_coder"
    assert _flag(argv, "--reasoning-parser") == "deepseek_r1"
    off = engine_args(arm, EngineSettings(model="/m", tool_parser=None), 1)
    assert "--tool-call-parser" not in off and "--enable-auto-tool-choice" not in off


def test_an_arms_own_parser_wins(tmp_path: Path) -> None:
    f = tmp_path / "arms.toml"
    f.write_text(ARMS)
    qwen, plain, base = parse_arms("mtp1-qwen,mtp1-plain,base", f)
    settings = EngineSettings(model="/m", reasoning_parser="deepseek_r1")
    argv = engine_args(qwen, settings, 1)
    assert _flag(argv, "--tool-call-parser") == "qwen3_coder" and _flag(argv, "--reasoning-parser") == "qwen3"
    argv = engine_args(plain, settings, 1)  # "none" in the arms file turns the session's hermes off
    assert "--tool-call-parser" not in argv and _flag(argv, "--reasoning-parser") == "deepseek_r1"
    assert _flag(engine_args(base, settings, 1), "--tool-call-parser") == "hermes"


@pytest.mark.parametrize("text", ['tool_parser = "--enforce-eager"', 'reasoning_parser = 3',
                                  'tool_parser = "hermes"\nurl = "http://127.0.0.1:9"'])
def test_bad_parser_keys_are_refused(tmp_path: Path, text: str) -> None:
    f = tmp_path / "arms.toml"
    f.write_text(f"[arms.x]\n{text}\n")
    with pytest.raises(ArmError, match="parser"):
        parse_arms("x", f)


def test_a_parser_differing_from_base_is_confounded(tmp_path: Path) -> None:
    """The parser is a launch flag like any other: base on hermes, mtp1 on qwen3_coder is CONFOUNDED."""
    f = tmp_path / "arms.toml"
    f.write_text(ARMS)
    base, same, other = parse_arms("base-qwen,mtp1-qwen,mtp1", f)
    settings = EngineSettings(model="/m")

    def row(a: Arm) -> ArmRow:
        return ArmRow(name=a.name, status="ok", launch={"speculative_config": a.speculative_config,
                                                         "argv": engine_args(a, settings, 8000), "env": {}})

    assert launch_differences(row(same), row(base)) == []  # the negative control: same parsers
    diffs = launch_differences(row(other), row(base))
    assert "--tool-call-parser: 'qwen3_coder' on base, 'hermes' here" in diffs
    assert "--reasoning-parser: 'qwen3' on base, absent here" in diffs
    codes = {v["code"]: v["detail"] for v in validity(row(other), row(base), {"drafts": 500}, {})}
    assert "--tool-call-parser" in codes["CONFOUNDED"]


def test_plan_flows_into_settings_and_checks_names(tmp_path: Path) -> None:
    with StubServer("ok") as s:
        plan = SessionPlan(arms=f"base={s.url}", suite=tiny_suite(tmp_path), tool_parser="none",
                           reasoning_parser="qwen3")
        settings = plan_compare(plan).settings
        assert settings.tool_parser is None and settings.reasoning_parser == "qwen3"
        assert plan_compare(SessionPlan(arms=f"base={s.url}", suite=tiny_suite(tmp_path))).settings.tool_parser == "hermes"
        with pytest.raises(ObservatoryError, match="--tool-parser"):
            plan_compare(SessionPlan(arms=f"base={s.url}", suite=tiny_suite(tmp_path), tool_parser="--x=1"))


def test_resume_keeps_the_parsers(tmp_path: Path) -> None:
    """The parsers are plan fields: stored, read back, and a different one given with --resume is refused."""
    with StubServer("ok") as base:
        db, _ = compare_ok(tmp_path, base.url, "--tool-parser", "qwen3_coder", "--reasoning-parser", "qwen3")
        with Store(db) as store:
            stored = SessionPlan.from_stored(store.session(1).options["plan"], 1)
        assert (stored.tool_parser, stored.reasoning_parser) == ("qwen3_coder", "qwen3")
        assert plan_compare(stored).settings.reasoning_parser == "qwen3"
        interrupt_arm(db)
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet", "--tool-parser", "hermes"])
        assert r.exit_code != 0 and "--tool-parser conflicts" in r.output, r.output
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", db, "--quiet",
                                     "--tool-parser", "qwen3_coder"])
        assert r.exit_code == 0, r.output


def test_old_plans_without_parsers_resume_as_hermes() -> None:
    plan = SessionPlan.from_stored({"version": 1, "arms": "base"}, 1)
    assert plan.tool_parser == "hermes" and plan.reasoning_parser is None
