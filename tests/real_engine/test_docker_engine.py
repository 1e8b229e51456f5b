"""The nightly gate on a real serving image: vLLM's CPU build in a local Docker image.

Needs a running Docker daemon (.ci/run starts one) and builds the image
observatory/vllm-cpu:local once with scripts/build-image.sh (a no-op when the
image of the same recipe exists; a cold build costs minutes, see the script).
One real session, `base,mtp1` in containers of the local image plus
`mtp1@TONIGHT` (another image: item 3), is run for this module; the
fault paths (crash, hang, Ctrl-C, SIGKILL of the observatory, a dead
observatory's leftovers) stop each engine while it loads, so they cost
seconds each. Every test ends with no container of ours left.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from observatory.engines.containers import OWNER_LABEL, reap_orphans
from tests.support.child_signals import sigint_default
from tests.support.paths import REPO

IMAGE = "observatory/vllm-cpu:local"
# "tonight's image": the same content under another digest (a label added), for item 3
TONIGHT = "observatory/vllm-cpu:test-tonight"



def _docker_ok() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60, check=False).returncode == 0


@pytest.fixture(scope="module")
def image() -> str:
    """The local serving image, built (or found up to date) by scripts/build-image.sh."""
    if not _docker_ok():
        if os.environ.get("CI"):
            pytest.fail("CI needs a Docker daemon: .ci/run starts one (scripts/start-docker.sh)")
        pytest.skip("no Docker daemon here (start one: dockerd &)")
    subprocess.run(["bash", str(REPO / "scripts" / "build-image.sh")], check=True, timeout=1800)
    return IMAGE


def _ours(owner_pid: int | None = None) -> list[str]:
    """Containers (running or not) labelled by an observatory (of OWNER_PID only, if given)."""
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label={OWNER_LABEL}",
                          "--format", '{{.Names}}\t{{.Label "' + OWNER_LABEL + '"}}'],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    rows = [line.split("\t") for line in out.splitlines() if line]
    return [name for name, token in rows if owner_pid is None or token.startswith(f"{owner_pid}-")]


def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.5)


def _gate(tmp: Path, *args: str) -> subprocess.Popen[str]:
    """`observatory gate` as its own process (so it can be killed like a nightly job)."""
    cmd = [sys.executable, "-m", "observatory", "gate", "--image", IMAGE, "--db", str(tmp / "runs.db"),
           "--log-dir", str(tmp / "logs"), "--report", str(tmp / "report"), "--json", str(tmp / "session.json"),
           "--quiet", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "PYTHONFAULTHANDLER": "1"}  # SIGABRT dumps every thread's stack (`_exit_or_dump`)
    return subprocess.Popen(cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=sigint_default)  # the ctrl-c case's SIGINT must not be ignored


def _exit_or_dump(proc: subprocess.Popen[str], timeout_s: float, after: str) -> str:
    """PROC's output once it exits within TIMEOUT_S; else fail with where each of its threads was stuck."""
    try:
        return proc.communicate(timeout=timeout_s)[0]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)  # faulthandler prints the stacks, then the process dies
        out = proc.communicate(timeout=60)[0]
        raise AssertionError(f"the gate did not exit within {timeout_s:.0f} s {after}; its stacks:\n{out[-12000:]}") from None


