"""Serving images without a Docker daemon: launch commands, ARM@IMAGE, image confound rules.

Issue "the nightly gate on real serving images", items 2 and 3. The real
containers are in tests/real_engine/test_docker_engine.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from observatory.engines.arm_engines import parse_arms
from observatory.engines.containers import OWNER_LABEL, owner_alive, owner_token, spawn_watchdog
from observatory.engines.images import image_comparison, image_differences, split_docker_argv
from observatory.engines.server import EngineSettings, engine_argv, engine_env
from observatory.judge.figures import launch_differences
from observatory.model.errors import ArmError
from observatory.store.db import ArmRow

IMG_A, IMG_B = "observatory/vllm-cpu:local", "observatory/vllm-cpu:nightly-2"


def _docker_argv(arm_spec: str, model: str = "/m", gpus: list[int] | None = None, **kw: Any) -> list[str]:
    (arm,) = parse_arms(arm_spec)
    settings = EngineSettings(model=model, python="/py", **kw)
    return engine_argv(arm, settings, 8000, engine_env(arm, settings), gpus, "observatory-1-x-8000")


def test_cpu_host_gets_no_gpus_flag() -> None:
    """Item 2: GPUs only where the host has them: no --gpus on a CPU host (gpus None), device list otherwise."""
    head, image, _ = split_docker_argv(_docker_argv("base", image=IMG_A))
    assert image == IMG_A and "--gpus" not in head
    head, _, _ = split_docker_argv(_docker_argv("base", gpus=[1], image=IMG_A))
    assert head[head.index("--gpus") + 1] == "device=1"


def test_container_is_labelled_with_its_owner_and_runs_an_init() -> None:
    """Item 2: every container carries its observatory's pid and start time (reaped when that process is gone)."""
    head, _, _ = split_docker_argv(_docker_argv("mtp1", image=IMG_A))
    assert f"{OWNER_LABEL}={owner_token()}" in head
    assert "--init" in head and "--rm" in head


def test_relative_model_is_mounted_read_only_at_its_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 2: the model is mounted read-only, and the engine is told the path it has inside the container."""
    (tmp_path / "model").mkdir()
    monkeypatch.chdir(tmp_path)
    head, _, tail = split_docker_argv(_docker_argv("base", model="model", image=IMG_A))
    model = str((tmp_path / "model").resolve())
    assert head[head.index("-v") + 1] == f"{model}:{model}:ro"
    assert tail[tail.index("--model") + 1] == model


def _cache_of(argv: list[str]) -> str | None:
    """The compile-cache folder a container command mounts (its VLLM_CACHE_ROOT), None for none."""
    head, _, _ = split_docker_argv(argv)
    roots = [head[i + 1].split("=", 1)[1] for i, a in enumerate(head) if a == "-e" and
             head[i + 1].startswith("VLLM_CACHE_ROOT=")]
    if not roots:
        return None
    assert f"{roots[0]}:{roots[0]}" in head  # mounted read-write at its own path
    return roots[0]


def test_containers_share_a_compile_cache_keyed_by_image_and_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29 item 7: base and spec arms of one image share vLLM's compile cache across arms and nights; a faulted
    arm or another image gets its own (a patched engine's graphs must not load into a clean arm); "off": none."""
    monkeypatch.setenv("OBSERVATORY_COMPILE_CACHE", str(tmp_path / "cc"))
    base, mtp1 = _cache_of(_docker_argv("base", image=IMG_A)), _cache_of(_docker_argv("mtp1", image=IMG_A))
    assert base is not None and base == mtp1 and Path(base).is_dir() and Path(base).parent == tmp_path / "cc"
    assert _cache_of(_docker_argv("mtp1+fault=ghost", image=IMG_A)) not in (None, base)
    assert _cache_of(_docker_argv("mtp1", image=IMG_B)) not in (None, base)
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("OBSERVATORY_COMPILE_CACHE", str(tmp_path / "file" / "cc"))  # cannot be made: no cache
    assert _cache_of(_docker_argv("mtp1", image=IMG_A)) is None
    monkeypatch.setenv("OBSERVATORY_COMPILE_CACHE", "off")
    assert _cache_of(_docker_argv("mtp1", image=IMG_A)) is None
    assert "-v" not in split_docker_argv(_docker_argv("mtp1", model="/m", image=IMG_A))[0]  # /m does not exist


def test_arm_image_overrides_the_session_image() -> None:
    """Item 3: ARM@IMAGE runs that arm in its own image, others in --image."""
    arms = parse_arms(f"base@{IMG_A},mtp2@{IMG_A},mtp2@{IMG_B}")
    assert [(a.name, a.image) for a in arms] == [
        (f"base@{IMG_A}", IMG_A), (f"mtp2@{IMG_A}", IMG_A), (f"mtp2@{IMG_B}", IMG_B)]
    assert [a.copy_of for a in arms] == [None, None, None]  # two images of mtp2 are not an A/A pair
    settings = EngineSettings(model="/m", python="/py", image="other:tag")
    assert split_docker_argv(engine_argv(arms[2], settings, 8000))[1] == IMG_B
    (plain,) = parse_arms("mtp2")
    assert split_docker_argv(engine_argv(plain, settings, 8000))[1] == "other:tag"


def test_arm_image_with_digest_and_fault() -> None:
    (arm,) = parse_arms("mtp1+fault=ghost@repo/img@sha256:" + "a" * 64)
    assert arm.fault == "ghost" and arm.image == "repo/img@sha256:" + "a" * 64


