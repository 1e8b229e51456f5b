"""A URL arm's server is checked for the serving flags a session needs before anything is stored
(issue 30 item 6), against STUB servers started half-configured (a real vLLM cannot be asked to
drop a flag mid-test), and a port held by something that is no HTTP server."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from click.testing import CliRunner

from observatory.cli import cli
from observatory.client.send import TOP_LOGPROBS
from observatory.session.preflight import not_http
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


def _compare(tmp_path: Path, arms: str) -> tuple[int, str]:
    db = tmp_path / "p.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", arms, "--suite", tiny_suite(tmp_path), "--db", str(db),
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
    assert (tmp_path / "p.db").exists()
    assert code == verdict_exit(tmp_path / "p.db") != 3, out  # ran its course (a stub speculates nothing: INVALID)


def test_a_hung_server_is_left_to_the_session(tmp_path: Path) -> None:
    """No definite missing flag (the server never answers): the session runs and records it, as before."""
    with StubServer("hang_after:0") as dead:
        code, out = _compare(tmp_path, f"base={dead.url}")
    assert code != 3, out


def _garbage_port() -> tuple[str, socket.socket]:
    """A port on which something that is no HTTP server answers every connection with bytes of its own."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"\x00\xffSSH-2.0-not-http\r\n")

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", listener


def test_a_port_that_answers_garbage_is_a_setup_error(tmp_path: Path) -> None:
    """A port held by another service (issue 30 item 5): one line, exit 3, nothing stored, for gate as for compare."""
    url, listener = _garbage_port()
    try:
        code, out = _compare(tmp_path, f"base={url},mtp2={url}")
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={url},mtp2={url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(tmp_path / "g.db"), "--report", str(tmp_path / "rep"), "--quiet"])
    finally:
        listener.close()
    assert code == 3, out
    (line,) = _error_lines(out)
    assert "arm base" in line and url in line and "not with HTTP" in line
    assert r.exit_code == 3 and len(_error_lines(r.output)) == 1, r.output
    assert not (tmp_path / "p.db").exists() and not (tmp_path / "g.db").exists() and not (tmp_path / "rep").exists()


def test_a_server_that_drops_logprobs_is_a_setup_error(tmp_path: Path) -> None:
    """An OpenAI-compatible server answering without logprobs although asked (not vLLM, or a proxy dropping them)."""
    with StubServer("ok", with_logprobs=False) as base:
        code, out = _compare(tmp_path, f"base={base.url}")
    assert code == 3, out
    (line,) = _error_lines(out)
    assert "arm base" in line and "without logprobs" in line
    assert not (tmp_path / "p.db").exists()


def test_a_spec_arm_that_drops_logprobs_beside_a_base_that_returns_them_runs(tmp_path: Path) -> None:
    """Where base's server returns logprobs, a spec arm dropping them is the deployment's difference, judged by the
    session (tests/judge/test_verdict_policy.py: its text diffed, its ids UNJUDGED), not a setup error."""
    with StubServer("ok") as base, StubServer("ok", with_logprobs=False) as spec:
        code, out = _compare(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert code != 3 and not [line for line in _error_lines(out) if "without logprobs" in line], out


def test_not_http_passes_a_real_http_server_and_a_silent_port() -> None:
    """The negative controls of the HTTP check: a stub HTTP server, and a port that accepts and says nothing."""
    with StubServer("ok") as ok:
        assert not_http(ok.url) is None
    silent = socket.create_server(("127.0.0.1", 0))
    try:
        assert not_http(f"http://127.0.0.1:{silent.getsockname()[1]}") is None  # proves nothing: the session's
    finally:
        silent.close()
