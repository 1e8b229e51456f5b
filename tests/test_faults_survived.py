"""Faults survived without a real engine: a server that hangs, one that sends malformed bodies (issue 7).

Both use the hand-made STUB server in tests/stub_server.py, because a real
engine cannot be made to hang or to send a broken body on demand.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from observatory.cli import cli
from stub_server import StubServer

PROBES = '''
[[probe]]
name = "one"
category = "prose_en"
messages = [{ role = "user", content = "Say something." }]
max_tokens = 8

[[probe]]
name = "two"
category = "prose_en"
messages = [{ role = "user", content = "Say something else." }]
max_tokens = 8
'''


def _suite(tmp_path: Path) -> str:
    f = tmp_path / "p.toml"
    f.write_text(PROBES)
    return str(f)


def _show(db: Path) -> dict:  # type: ignore[type-arg]
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_hanging_server_is_stored_as_hung_and_the_other_arms_run(tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    with StubServer("hang") as hang, StubServer("malformed") as bad:
        r = CliRunner().invoke(cli, [
            "compare", "--arms", f"mtp1={hang.url},mtp2={bad.url}", "--suite", _suite(tmp_path),
            "--db", str(db), "--request-timeout", "2", "--no-diffs", "--quiet",
        ])
    assert r.exit_code == 0, r.output
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
    with StubServer("hang_after:1") as s:
        r = CliRunner().invoke(cli, [
            "compare", "--arms", f"mtp1={s.url}", "--suite", _suite(tmp_path), "--db", str(db),
            "--request-timeout", "2", "--no-diffs", "--quiet",
        ])
    assert r.exit_code == 0, r.output
    arm = _show(db)["arms"][0]
    assert arm["status"] == "hung"
