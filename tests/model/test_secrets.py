"""An API key given for an endpoint is never stored, logged or rendered (issue 7 point 5)."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.commands.compare import redact_argv
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite

SECRET = "sk-observatory-test-4f9c2e"


def test_redact_argv() -> None:
    assert redact_argv(["observatory", "--api-key", SECRET, "--api-key=" + SECRET, "--arms", "x"]) == [
        "observatory", "--api-key", "***", "--api-key=***", "--arms", "x"]


def test_api_key_reaches_the_server_and_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        monkeypatch.setattr(sys, "argv", ["observatory", "gate", "--api-key", SECRET])
        r = CliRunner().invoke(cli, [
            "gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", tiny_suite(tmp_path), "--db", str(db),
            "--api-key", SECRET, "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
            "--json", str(out / "session.json"), "--log-dir", str(out / "logs"), "--quiet",
        ])
        seen = base.authorizations + spec.authorizations
    assert r.exit_code in (0, 1, 2), r.output
    assert seen and all(a == f"Bearer {SECRET}" for a in seen)
    assert SECRET not in r.output
    leaked = [p for p in [db, *tmp_path.glob("s.db*"), *out.rglob("*")] if p.is_file()
              and SECRET.encode() in p.read_bytes()]
    assert not leaked, leaked
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert SECRET not in shown.output and "***" in shown.output


def _leaks(paths: list[Path], secret: str) -> list[Path]:
    return [p for p in paths if p.is_file() and secret.encode() in p.read_bytes()]


def test_key_in_url_and_echoed_key_are_never_stored_or_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19 item 5: a key inside a URL was stored verbatim in the command, the plan, the launch, the
    report and the JSON; a server echoing the Authorization header put the key in the database, the report,
    JUnit and stderr."""
    url_key = "sk-inurl-8d1e77aa"
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5) as base, StubServer("echo_auth") as spec, StubServer("echo_auth") as spec2:
        spec_url = spec.url.replace("http://", f"http://user:{url_key}@")
        arms = f"base={base.url},mtp1={spec_url},mtp2={spec2.url}"
        argv = ["gate", "--arms", arms, "--suite", tiny_suite(tmp_path), "--db", str(db), "--api-key", SECRET,
                "--report", str(out / "report"), "--junit", str(out / "junit.xml"), "--json", str(out / "s.json"),
                "--log-dir", str(out / "logs"), "--no-diffs"]
        monkeypatch.setattr(sys, "argv", ["observatory", *argv])
        r = CliRunner().invoke(cli, argv)
    assert r.exit_code in (1, 2), r.output
    files = [db, *tmp_path.glob("s.db*"), *out.rglob("*")]
    basic = base64.b64encode(f"user:{url_key}".encode()).decode()  # how the URL credentials travel
    for secret in (SECRET, url_key, basic):
        assert secret not in r.output
        assert not _leaks(files, secret), (secret, _leaks(files, secret))
    data = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output
    assert "http://***@127.0.0.1" in data  # the URL is kept, its credentials masked
    assert "bad key: Bearer ***" in data and "bad key: Basic ***" in data  # echoed errors kept, keys masked


def test_redact_masks_url_credentials_and_remembered_keys() -> None:
    """Issue 19 item 5: one redaction function for every stored or shown string."""
    from observatory.model.redact import forget_all, redact, remember

    try:
        remember("sk-abcdef123")
        remember("abc")  # too short to mask safely: ignored
        assert redact({"u": ["postgresql://me:pw@db/x", "error: sk-abcdef123 rejected", "abc"]}) == {
            "u": ["postgresql://***@db/x", "error: *** rejected", "abc"]}
    finally:
        forget_all()


