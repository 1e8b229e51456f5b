"""The CLI: every command documents itself; bad input fails in one clear line before launch (issue 2)."""

from __future__ import annotations

import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from observatory.cli import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None, name
        out.append((*prefix, name))
        if isinstance(cmd, click.Group):
            out += _commands(cmd, (*prefix, name))
    return out


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(p))
def test_every_command_has_help_with_an_example(path: tuple[str, ...]) -> None:
    cmd: click.Command = cli
    for name in path:
        assert isinstance(cmd, click.Group)
        found = cmd.get_command(click.Context(cmd), name)
        assert found is not None
        cmd = found
    assert cmd.help and len(cmd.help.strip()) > 10
    if not isinstance(cmd, click.Group):
        assert "\b" in cmd.help, f"{' '.join(path)} lacks a \\b example block"
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arms", "base,mtpx"], "Unknown arm 'mtpx'"),
        (["--arms", "base,spec", "--speculative-config", "{bad"], "--speculative-config: not valid JSON"),
        (["--model", "/nonexistent/model"], "Model path /nonexistent/model does not exist"),
        (["--suite", "nope"], "No probe suite 'nope'"),
        (["--concurrency", "1,x"], "--concurrency"),
        (["--engine-python", "/nonexistent/python"], "does not exist"),
        (["--fail-on", "speedup>1"], "--fail-on: cannot read 'speedup>1'"),
    ],
    ids=["unknown-arm", "bad-spec-json", "missing-model", "unknown-suite", "bad-concurrency", "no-interpreter",
         "bad-fail-on"],
)
def test_bad_input_is_one_line_and_launches_nothing(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["compare", "--log-dir", str(tmp_path / "logs"), *args])
    assert result.exit_code == 3
    assert message in result.output
    assert result.output.strip().count("\n") == 0, result.output
    assert not (tmp_path / "logs").exists()


def test_engine_not_installed(tmp_path: Path) -> None:
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin:/bin")
    if python is None:
        pytest.skip("no system python3")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    result = CliRunner().invoke(cli, ["compare", "--engine-python", python, "--model", str(model)])
    if "vLLM is not installed" not in result.output:
        pytest.skip(f"{python} has vllm")
    assert result.exit_code == 3


def test_show_on_an_empty_database_says_what_to_do() -> None:
    result = CliRunner().invoke(cli, ["show", "--json"])
    assert result.exit_code == 3
    assert "Run `observatory compare` first" in result.output


@pytest.mark.parametrize("command", [["show"], ["sessions"], ["judge"], ["report", "--out", "r"], ["history"]])
def test_reading_commands_create_no_database(command: list[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """`show --db --json` once left an empty database named "--json" behind:
    a command that only reads refuses a SQLite file that is not there."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [*command, "--db", "--json"])
    assert result.exit_code == 3, result.output
    assert "No database at --json" in result.output
    assert not (tmp_path / "--json").exists()
