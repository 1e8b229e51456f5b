"""Hostile servers and inputs, round two (issue 32 items 4-7), each tried from outside through the CLI.

Every case asserts the exit code, one line on stderr where the contract is a
one-line error, no traceback, the database's integrity check, and no session
left running. Servers are the hand-made STUBs of tests/support/stub_server.py and
tests/support/sse_stub.py: a real engine cannot send a negative chunk size, drip its
/tokenize, or serve two models on demand.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.paths import REPO
from tests.support.sessions import verdict_exit
from tests.support.sse_stub import SseStub, sse, whole
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


def _db_sound(db: Path) -> None:
    """The database passes SQLite's integrity check and holds no session still marked running."""
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        running = con.execute("SELECT id FROM sessions WHERE status = 'running'").fetchall()
    finally:
        con.close()
    assert running == [], running


def _one_line(stderr: str) -> str:
    lines = [x for x in stderr.strip().splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def _observatory(*args: str, env: dict[str, str] | None = None, code: str | None = None,
                 timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The CLI in a subprocess, outside pytest (where unexpected errors re-raise on purpose)."""
    full = {k: v for k, v in os.environ.items() if k != "OBSERVATORY_RAISE_ERRORS"}
    full["PYTHONPATH"] = str(REPO)
    full.update(env or {})
    prog = code or "from observatory.cli import cli\ncli()\n"
    return subprocess.run([sys.executable, "-c", prog, *args], capture_output=True, text=True, env=full,
                          timeout=timeout, cwd=REPO)


# -- item 4: deadlines that hold everywhere ---------------------------------------------------------

def _bad_chunk(size: bytes) -> object:
    def script(req: dict[str, object]) -> list[bytes]:
        return [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + size + b"\r\n" + b"data: {}\n\n" * 4 + b"\r\n"]
    return script


@pytest.mark.parametrize("size", [b"-5", b"-1", b"+5", b"1_0", b"zz"], ids=["neg5", "neg1", "plus", "underscore", "hex"])
def test_a_garbage_chunk_size_fails_the_request_and_the_gate_finishes(tmp_path: Path, size: bytes) -> None:
    """A negative chunk size moved the reader backwards over its buffer forever (2 GB RSS past the 5 s
    deadline); int(x, 16) also took "+5" and "1_0". Now the request fails as malformed at once."""
    db = tmp_path / "g.db"
    with StubServer("ok", token=5) as base, SseStub({"/v1/chat/completions": _bad_chunk(size)}) as bad:  # type: ignore[dict-item]
        t0 = time.monotonic()
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={base.url},mtp1={bad.url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(db), "--no-diffs", "--quiet", "--request-timeout", "5",
                                     "--json", str(tmp_path / "s.json"), "--report", str(tmp_path / "report")])
        took = time.monotonic() - t0
    assert r.exit_code == 2, r.output
    assert took < 60
    mtp1 = json.loads((tmp_path / "s.json").read_text())["arms"][1]
    errors = [x["error"] for x in mtp1["results"] if x.get("error")]
    assert errors and all("bad chunk size" in e for e in errors), errors
    _db_sound(db)


def test_an_event_or_chunk_that_never_ends_is_refused_not_buffered_forever() -> None:
    """An event without its blank line, and a chunk size of 2^60, were buffered until the deadline at
    whatever rate the server sent; each is refused once past its bound."""
    from observatory.client.sse import MAX_EVENT_BYTES, EventReader, MalformedStream
    from observatory.client.wire import WireError, chunk_size

    reader = EventReader()
    with pytest.raises(MalformedStream, match="over"):
        for _ in range(MAX_EVENT_BYTES // (1 << 20) + 2):
            reader.feed(b"data: " + b"x" * (1 << 20))
    with pytest.raises(WireError, match="over"):
        chunk_size(b"1000000000000000")
    assert chunk_size(b"ff;ext=1") == 255  # the control: a chunk extension is still read


def test_a_garbage_content_length_fails_and_a_204_has_no_body() -> None:
    """Content-Length "-5" or "²" raised ValueError past every caller's except (an internal error); a 204
    without a length was read until the server closed (the whole deadline)."""
    import httpx

    from observatory.client.send import EngineClient

    scripts = {"/neg": lambda req: [b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nabc"],
               "/sup": lambda req: ["HTTP/1.1 200 OK\r\nContent-Length: \u00b2\r\n\r\nab".encode("latin-1")],
               "/status": lambda req: [b"HTTP/1.1 2\xb200 OK\r\nContent-Length: 0\r\n\r\n"],
               "/empty": lambda req: [b"HTTP/1.1 204 No Content\r\n\r\n"]}
    with SseStub(scripts) as stub:  # type: ignore[arg-type]
        client = EngineClient(stub.url, timeout=5)
        for path in ("/neg", "/sup", "/status"):
            with pytest.raises(httpx.ReadError):
                client.fetch(path, 5, {})
        t0 = time.monotonic()
        assert client.fetch("/empty", 5, {}).status_code == 204
        assert time.monotonic() - t0 < 2
        client.close()


def _completion_stream(req: dict[str, object]) -> list[bytes]:
    chunk = {"id": "c", "object": "text_completion", "created": 0, "model": "stub-model",
             "choices": [{"index": 0, "text": "ok", "finish_reason": None,
                          "logprobs": {"tokens": ["token_id:5"], "token_logprobs": [0.0],
                                       "top_logprobs": [{"token_id:5": 0.0}], "text_offset": [0]}}]}
    end = {"id": "c", "object": "text_completion", "created": 0, "model": "stub-model",
           "choices": [{"index": 0, "text": "", "finish_reason": "stop", "logprobs": None}]}
    usage = {"id": "c", "object": "text_completion", "created": 0, "model": "stub-model", "choices": [],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return whole(sse([chunk, end, usage]), ctype="text/event-stream")


COMPLETION_PROBES = '''
[[probe]]
name = "one"
category = "prose_en"
prompt = "Say something."
max_tokens = 8
'''


def test_dripping_tokenize_and_detokenize_end_at_the_request_deadline(tmp_path: Path) -> None:
    """/tokenize and /detokenize dripping a byte every 0.2 s kept an arm alive forever (httpx's timeout is
    per read, and every token was detokenised alone after the batch call failed). Now the request's
    deadline bounds them: the arm is hung within --request-timeout, the gate finishes."""
    suite = tmp_path / "c.toml"
    suite.write_text(COMPLETION_PROBES)
    db = tmp_path / "d.db"
    scripts = {"/v1/completions": _completion_stream, "/tokenize": "drip", "/detokenize": "drip"}
    with SseStub(scripts) as stub:  # type: ignore[arg-type]
        t0 = time.monotonic()
        r = CliRunner().invoke(cli, ["gate", "--arms", f"base={stub.url}", "--suite", str(suite), "--db", str(db),
                                     "--no-diffs", "--quiet", "--request-timeout", "3",
                                     "--json", str(tmp_path / "s.json"), "--report", str(tmp_path / "report")])
        took = time.monotonic() - t0
    assert r.exit_code == 2, r.output
    assert took < 45, took
    base = json.loads((tmp_path / "s.json").read_text())["arms"][0]
    assert base["status"] == "hung" and "request timeout" in base["reason"], base["reason"]
    _db_sound(db)


def test_a_catastrophic_expect_regex_is_bounded_in_time(tmp_path: Path) -> None:
    """`(x+x+)+y` on 28 characters of output took 44 s in re, doubling per character: the regex module
    sees that no 'y' is there and fails it at once. `(x|xx)+y` backtracks exponentially even there; its
    timeout bounds it: not judged (WARN offline, UNJUDGED in a session), within a few seconds.
    The controls: ordinary patterns on the same output are still judged."""
    f = tmp_path / "in.jsonl"
    lines = [{"text": "x" * 40, "expect": {"regex": "(x|xx)+y"}}, {"text": "x" * 28, "expect": {"regex": "x+"}},
             {"text": "x" * 28, "expect": {"regex": "(x+x+)+y"}}]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    t0 = time.monotonic()
    r = CliRunner().invoke(cli, ["gates", "check", "expect", "--input", str(f)])
    took = time.monotonic() - t0
    assert r.exit_code == 0, r.output
    assert took < 10, took
    out = [json.loads(x) for x in r.output.splitlines()]
    assert out[0]["verdict"] == "WARN" and "not judged" in out[0]["not_judged"]
    assert [o["verdict"] for o in out[1:]] == ["PASS", "FAIL"]


def test_a_regex_that_cannot_finish_is_unjudged_in_a_session() -> None:
    """The judge stores a gate's 'not judged' as UNJUDGED (never PASS or WARN), which makes the session
    INVALID (docs/design.md 3.3)."""
    from types import SimpleNamespace

    from observatory.judge.apply_gates import UNJUDGED, _row
    from observatory.model.gates import default_registry
    from observatory.model.probes import Probe

    g = default_registry().get("expect")
    probe = Probe(name="p", category="prose_en", prompt="", expect={"regex": "(x|xx)+y"})
    from observatory.model.gates import Output

    res = g.check(Output(text="x" * 40), probe)
    row = _row(SimpleNamespace(id=1), g, res, None, 1)  # type: ignore[arg-type]
    assert row.verdict == UNJUDGED
    ok = g.check(Output(text="xy"), probe)
    assert _row(SimpleNamespace(id=1), g, ok, None, 1).verdict == "PASS"  # type: ignore[arg-type]


def test_judges_see_a_bounded_output() -> None:
    from types import SimpleNamespace

    from observatory.judge.apply_gates import to_output
    from observatory.model.gates import MAX_JUDGED_CHARS

    r = SimpleNamespace(text="a" * (MAX_JUDGED_CHARS * 3), token_ids=[], top_logprobs=[], token_texts=None,
                        finish_reason="stop", tool_calls=None, content="b" * (MAX_JUDGED_CHARS + 1), reasoning=None)
    out = to_output(r)  # type: ignore[arg-type]
    assert len(out.text) == MAX_JUDGED_CHARS and len(out.content or "") == MAX_JUDGED_CHARS


def test_a_400kb_version_does_not_stall_the_terminal(tmp_path: Path) -> None:
    """A 400 kB /version went through rich's highlighter whole and stalled the gate (over 150 s) unless
    --quiet. Server strings are cut before they are printed."""
    db = tmp_path / "v.db"
    with StubServer("ok", token=5, version="v" * 400_000) as base, StubServer("ok", token=5) as spec:
        t0 = time.monotonic()
        r = _observatory("gate", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", tiny_suite(tmp_path),
                         "--db", str(db), "--no-diffs", "--report", str(tmp_path / "report"), timeout=200)
        took = time.monotonic() - t0
    assert r.returncode in (0, 1, 2), r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert took < 90, took
    assert "v" * 301 not in "".join((r.stderr + r.stdout).split())  # cut to 300 characters, wherever rich wraps
    _db_sound(db)


# -- item 5: storage that fails mid-session, internal errors -----------------------------------------

_LIMITED = '''
import sys
import observatory.store.db as d
_orig = d._sqlite_pragmas
def _limited(conn, record):
    _orig(conn, record)
    conn.execute("PRAGMA max_page_count={pages}")
d._sqlite_pragmas = _limited
from observatory.cli import cli
cli()
'''


def _pages(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("PRAGMA page_count").fetchone()[0])
    finally:
        con.close()


def test_a_database_that_fills_mid_session_fails_cleanly_and_resumes(tmp_path: Path) -> None:
    """A full database (SQLite's own "database or disk is full", here from PRAGMA max_page_count on the
    observatory's connections) ended in an internal error, exit 2, with the session left running. Now:
    one line, exit 5, the session interrupted with the reason, the database intact, and
    `compare --resume` goes on once there is room."""
    db = tmp_path / "full.db"
    suite = tiny_suite(tmp_path)
    with StubServer("ok", token=5) as base, StubServer("ok", token=5) as spec:
        arms = f"base={base.url},mtp1={spec.url}"
        first = _observatory("compare", "--arms", arms, "--suite", suite, "--db", str(db), "--no-diffs", "--quiet")
        assert first.returncode == verdict_exit(db, 1), first.stderr
        room = _pages(db) + 2  # a little room: the next session's first rows fit, its results do not
        full = _observatory("compare", "--arms", arms, "--suite", suite, "--db", str(db), "--no-diffs", "--quiet",
                            code=_LIMITED.format(pages=room))
        assert full.returncode == 5, full.stderr
        line = _one_line(full.stderr)
        assert "database or disk is full" in line and "--resume 2" in line, line
        _db_sound(db)
        con = sqlite3.connect(db)
        status, reason = con.execute("SELECT status, reason FROM sessions WHERE id = 2").fetchone()
        con.close()
        assert status == "interrupted" and "storage failed" in reason, (status, reason)
        resumed = _observatory("compare", "--resume", "2", "--db", str(db), "--quiet")
    assert resumed.returncode == verdict_exit(db, 2), resumed.stderr
    _db_sound(db)
    con = sqlite3.connect(db)
    assert con.execute("SELECT status FROM sessions WHERE id = 2").fetchone()[0] == "complete"
    con.close()


def _hold_lock_once_running(db: Path, proc: subprocess.Popen[str], hold_s: float | None) -> None:
    """Take SQLite's write lock as soon as session 1 runs; hold it HOLD_S seconds (None: until PROC ends)."""
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up and proc.poll() is None:
        try:
            con = sqlite3.connect(db, timeout=0.1)
            row = con.execute("SELECT status FROM sessions WHERE id = 1").fetchone()
        except sqlite3.OperationalError:
            row = None
        else:
            if row is not None and row[0] == "running":
                con.execute("BEGIN IMMEDIATE")
                end = time.monotonic() + (hold_s if hold_s is not None else 300)
                while time.monotonic() < end and proc.poll() is None:
                    time.sleep(0.05)
                con.rollback()
                con.close()
                return
            con.close()
        time.sleep(0.02)
    raise AssertionError("session 1 never ran")


def _compare_popen(db: Path, arms: str, suite: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "OBSERVATORY_RAISE_ERRORS"}
    env.update(PYTHONPATH=str(REPO), OBSERVATORY_SQLITE_BUSY_MS="300")
    return subprocess.Popen([sys.executable, "-m", "observatory", "compare", "--arms", arms, "--suite", suite,
                             "--db", str(db), "--no-diffs", "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)


def test_a_lock_held_past_the_busy_timeout_is_retried(tmp_path: Path) -> None:
    """Another writer holding the database for 2 s, past the 0.3 s busy timeout: the write is retried and
    the session completes (the control for the case below)."""
    db = tmp_path / "l.db"
    with StubServer("ok", token=5, delay_s=0.3) as base, StubServer("ok", token=5, delay_s=0.3) as spec:
        proc = _compare_popen(db, f"base={base.url},mtp1={spec.url}", tiny_suite(tmp_path))
        _hold_lock_once_running(db, proc, 2.0)
        _, stderr = proc.communicate(timeout=240)
    assert proc.returncode == verdict_exit(db), stderr
    _db_sound(db)


def test_a_lock_held_for_good_fails_cleanly_and_marks_the_session(tmp_path: Path) -> None:
    """Held past every retry (the writes fail at about 4 s), then released at 12 s: one line, exit 5, the
    session marked interrupted once the lock is gone, the database intact, and --resume completes it."""
    db = tmp_path / "l.db"
    with StubServer("ok", token=5, delay_s=0.3) as base, StubServer("ok", token=5, delay_s=0.3) as spec:
        proc = _compare_popen(db, f"base={base.url},mtp1={spec.url}", tiny_suite(tmp_path))
        _hold_lock_once_running(db, proc, 12.0)
        _, stderr = proc.communicate(timeout=240)
        assert proc.returncode == 5, stderr
        line = _one_line(stderr)
        assert "locked" in line and "stored as interrupted" in line and "--resume 1" in line, line
        _db_sound(db)
        resumed = _observatory("compare", "--resume", "1", "--db", str(db), "--quiet")
    shown = json.loads(_observatory("show", "1", "--db", str(db), "--json").stdout)
    assert shown["session"]["status"] == "complete"
    # compare exits as gate does: the stub speculates nothing provable, so the completed session is INVALID (2)
    assert resumed.returncode == shown["verdict"]["exit_code"], resumed.stderr
    _db_sound(db)


# -- item 6: hostile files ------------------------------------------------------------------------

def _hostile_files(tmp_path: Path) -> dict[str, str]:
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    deep_tables = tmp_path / "deep-tables.toml"
    deep_tables.write_text("x = " + "{ a = " * 3000 + "1" + " }" * 3000 + "\n")
    directory = tmp_path / "x.toml"
    directory.mkdir()
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    unreadable = tmp_path / "unreadable.toml"
    unreadable.write_text('[arms.a]\nspeculative_config = { method = "mtp", num_speculative_tokens = 1 }\n')
    unreadable.chmod(0)  # root reads it anyway: the permission bits are checked explicitly
    return {"deep": str(deep), "deep-tables": str(deep_tables), "dev-zero": "/dev/zero", "directory": str(directory),
            "fifo": str(fifo), "unreadable": str(unreadable)}


@pytest.mark.parametrize("kind", ["deep", "deep-tables", "dev-zero", "directory", "fifo", "unreadable"])
@pytest.mark.parametrize("option", ["--arms-file", "--suite"])
def test_hostile_arms_and_probe_files_are_one_line_exit_3(tmp_path: Path, kind: str, option: str) -> None:
    """Files nested 3,000 deep (RecursionError), /dev/zero (read forever), a directory named x.toml, a FIFO
    (blocks) and an unreadable file: each is one line and exit 3, before any database is made."""
    path = _hostile_files(tmp_path)[kind]
    db = tmp_path / "h.db"
    with StubServer("ok") as s:
        args = ["compare", "--arms", f"base={s.url}", "--db", str(db), "--quiet", option, path]
        if option == "--arms-file":
            args += ["--suite", tiny_suite(tmp_path)]
        r = CliRunner().invoke(cli, args)  # under pytest an internal error re-raises: exit 1, never 3
    assert r.exit_code == 3, r.output
    _one_line(r.output)
    assert not db.exists()


@pytest.mark.parametrize("kind", ["deep", "dev-zero", "directory", "fifo", "unreadable"])
def test_hostile_gates_check_input_is_one_line_exit_3(tmp_path: Path, kind: str) -> None:
    """`gates check` on JSONL nested 100,000 deep (RecursionError in json), /dev/zero, a directory, a FIFO,
    an unreadable file: one line, exit 3."""
    files = _hostile_files(tmp_path)
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "a", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    files["deep"] = str(deep)
    r = CliRunner().invoke(cli, ["gates", "check", "degeneracy", "--input", files[kind]])
    assert r.exit_code == 3, r.output
    _one_line(r.output)


def test_gates_check_control_still_reads_files_and_stdin(tmp_path: Path) -> None:
    f = tmp_path / "ok.jsonl"
    f.write_text('{"text": "' + "5, " * 30 + '"}\n')
    for args, stdin in ((["--input", str(f)], None), (["--input", "-"], f.read_text())):
        r = subprocess.run([sys.executable, "-m", "observatory", "gates", "check", "degeneracy", *args],
                           input=stdin, capture_output=True, text=True, cwd=REPO, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["verdict"] == "FAIL"


def test_arm_names_longer_than_stored_are_refused(tmp_path: Path) -> None:
    """Two arm names of 300 characters were cut to the same stored name (the arms collided). Names longer
    than ArmRow.name holds are refused with one line; the longest that fits is stored whole."""
    from observatory.model.arms import MAX_NAME
    from observatory.store.db import ArmRow

    assert ArmRow.__table__.c.name.type.length == MAX_NAME
    db = tmp_path / "n.db"
    with StubServer("ok", token=5) as s:
        long_a, long_b = "a" * 299 + "x", "a" * 299 + "y"
        r = _observatory("compare", "--arms", f"{long_a}={s.url},{long_b}={s.url}", "--suite", tiny_suite(tmp_path),
                         "--db", str(db), "--quiet", timeout=60)
        assert r.returncode == 3, r.stderr
        assert "300 characters" in _one_line(r.stderr)
        assert not db.exists()
        arms_file = tmp_path / "arms.toml"
        arms_file.write_text(f'[arms.{"b" * 300}]\nspeculative_config = {{ method = "mtp", num_speculative_tokens = 1 }}\n')
        r = _observatory("compare", "--arms", "b" * 300, "--arms-file", str(arms_file), "--suite", tiny_suite(tmp_path),
                         "--db", str(db), "--quiet", timeout=60)
        assert r.returncode == 3, r.stderr
        _one_line(r.stderr)
        fits = "c" * MAX_NAME
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url},{fits}={s.url}", "--suite", tiny_suite(tmp_path),
                                     "--db", str(db), "--quiet", "--no-diffs"])
    assert r.exit_code in (0, 2), r.output
    con = sqlite3.connect(db)
    assert [n for (n,) in con.execute("SELECT name FROM arms ORDER BY position")] == ["base", fits]
    con.close()
    _db_sound(db)


# -- item 7: comparisons across what differs ---------------------------------------------------------

@pytest.mark.parametrize("arms", ["base=http://127.0.0.1:9,mtp1=http://127.0.0.1:9",
                                  "base=http://127.0.0.1:,mtp1=http://127.0.0.1:",
                                  "base=http://127.0.0.1:99999"], ids=["nothing-listening", "empty-port", "bad-port"])
@pytest.mark.parametrize("command", ["compare", "gate"])
def test_url_arms_nobody_answers_are_one_line_exit_3_before_any_session(tmp_path: Path, arms: str,
                                                                        command: str) -> None:
    """README: an unreachable server is one line and exit 3, found before any arm launches. Nothing
    listening, or an empty port, stored a session and exited 2."""
    db = tmp_path / "u.db"
    extra = ["--report", str(tmp_path / "r")] if command == "gate" else []
    r = CliRunner().invoke(cli, [command, "--arms", arms, "--suite", tiny_suite(tmp_path), "--db", str(db), "--quiet",
                                 *extra])
    assert r.exit_code == 3, r.output
    _one_line(r.output)
    assert not db.exists()


def test_history_never_draws_one_trend_across_two_models(tmp_path: Path) -> None:
    """Two nights against URL arms serving different models: both sessions' model is "(served by the URL
    arms)", so history drew one trend and compared them. Points are keyed by the model each arm served:
    two series, nothing compared across them; --model selects one."""
    db = tmp_path / "h.db"
    suite = tiny_suite(tmp_path)
    for model in ("model-a", "model-b"):
        with StubServer("ok", token=5, model=model) as base, StubServer("ok", token=5, model=model) as spec:
            r = CliRunner().invoke(cli, ["compare", "--arms", f"base={base.url},mtp1={spec.url}", "--suite", suite,
                                         "--db", str(db), "--quiet", "--no-diffs"])
            assert r.exit_code in (0, 2), r.output
    r = CliRunner().invoke(cli, ["history", "--db", str(db), "--json", "--out", str(tmp_path / "hist")])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert sorted({p["model"] for p in data["points"]}) == ["model-a", "model-b"]
    assert not any(a["previous"] == 1 and a["session"] == 2 for a in data["alerts"]), data["alerts"]
    later = [p for p in data["points"] if p["session"] == 2]
    assert later and all(p["model"] == "model-b" for p in later)
    # each of session 2's trusted points starts its own series: nothing before it served model-b
    assert all(p["notes"] == ["first comparable session"] for p in later if p["trusted"]), later
    assert any(p["trusted"] for p in later)
    html = (tmp_path / "hist" / "history.html").read_text()
    assert "model-a" in html and "model-b" in html
    one = CliRunner().invoke(cli, ["history", "--db", str(db), "--json", "--model", "model-a"])
    assert one.exit_code == 0, one.output
    assert {p["model"] for p in json.loads(one.output)["points"]} == {"model-a"}
    _db_sound(db)


def test_a_database_locked_from_the_start_is_exit_5_and_nothing_is_stored(tmp_path: Path) -> None:
    """Locked by another writer before the command starts, past the busy timeout and every retry: one
    line, exit 5 (a storage failure, not a setup error nor INVALID), no session stored."""
    db = tmp_path / "l.db"
    with StubServer("ok", token=5) as s:
        first = CliRunner().invoke(cli, ["compare", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path),
                                         "--db", str(db), "--quiet", "--no-diffs"])
        assert first.exit_code == 0, first.output
        con = sqlite3.connect(db)
        con.execute("BEGIN EXCLUSIVE")
        try:
            r = _observatory("compare", "--arms", f"base={s.url}", "--suite", tiny_suite(tmp_path), "--db", str(db),
                             "--quiet", env={"OBSERVATORY_SQLITE_BUSY_MS": "200"}, timeout=120)
        finally:
            con.rollback()
            con.close()
    assert r.returncode == 5, r.stderr
    assert "locked" in _one_line(r.stderr)
    _db_sound(db)
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM sessions").fetchone()[0] == 1
    con.close()


def test_a_database_that_fills_while_the_probes_are_stored_resumes(tmp_path: Path) -> None:
    """Full while the session's probes were being stored: the session is marked interrupted, and
    `--resume` stores the probes still missing (no arm ran with any) instead of refusing them as edited."""
    db = tmp_path / "p.db"
    small = tiny_suite(tmp_path)
    big = tmp_path / "big.toml"
    big.write_text("".join(f'[[probe]]\nname = "p{i}"\ncategory = "prose_en"\nmax_tokens = 8\n'
                           f'messages = [{{ role = "user", content = "{os.urandom(1500).hex()}" }}]\n\n'
                           for i in range(40)))
    with StubServer("ok", token=5) as base:
        first = _observatory("compare", "--arms", f"base={base.url}", "--suite", small, "--db", str(db),
                             "--no-diffs", "--quiet")
        assert first.returncode == 0, first.stderr
        full = _observatory("compare", "--arms", f"base={base.url}", "--suite", str(big), "--db", str(db),
                            "--no-diffs", "--quiet", code=_LIMITED.format(pages=_pages(db) + 12))
        assert full.returncode == 5, full.stderr
        assert "session 2 stored as interrupted" in _one_line(full.stderr)
        con = sqlite3.connect(db)
        stored = con.execute("SELECT count(*) FROM probes WHERE session_id = 2").fetchone()[0]
        con.close()
        assert 0 < stored < 40, stored  # cut short while storing the probes
        _db_sound(db)
        resumed = _observatory("compare", "--resume", "2", "--db", str(db), "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM probes WHERE session_id = 2").fetchone()[0] == 40
    assert con.execute("SELECT status FROM sessions WHERE id = 2").fetchone()[0] == "complete"
    con.close()
    _db_sound(db)
