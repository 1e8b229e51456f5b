"""Faults survived without a real engine: a server that hangs, one that sends malformed bodies (issue 7).

Both use the hand-made STUB server in tests/support/stub_server.py, because a real
engine cannot be made to hang or to send a broken body on demand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


def _show(db: Path) -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_hanging_server_is_stored_as_hung_and_the_other_arms_run(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with StubServer("hang") as hang, StubServer("malformed") as bad:
        r = CliRunner().invoke(cli, [
            "compare", "--arms", f"mtp1={hang.url},mtp2={bad.url}", "--suite", tiny_suite(tmp_path),
            "--db", str(db), "--request-timeout", "2", "--no-diffs", "--quiet",
        ])
    # Issue 19 item 10: no arm produced a result, so compare exits 2 (an invalid measurement), not 0.
    assert r.exit_code == 2, r.output
    assert "no arm produced a result" in r.output
    data = _show(db)
    assert data["session"]["status"] == "complete"
    hung, malformed = data["arms"]
    assert hung["status"] == "hung" and "request timeout" in hung["reason"]
    assert any(v["code"] == "HUNG" for v in hung["validity"])
    # the malformed arm ran every probe; each result carries its error
    assert malformed["status"] == "ok"
    assert [x["probe"] for x in malformed["results"]] == ["one", "two"]
    assert all(not x["ok"] and "malformed response" in x["error"] for x in malformed["results"])


def test_server_that_hangs_mid_session(tmp_path: Path) -> None:
    """The warm-up and first probe answer, then everything hangs, /health included."""
    db = tmp_path / "m.db"
    # two answers: the URL arm's preflight request (observatory.session.preflight) and the warm-up
    with StubServer("hang_after:2") as s:
        r = CliRunner().invoke(cli, [
            "compare", "--arms", f"mtp1={s.url}", "--suite", tiny_suite(tmp_path), "--db", str(db),
            "--request-timeout", "2", "--no-diffs", "--quiet",
        ])
    assert r.exit_code == 2, r.output  # only the warm-up answered: no probe result (issue 19 item 10)
    arm = _show(db)["arms"][0]
    assert arm["status"] == "hung"


def test_parallel_arms_share_one_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 9 on the CPU: with 2 (fake) GPUs, arms run two at a time in one session and say so."""
    monkeypatch.setenv("OBSERVATORY_GPU_COUNT", "2")
    db = tmp_path / "p.db"
    with StubServer("ok", delay_s=0.3) as a, StubServer("ok", delay_s=0.3) as b, StubServer("ok", delay_s=0.3) as c:
        r = CliRunner().invoke(cli, [
            "compare", "--arms", f"base={a.url},mtp1={b.url},mtp2={c.url}", "--suite", tiny_suite(tmp_path),
            "--db", str(db), "--parallel-arms", "--timing", "concurrent", "--quiet",
        ])
    assert r.exit_code == verdict_exit(db), r.output
    arms = _show(db)["arms"]
    assert [a["launch"]["wave"] for a in arms] == [0, 0, 1]
    assert [a["launch"]["gpus"] for a in arms] == [[0], [1], [0]]
    assert arms[0]["launch"]["concurrent_with"] == ["mtp1"] and arms[2]["launch"]["concurrent_with"] == []
    # the first two really overlapped in time; the third ran after them
    assert arms[0]["started_at"] <= arms[1]["finished_at"] and arms[1]["started_at"] <= arms[0]["finished_at"]
    assert arms[2]["started_at"] >= min(arms[0]["finished_at"], arms[1]["finished_at"])
    assert any(v["code"] == "CONCURRENT" for v in arms[1]["validity"])
    assert not any(v["code"] == "CONCURRENT" for v in arms[2]["validity"])