@pytest.fixture(scope="module")
def session(image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real gate session of base and mtp1, each in a container of the local image."""
    tmp = tmp_path_factory.mktemp("docker-session")
    subprocess.run(["docker", "build", "-q", "-t", TONIGHT, "-"], input=f"FROM {IMAGE}\nLABEL observatory.test=tonight\n",
                   text=True, check=True, capture_output=True, timeout=300)
    proc = _gate(tmp, "--arms", f"base,mtp1,mtp1@{TONIGHT}")
    out, _ = proc.communicate(timeout=1500)
    data: dict[str, Any] = json.loads((tmp / "session.json").read_text())
    data["_rc"], data["_out"], data["_dir"] = proc.returncode, out, tmp
    return data


def test_gate_session_runs_in_containers(session: dict[str, Any]) -> None:
    """Item 2: `gate --image IMAGE --arms base,mtp1` runs each arm as a container and passes.

    "Passes" is every correctness verdict: the speed verdict is the host's (on
    the 2-core CI host S of a tiny model's mtp1 has read 0.68 to 1.08 between
    sessions of the same code, benchmarks/README.md, "Speed on a shared host"), so a FAIL of
    the speedup check alone is allowed here; speed targets live in benchmarks/.
    """
    fails = [r for r in session["verdict"]["reasons"] if r["level"] in ("FAIL", "INVALID")]
    assert session["_rc"] == 0 or (session["_rc"] == 1 and fails and all(r["gate"] == "speedup" for r in fails)), \
        session["_out"]
    assert all(a["speed"] for a in session["arms"] if a["is_spec"]), "speed was not measured"
    arms = {a["name"]: a for a in session["arms"]}
    assert list(arms) == ["base", "mtp1", f"mtp1@{TONIGHT}"]
    for a in arms.values():
        argv = a["launch"]["argv"]
        assert argv[:2] == ["docker", "run"] and "--gpus" not in argv  # a CPU host
        assert a["status"] == "ok" and not [v for v in a["validity"] if v["code"] == "CONFOUNDED"], a["validity"]
    assert IMAGE in arms["mtp1"]["launch"]["argv"] and TONIGHT in arms[f"mtp1@{TONIGHT}"]["launch"]["argv"]
    assert arms["mtp1"]["acceptance"]["drafts"] > 0  # speculation ran inside the container


def test_image_against_image_in_one_session(session: dict[str, Any]) -> None:
    """Item 3: an arm of another image, asked for, is compared (token ids, acceptance, speedup), not CONFOUNDED."""
    arms = {a["name"]: a for a in session["arms"]}
    tonight, last = arms[f"mtp1@{TONIGHT}"], arms["mtp1"]
    assert tonight["launch"]["image"]["asked"] is True and last["launch"]["image"]["asked"] is False
    assert tonight["launch"]["image"]["digest"] != last["launch"]["image"]["digest"]
    assert tonight["acceptance"]["drafts"] > 0 and tonight.get("vs_base")  # acceptance and speedup measured
    assert tonight["results"] and all("token_diff" in r["verdicts"] for r in tonight["results"])  # token ids diffed


def test_image_digest_and_engine_version_stored_and_shown(session: dict[str, Any]) -> None:
    """Item 2: the image's digest and the engine version inside it, per arm, in the JSON and the report."""
    digest = subprocess.run(["docker", "image", "inspect", IMAGE, "--format", "{{.Id}}"],
                            capture_output=True, text=True, check=True).stdout.strip()
    html = (session["_dir"] / "report" / "index.html").read_text()
    for a in session["arms"][:2]:
        img = a["launch"]["image"]
        assert img["ref"] == IMAGE and img["digest"] == digest and img["asked"] is False
    for a in session["arms"]:
        assert a["launch"]["image"]["engine_version"] == "0.32.0" and a["engine_version"].startswith("0.32.0")
    assert digest[:19] in html and "vLLM inside: 0.32.0" in html


def test_engine_logs_land_in_the_log_dir(session: dict[str, Any]) -> None:
    """Item 2: each container's output is in the arm's log file."""
    for a in session["arms"]:
        log = Path(a["log_path"]).read_text()
        assert "Starting vLLM" in log or "vLLM API server" in log, log[-2000:]


def test_no_container_outlives_a_finished_session(session: dict[str, Any]) -> None:
    """Item 2: stopped and removed on success."""
    assert _ours() == []


def test_crash_removes_the_container(image: str, tmp_path: Path) -> None:
    """Item 2: an engine that exits at start (a flag vLLM rejects) leaves no container; the gate says why."""
    arms = tmp_path / "arms.toml"
    arms.write_text('[arms.broken]\nengine_args = ["--no-such-flag"]\n')
    proc = _gate(tmp_path, "--arms", "broken", "--arms-file", str(arms))
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 2, out  # INVALID: the only arm failed to start
    assert _ours() == []


def test_hang_removes_the_container(image: str, tmp_path: Path) -> None:
    """Item 2: an engine not healthy in time is stopped and removed."""
    proc = _gate(tmp_path, "--arms", "base", "--health-timeout", "3")
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 2, out
    arm = json.loads((tmp_path / "session.json").read_text())["arms"][0]
    assert arm["status"] == "hung"
    assert _ours() == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_killed_observatory_leaves_no_container(image: str, tmp_path: Path, sig: signal.Signals) -> None:
    """Item 2: Ctrl-C stops the container in order; SIGKILL of the observatory is cleaned up by its watchdog.

    The reaping is automatic: a watchdog started beside each container notices
    the dead observatory within a second and removes the container (no later
    run of the observatory is needed).
    """
    proc = _gate(tmp_path, "--arms", "base,mtp1")
    try:
        _wait_for(lambda: _running(proc.pid), 300, "the observatory's first container to run")
    finally:
        proc.send_signal(sig)
    out = _exit_or_dump(proc, 120, f"after {sig.name}")  # one CI run timed out here once; this says where, if again
    # Interrupted, not finished: an ignored SIGINT once let the gate run to its end here, and pass by luck.
    if sig == signal.SIGINT:
        assert "session interrupted" in out, out[-4000:]
    else:
        assert proc.returncode == -signal.SIGKILL
    _wait_for(lambda: not _ours(proc.pid), 30, "the container of the killed observatory to be removed")


def _running(owner_pid: int) -> bool:
    out = subprocess.run(["docker", "ps", "--filter", f"label={OWNER_LABEL}", "--filter", "status=running",
                          "--format", '{{.Label "' + OWNER_LABEL + '"}}'],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return any(t.startswith(f"{owner_pid}-") for t in out.split())


def test_leftovers_of_a_dead_observatory_are_reaped(image: str) -> None:
    """Item 2: a container whose owner is gone (its watchdog killed too) is removed at the next launch."""
    name = "observatory-test-orphan"
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--label", f"{OWNER_LABEL}=1-0",
                    "--entrypoint", "sleep", image, "300"], check=True, capture_output=True, timeout=60)
    assert name in _ours()
    assert name in reap_orphans()
    assert name not in _ours()