def _token_texts(obj: object) -> list[list[str]]:
    """Every `token_texts` list in a JSON document."""
    found: list[list[str]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "token_texts" and isinstance(v, list):
                found.append([str(t) for t in v])
            else:
                found += _token_texts(v)
    elif isinstance(obj, list):
        for v in obj:
            found += _token_texts(v)
    return found


def test_remember_engine_takes_every_form_of_a_credential_argument() -> None:
    """Issue 32 item 1: --api-key=V, --api-key V, "--api-key V" as one argument, credential-named env values."""
    from observatory.model.redact import forget_all, redact_text, remember_engine

    try:
        remember_engine(["--api-key=sk-eq-000001", "--hf-token", "hf_spaced_000002", "--api-key sk-one-000003",
                         "--max-model-len", "4096000"], {"MY_ACCESS_KEY": "key-env-000004", "PATHS": "/opt/x-y-z"})
        text = "sk-eq-000001 hf_spaced_000002 sk-one-000003 key-env-000004 4096000 /opt/x-y-z"
        assert redact_text(text) == "*** *** *** *** 4096000 /opt/x-y-z"  # other flags and env values kept
    finally:
        forget_all()


def test_redact_pieces_masks_a_secret_split_over_pieces() -> None:
    """Issue 32 item 1: each piece loses its part of the secret; the joined pieces are the masked text."""
    from observatory.model.redact import forget_all, redact_pieces, redact_text, remember

    try:
        remember("sk-split-key-77aa1b")
        pieces = ["say ", "sk-split-", "key-", "77aa1b", " now"]
        masked = redact_pieces(pieces)
        assert masked == ["say ", "***", "", "", " now"]
        assert "".join(masked) == redact_text("".join(pieces)) == "say *** now"
        assert redact_pieces(["a", "b"]) == ["a", "b"]
        assert redact_pieces(["xsk-split", "-key-77aa1by"]) == ["x***", "y"]
    finally:
        forget_all()


def test_key_split_over_two_tokens_is_not_recoverable_from_the_token_texts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 item 1: a server echoing the key in an answer, split over two tokens, had it masked in the
    text but joining the per-token texts of `show --json` and the session JSON gave it back."""
    import json

    key = "sk-split-key-77aa1b"
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5, pieces=["the key is ", "sk-split-", "key-77aa1b"]) as base, \
            StubServer("ok", token=5, pieces=["sk-split-", "key-77aa1b"]) as spec:
        argv = ["gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", tiny_suite(tmp_path), "--db",
                str(db), "--api-key", key, "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
                "--json", str(out / "s.json"), "--log-dir", str(out / "logs"), "--quiet"]
        monkeypatch.setattr(sys, "argv", ["observatory", *argv])
        r = CliRunner().invoke(cli, argv)
    assert r.exit_code in (0, 1, 2), r.output
    assert not _leaks([db, *tmp_path.glob("s.db*"), *out.rglob("*")], key)
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output
    for doc in (json.loads(shown), json.loads((out / "s.json").read_text())):
        joined = ["".join(t) for t in _token_texts(doc)]
        assert joined, "the documents carry token texts"
        assert not [j for j in joined if key in j or "sk-split-key" in j], joined
        assert any("***" in j for j in joined)
        # the pieces the split key made up are masked, not only their concatenation
        assert not [t for texts in _token_texts(doc) for t in texts if "sk-split-" in t or "key-77aa1b" in t]


def test_url_user_name_alone_and_its_basic_header_are_masked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 item 1: a key given as a URL's user name (no password) came back base64-encoded in an
    echoed `Authorization: Basic` header, stored in clear."""
    user = "sk-useronly-5e1f09"
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    with StubServer("ok", token=5) as base, StubServer("echo_auth") as spec:
        arms = f"base={base.url},mtp1={spec.url.replace('http://', f'http://{user}@')}"
        argv = ["gate", "--arms", arms, "--suite", tiny_suite(tmp_path), "--db", str(db), "--report",
                str(out / "report"), "--junit", str(out / "junit.xml"), "--json", str(out / "s.json"),
                "--log-dir", str(out / "logs"), "--no-diffs"]
        monkeypatch.setattr(sys, "argv", ["observatory", *argv])
        r = CliRunner().invoke(cli, argv)
        sent = spec.authorizations
    basic = base64.b64encode(f"{user}:".encode()).decode()
    assert sent and sent[0] == f"Basic {basic}"  # what the client itself sent, and the server echoed
    assert r.exit_code == 2, r.output
    files = [db, *tmp_path.glob("s.db*"), *out.rglob("*")]
    for secret in (user, basic):
        assert secret not in r.output
        assert not _leaks(files, secret), secret
    data = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output
    assert "bad key: Basic ***" in data


# passes the "can it import vllm" check (`python -c ...`), then exits at once as an engine
# passes the "can it import vllm" check (`python -c ...`), then logs its arguments and environment as
# vLLM does ("non-default args: ...") and exits at once as an engine
_EXIT_ENGINE = ("import os, sys\nif sys.argv[1:2] == ['-c']:\n    sys.exit(0)\n"
                "print('args:', sys.argv, os.environ.get('HF_TOKEN'), flush=True)\n"
                "print('stub engine: giving up', flush=True)\nsys.exit(1)\n")


def test_engine_env_and_engine_arg_keys_are_not_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32 item 1: a token in an arms file's `env` table and a key passed as
    `--engine-arg=--api-key=...` (or `--api-key VALUE`) were stored in clear in the launch argv and env.

    The engine is a STUB interpreter that exits at once (a real engine is not needed to store a launch).
    """
    env_token, eq_key, spaced_key = "hf_envtoken_55c1d2", "sk-engarg-9911ab", "sk-engarg-spaced-0c3e"
    engine = tmp_path / "stub-engine"
    engine.write_text(f"#!{sys.executable}\n{_EXIT_ENGINE}")
    engine.chmod(0o755)
    monkeypatch.setenv("OBSERVATORY_ENGINE_PYTHON", str(engine))
    arms_file = tmp_path / "arms.toml"
    arms_file.write_text(f'[arms.tok]\nenv = {{ HF_TOKEN = "{env_token}", OTHER = "plain-value-1" }}\n'
                         f'engine_args = ["--api-key", "{spaced_key}"]\n')
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    db = tmp_path / "s.db"
    out = tmp_path / "out"
    argv = ["gate", "--arms", "tok", "--arms-file", str(arms_file), "--model", str(model), "--suite", tiny_suite(tmp_path),
            "--db", str(db), f"--engine-arg=--api-key={eq_key}", "--report", str(out / "report"),
            "--junit", str(out / "junit.xml"), "--json", str(out / "s.json"), "--log-dir", str(out / "logs"),
            "--quiet"]
    monkeypatch.setattr(sys, "argv", ["observatory", *argv])
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 2, r.output
    data = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"]).output
    assert "plain-value-1" in data  # env values that are not credentials are kept
    assert "HF_TOKEN" in data and "--api-key" in data  # the names stay, the values go
    logs = list((out / "logs").glob("*.log"))
    assert logs and all("stub engine: giving up" in p.read_text() for p in logs)  # the engine's log, masked
    files = [db, *tmp_path.glob("s.db*"), *out.rglob("*")]
    for secret in (env_token, eq_key, spaced_key):
        assert secret not in r.output and secret not in data
        assert not _leaks(files, secret), secret
