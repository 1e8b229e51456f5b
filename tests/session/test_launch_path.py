"""One launch path: `observatory.session.launch.launch` for the runner, triage and the benchmark (issue 14 item 5).

The engine here is a STUB: a tiny Python script given as the engine
interpreter, so `engine_argv` runs it with vLLM's arguments. It stands in for
the start-up faults a real engine cannot show on demand (a port taken between
our pick and its bind, an exit before ready). What a real engine does after
it is healthy is tested by the engine tests.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from observatory.engines.server import EngineProcess, EngineSettings, EngineStartError
from observatory.model.arms import Arm
from observatory.model.probes import load_probe_file, resolve_suite
from observatory.session.launch import launch
from observatory.session.options import CompareOptions, SessionPlan
from observatory.session.runner import Runner
from observatory.store.session_store import Store
from tests.support.paths import REPO

# STUB_MODE: ok (serve /health), exit (die at once), port_taken (always), port_taken_once (first launch only)
_STUB_ENGINE = '''
import os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
mode = os.environ["STUB_MODE"]
marker = os.environ.get("STUB_MARKER", "")
if mode == "port_taken" or (mode == "port_taken_once" and not os.path.exists(marker)):
    if marker:
        open(marker, "w").close()
    print("OSError: [Errno 98] Address already in use", flush=True)
    sys.exit(1)
if mode == "exit":
    print("stub engine: giving up", flush=True)
    sys.exit(1)

class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass

port = int(sys.argv[sys.argv.index("--port") + 1])
HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def stub_engine(tmp_path: Path) -> Path:
    """An executable STUB engine 'interpreter' (see the module docstring)."""
    path = tmp_path / "stub-engine"
    path.write_text(f"#!{sys.executable}\n{_STUB_ENGINE}")
    path.chmod(0o755)
    return path


def _settings(stub: Path, mode: str, **env: str) -> EngineSettings:
    return EngineSettings(model="/m", python=str(stub), env={"STUB_MODE": mode, **env}, health_timeout_s=30)


def test_launch_waits_for_health_and_stops_the_group(stub_engine: Path, tmp_path: Path) -> None:
    """Issue 14 item 5: launch() returns a healthy engine and stops its process on exit."""
    started: list[int] = []
    with launch(Arm(name="base"), _settings(stub_engine, "ok"), None, tmp_path / "e.log",
                on_start=lambda proc, port: started.append(port)) as eng:
        assert eng.client.health()
        assert eng.argv[0] == str(stub_engine) and started == [eng.port]
        proc = eng.proc
    assert proc.exit_code() is not None


def test_a_port_taken_under_us_is_retried_by_kind(stub_engine: Path, tmp_path: Path) -> None:
    """Issue 14 item 5: the retry reads EngineStartError.kind "port_in_use", set once where the log is read."""
    starts: list[EngineProcess] = []
    settings = _settings(stub_engine, "port_taken_once", STUB_MARKER=str(tmp_path / "marker"))
    with launch(Arm(name="base"), settings, None, tmp_path / "e.log",
                on_start=lambda proc, port: starts.append(proc)) as eng:
        assert eng.client.health()
    assert len(starts) == 2


def test_an_engine_that_exits_is_not_retried(stub_engine: Path, tmp_path: Path) -> None:
    """Issue 14 item 5: any other exit is kind "exited": one launch, the error carries the log tail."""
    starts: list[int] = []
    with pytest.raises(EngineStartError) as e:
        launch(Arm(name="base"), _settings(stub_engine, "exit"), None, tmp_path / "e.log",
               on_start=lambda proc, port: starts.append(port))
    assert e.value.kind == "exited" and "giving up" in e.value.log_tail and len(starts) == 1


def _runner(stub: Path, tmp_path: Path, mode: str, waves: list[int]) -> tuple[Store, Runner]:
    probes = load_probe_file(resolve_suite(None))[:1]
    opts = CompareOptions(plan=SessionPlan(arms="base", log_dir=str(tmp_path / "logs")), arms=[Arm(name="base")],
                          settings=_settings(stub, mode), probes=probes, suite="default")
    store = Store(str(tmp_path / "r.db"), write=True)
    return store, Runner(store, opts, on_wave_done=waves.append)


def test_the_runner_launches_through_launch(stub_engine: Path, tmp_path: Path) -> None:
    """Issue 14 item 5: the runner's arm goes through launch(): its argv and pid are stored as the child
    starts, a taken port is retried (three launches), and the failure lands on the arm, not the session."""
    waves: list[int] = []
    store, runner = _runner(stub_engine, tmp_path, "port_taken", waves)
    sid = runner.run()
    (arm,) = store.arms(sid)
    assert arm.status == "failed" and "before it was ready" in (arm.reason or "")
    assert arm.launch["argv"][0] == str(stub_engine) and arm.launch["pid"]
    log = Path(arm.log_path or "").read_text()
    assert log.count("Address already in use") == 3
    assert waves == [sid]  # the command's judge is called after the wave; the runner judges nothing itself
    assert store.session(sid).status == "complete"


def test_launch_is_the_one_path() -> None:
    """Issue 14 item 5: runner, triage and bench_vs_vllm use observatory.session.launch.launch; no other module
    builds an EngineProcess, and the run does not know the judge (no import of evaluate/judge; measure
    does not import the runner)."""
    import observatory.session.runner
    import observatory.triage.experiment

    assert observatory.session.runner.launch is launch and observatory.triage.experiment.launch is launch
    sources = [*sorted((REPO / "observatory").rglob("*.py")), *sorted((REPO / "benchmarks").glob("*.py"))]
    builders = [p.name for p in sources if "EngineProcess(" in p.read_text() and p.name != "launch.py"]
    assert builders == []
    assert "from observatory.session.launch import launch" in (REPO / "benchmarks" / "bench_vs_vllm.py").read_text()

    def imports(name: str) -> set[str]:
        tree = ast.parse((REPO / "observatory" / name).read_text())
        return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | \
            {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}

    assert not imports("session/runner.py") & {"observatory.commands.evaluate", "observatory.judge.apply_gates"}
    assert "observatory.session.runner" not in imports("session/measure.py")


def test_check_alive_reads_the_error_kind_not_the_text(tmp_path: Path) -> None:
    """Issue 14 item 5: a failed request is HUNG by its kind "timeout"; an HTTP error whose text happens to
    say "Timeout" from a server that still answers /health is a per-request error (was marked HUNG)."""
    from observatory.client.answer import Response
    from observatory.client.send import EngineClient
    from observatory.session.measure import ArmCrashed, ArmRun
    from observatory.session.runner import NullReporter
    from tests.support.stub_server import StubServer

    with StubServer("ok") as server, Store(str(tmp_path / "k.db"), write=True) as store:
        run = ArmRun(Arm(name="base"), 1, store, {}, [], NullReporter(), SessionPlan(arms="base"),
                     client=EngineClient(server.url))
        try:
            run.check_alive(Response(error="HTTP 504 from /v1/completions: upstream ReadTimeout", error_kind="http"))
            with pytest.raises(ArmCrashed) as e:
                run.check_alive(Response(error="no complete response within 2 s", error_kind="timeout"))
            assert e.value.status == "hung"
        finally:
            run.client.close()  # type: ignore[union-attr]
