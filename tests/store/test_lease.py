"""A running session holds a lease; --resume of a live session is refused; a killed one is abandoned
(issue 19 item 6). The killed runner is a real `observatory compare` process, against STUB servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from observatory.cli import cli
from observatory.store import lease
from observatory.store.clock import utcnow
from observatory.store.db import SessionRow
from observatory.store.session_store import Store
from tests.support.paths import REPO
from tests.support.sessions import verdict_exit
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import tiny_suite


def _session(store: Store, **lease_fields: object) -> int:
    row = store.add(SessionRow(host="h", machine={}, command=[], options={"plan": {"arms": "base"}}, suite="s",
                               status="running", **lease_fields))
    return int(row.id)


def test_live_session_cannot_be_resumed(tmp_path: Path) -> None:
    """Issue 19 item 6: resuming a session still being run duplicated an arm."""
    db = str(tmp_path / "l.db")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with Store(db) as store:
            sid = _session(store, lease_pid=sleeper.pid, lease_host=lease.holder()[1], lease_at=utcnow())
            assert store.session(sid).status == "running"
        r = CliRunner().invoke(cli, ["compare", "--resume", str(sid), "--db", db, "--quiet"])
        assert r.exit_code == 3, r.output
        assert f"Session {sid} is still running (process {sleeper.pid}" in r.output
    finally:
        sleeper.kill()
        sleeper.wait()
    with Store(db) as store:
        assert store.session(sid).status == lease.ABANDONED  # its process is gone now


def test_stale_lease_and_missing_lease_are_abandoned(tmp_path: Path) -> None:
    with Store(str(tmp_path / "l.db")) as store:
        old = utcnow().replace(year=2000)
        stale = _session(store, lease_pid=os.getpid(), lease_host=lease.holder()[1], lease_at=old)
        legacy = _session(store)
        fresh_elsewhere = _session(store, lease_pid=1, lease_host="another-host", lease_at=utcnow())
        assert store.session(stale).status == lease.ABANDONED
        assert store.session(legacy).status == lease.ABANDONED
        assert store.session(fresh_elsewhere).status == "running"


def test_lease_is_taken_once(tmp_path: Path) -> None:
    """Two takers of one abandoned session: the compare-and-set lets exactly one win."""
    with Store(str(tmp_path / "l.db")) as store:
        sid = _session(store)
        store.take_lease(sid)
        row = store.session(sid)
        assert (row.lease_pid, row.status) == (os.getpid(), "running")
        store.take_lease(sid)  # the holder itself may take it again


def test_killed_runner_shows_abandoned_and_resumes_without_duplicates(tmp_path: Path) -> None:
    """Issue 19 item 6: a runner killed with SIGKILL left its session `running` forever."""
    db = tmp_path / "k.db"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OBSERVATORY_DB": str(db)}
    with StubServer("ok", delay_s=0.5) as base, StubServer("ok", delay_s=0.5) as spec:
        arms = f"base={base.url},mtp1={spec.url}"
        proc = subprocess.Popen([sys.executable, "-m", "observatory", "compare", "--arms", arms, "--suite",
                                 tiny_suite(tmp_path), "--db", str(db), "--no-diffs", "--quiet"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and base.completions < 2:
                time.sleep(0.1)
            assert base.completions >= 2, "the runner never reached the first arm"
            with Store(str(db)) as store:
                assert store.sessions()[0].status == "running"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
        listed = CliRunner().invoke(cli, ["sessions", "--db", str(db)])
        assert "\tabandoned\t" in listed.output, listed.output
        r = CliRunner().invoke(cli, ["compare", "--resume", "1", "--db", str(db), "--quiet"])
        assert r.exit_code == verdict_exit(db), r.output
    with Store(str(db)) as store:
        arms_rows = store.arms(1)
        assert sorted((a.position, a.name) for a in arms_rows) == [(0, "base"), (1, "mtp1")]
        assert store.session(1).status == "complete"
