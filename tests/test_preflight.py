"""A URL arm's server is checked for the serving flags a session needs before anything is stored
(issue 30 item 6), against STUB servers started half-configured (a real vLLM cannot be asked to
drop a flag mid-test)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from stub_server import StubServer
from test_faults_survived import _suite

from observatory.cli import cli
from observatory.client.send import TOP_LOGPROBS


def _compare(tmp_path: Path, arms: str) -> tuple[int, str]:
    db = tmp_path / "p.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", arms, "--suite", _suite(tmp_path), "--db", str(db),
                                 "--no-diffs", "--quiet"])
    return r.exit_code, r.output


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_max_logprobs_too_low_names_the_flag(tmp_path: Path) -> None:
    with StubServer("ok") as base, StubServer("ok", max_logprobs=5) as spec:
        code, out = _compare(tmp_path, f"base={base.url},mtp1={spec.url}")
        assert spec.completions == 1 and base.completions == 1  # the preflight requests, then nothing
    assert code == 3, out
    (line,) = _error_lines(out)
    assert f"start vLLM with --max-logprobs {TOP_LOGPROBS}" in line and "mtp1" in line and spec.url in line
    assert not (tmp_path / "p.db").exists()  # nothing stored


def test_text_tokens_name_the_token_id_flag(tmp_path: Path) -> None:
    with StubServer("ok", token_ids=False) as base:
        code, out = _compare(tmp_path, f"base={base.url}")
    assert code == 3, out
    (line,) = _error_lines(out)
    assert "--return-tokens-as-token-ids" in line and "arm base" in line
    assert not (tmp_path / "p.db").exists()


def test_a_fully_configured_server_passes(tmp_path: Path) -> None:
    """The negative control: the same stubs with the flags in place run the session (exit 0, stored)."""
    with StubServer("ok") as base, StubServer("ok", max_logprobs=TOP_LOGPROBS) as spec:
        code, out = _compare(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code == 0, out
    assert (tmp_path / "p.db").exists()


def test_a_hung_server_is_left_to_the_session(tmp_path: Path) -> None:
    """No definite missing flag (the server never answers): the session runs and records it, as before."""
    with StubServer("hang_after:0") as dead:
        code, out = _compare(tmp_path, f"base={dead.url}")
    assert code != 3, out
