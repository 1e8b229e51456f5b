"""Faults survived with the real engine (issue 7 point 2; issue 2's "bad input and faults").

- an engine that fails to start: stored as failed with its log tail;
- a port taken under us: the launch retries on another port;
- the engine SIGKILLed mid-probe: the arm is CRASHED with its log tail, the
  next arm still runs, the session is stored and reads back;
- the observatory itself SIGINTed mid-arm: servers stopped, session stored as
  interrupted, and `compare --resume` runs what is missing.

Engine flags shared by these tests: --enforce-eager (no compile, faster start).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from observatory.cli import cli
from observatory.session import launch as launch_mod
from observatory.store.db import ArmRow, ResultRow, SessionRow
from observatory.store.session_store import Store
from tests.support.child_signals import sigint_default
from tests.support.engine import requires_engine
from tests.support.sessions import passed_but_for_speed, verdict_exit

pytestmark = requires_engine
FAST = ["--engine-arg=--enforce-eager", "--quiet"]


def _show(db: Path) -> dict[str, Any]:
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    return json.loads(r.output)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_engine_that_fails_to_start(tmp_path: Path) -> None:
    db = tmp_path / "f.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "mtp1", "--db", str(db), "--log-dir", str(tmp_path),
                                 "--engine-arg=--no-such-flag", *FAST], catch_exceptions=False)
    assert r.exit_code == 2  # issue 19 item 12: no arm produced a result
    arm = _show(db)["arms"][0]
    assert arm["status"] == "failed" and "exited with status" in arm["reason"]
    assert "--no-such-flag" in arm["log_tail"]
    assert Path(arm["log_path"]).is_file()


def test_port_taken_then_engine_killed_mid_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 request: pytest.FixtureRequest) -> None:
    """The first port offered is taken; base's engine is SIGKILLed mid-probe; mtp1 still runs."""
    db = tmp_path / "k.db"
    blocker = socket.socket()
    request.addfinalizer(blocker.close)  # closed on every path, a failed setup line included
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    taken = blocker.getsockname()[1]
    real_free_port = launch_mod.free_port
    offered: list[int] = []

    def free_port(highest: int = 65535) -> int:
        port = taken if not offered else real_free_port(highest)
        offered.append(port)
        return port

    monkeypatch.setattr(launch_mod, "free_port", free_port)
    killed: dict[str, int] = {}
    store = Store(str(db))

    def killer() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            with store.tx() as s:
                arm = s.scalars(select(ArmRow).where(ArmRow.name == "base")).first()
                n = s.query(ResultRow).filter(ResultRow.mode == "stream").count() if arm else 0
                if arm is not None and arm.status == "running" and n >= 1:
                    os.killpg(arm.launch["pid"], signal.SIGKILL)
                    killed["pid"] = arm.launch["pid"]
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    try:
        r = CliRunner().invoke(cli, ["compare", "--arms", "base,mtp1", "--db", str(db),
                                     "--log-dir", str(tmp_path), *FAST], catch_exceptions=False)
    finally:
        blocker.close()
    t.join(timeout=5)
    # base crashed mid-run: nothing can be judged against it, so the session is INVALID and compare exits 2
    assert r.exit_code == verdict_exit(db) == 2, r.output
    assert offered[0] == taken and len(offered) >= 3  # base retried, then mtp1
    data = _show(db)
    base, mtp1 = data["arms"]
    assert base["launch"]["port"] != taken
    assert base["status"] == "crashed" and "mid-run" in base["reason"], base["reason"]
    assert base["log_tail"]
    assert any(v["code"] == "CRASHED" for v in base["validity"])
    assert mtp1["status"] == "ok" and mtp1["counters"]["drafts"] > 0
    assert data["session"]["status"] == "complete"
    assert not _pid_alive(killed["pid"])


def test_interrupted_observatory_stops_servers_and_resumes(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    env = {**os.environ, "OBSERVATORY_DB": str(db)}
    cmd = [sys.executable, "-m", "observatory.cli", "compare", "--arms", "base", "--log-dir", str(tmp_path), *FAST]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=sigint_default)
    store = Store(str(db))
    pid = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and pid is None:
        try:
            with store.tx() as s:
                arm = s.scalars(select(ArmRow)).first()
                if arm is not None and arm.status == "running":
                    pid = arm.launch["pid"]
        except Exception:
            pass
        time.sleep(0.2)
    assert pid is not None, proc.communicate(timeout=60)[0].decode()[-3000:]
    proc.send_signal(signal.SIGINT)
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == 130, out[-3000:]
    assert "stored as interrupted" in out
    assert not _pid_alive(pid), "the engine outlived the observatory"
    with store.tx() as s:
        sess = s.scalars(select(SessionRow)).one()
        assert sess.status == "interrupted"
        sid = sess.id
    assert _show(db)["arms"][0]["status"] == "interrupted"
    r = CliRunner().invoke(cli, ["compare", "--resume", str(sid), "--db", str(db), "--quiet"], catch_exceptions=False)
    assert passed_but_for_speed(r.exit_code, db), r.output
    data = _show(db)
    assert data["session"]["id"] == sid and data["session"]["status"] == "complete"
    assert data["arms"][0]["status"] == "ok" and len(data["arms"][0]["results"]) == len(data["probes"])