def test_arms_file_image(tmp_path: Path) -> None:
    f = tmp_path / "arms.toml"
    f.write_text(f'[arms.tonight]\nspeculative_config = {{ method = "mtp", num_speculative_tokens = 2 }}\nimage = "{IMG_B}"\n')
    (arm,) = parse_arms("tonight", arms_file=f)
    assert arm.image == IMG_B


@pytest.mark.parametrize(
    ("spec", "message"),
    [("mtp1@", "not a docker image reference"), ("mtp1@Bad Image", "not a docker image reference"),
     ("mtp1@Upper/Case", "not a docker image reference")],
    ids=["empty", "spaces", "upper-case"],
)
def test_bad_arm_image(spec: str, message: str) -> None:
    with pytest.raises(ArmError, match=message):
        parse_arms(spec)


def test_split_docker_argv_leaves_direct_launches_alone() -> None:
    assert split_docker_argv(["/py", "-m", "x", "--port", "1"]) == ([], None, ["/py", "-m", "x", "--port", "1"])


# -- confound rules ------------------------------------------------------------
def _image(ref: str, digest: str | None, asked: bool) -> dict[str, Any]:
    return {"ref": ref, "digest": digest, "repo_digest": None, "engine_version": "0.32.0", "asked": asked}


def _arm(name: str, spec: dict[str, Any] | None, image: dict[str, Any] | None, port: int) -> ArmRow:
    (arm,) = parse_arms(name.split("@")[0])
    settings = EngineSettings(model="/m", python="/py", image=image["ref"] if image else None)
    argv = engine_argv(arm, settings, port, {}, None, f"observatory-1-{name.replace('@', '_').replace('/', '_').replace(':', '_')}-{port}")
    launch: dict[str, Any] = {"argv": argv, "env": {}, "speculative_config": spec}
    if image is not None:
        launch["image"] = image
    return ArmRow(name=name, launch=launch)


def test_docker_options_are_not_confounds() -> None:
    """Item 2: arms in one image differ in container name and port only: not CONFOUNDED (was: --name flagged)."""
    img = _image(IMG_A, "sha256:" + "1" * 64, asked=False)
    base = _arm("base", None, img, 8001)
    mtp = _arm("mtp1", {"method": "mtp", "num_speculative_tokens": 1}, img, 8002)
    assert launch_differences(mtp, base) == []


def test_images_asked_for_are_compared_not_confounded() -> None:
    """Item 3: mtp2@IMG_B against base@IMG_A is an image comparison the user asked for, never CONFOUNDED."""
    base = _arm(f"base@{IMG_A}", None, _image(IMG_A, "sha256:" + "1" * 64, asked=True), 8001)
    b = _arm(f"mtp2@{IMG_B}", {"method": "mtp", "num_speculative_tokens": 2},
             _image(IMG_B, "sha256:" + "2" * 64, asked=True), 8002)
    assert launch_differences(b, base) == []
    assert image_comparison(b.launch, base.launch) == f"image {IMG_B} (sha256:222222222222) vs base's {IMG_A} (sha256:111111111111)"


def test_images_not_asked_for_are_confounds() -> None:
    """Item 3: a tag that moved during the session, or an image on one arm only, is always CONFOUNDED."""
    old, new = _image(IMG_A, "sha256:" + "1" * 64, asked=False), _image(IMG_A, "sha256:" + "2" * 64, asked=False)
    assert image_differences({"image": new}, {"image": old}) == [
        f"image {IMG_A!r} changed during the session: sha256:{'1' * 64} on base, sha256:{'2' * 64} here"]
    moved_even_if_asked = {**new, "asked": True}
    assert image_differences({"image": moved_even_if_asked}, {"image": {**old, "asked": True}})
    assert image_differences({"image": old}, {}) == [f"image: no image on base, {IMG_A!r} (sha256:111111111111) here"]
    other = _image(IMG_B, "sha256:" + "3" * 64, asked=False)
    assert image_differences({"image": other}, {"image": old})  # different images nobody named on an arm
    assert image_comparison({"image": new}, {"image": old}) is None


def test_same_image_under_two_names_is_the_same_image() -> None:
    a, b = _image(IMG_A, "sha256:" + "1" * 64, asked=True), _image(IMG_B, "sha256:" + "1" * 64, asked=False)
    assert image_differences({"image": a}, {"image": b}) == [] and image_comparison({"image": a}, {"image": b}) is None


# -- owner tokens ----------------------------------------------------------------
def test_owner_token_names_a_live_process_and_not_a_reused_pid() -> None:
    """Item 2: a container's owner is the process (pid + start time): dead once it exits."""
    assert owner_alive(owner_token())
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    token = owner_token(child.pid)
    assert owner_alive(token)
    child.kill()
    child.wait()
    assert not owner_alive(token)
    pid, _, ticks = owner_token(os.getpid()).partition("-")
    assert not owner_alive(f"{pid}-{int(ticks) + 1}")  # same pid, another start time: another process
    assert not owner_alive("garbage")


@pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker client")
def test_watchdog_imports_this_package_whatever_the_owners_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 2: the watchdog must run even when the owner found observatory through its own sys.path.

    It once died at import (ModuleNotFoundError: observatory.engines.containers) when
    the installed package was another checkout, and containers outlived a
    SIGKILLed observatory. A dead owner and no such container: it must exit 0.
    """
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.chdir(tmp_path)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dog = spawn_watchdog("observatory-test-no-such-container", gone.pid, token=f"{gone.pid}-0")
    assert dog.wait(timeout=60) == 0
