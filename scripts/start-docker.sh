#!/usr/bin/env bash
# Start a Docker daemon for the serving-image tests (tests/real_engine/test_docker_engine.py)
# when none answers: installs Debian's docker.io and debootstrap if missing
# (as root, with apt), then runs dockerd in the background (overlay2) and
# waits for it. Does nothing where a daemon already answers; where it cannot
# start one it says so and leaves the tests to skip or fail.
set -uo pipefail
docker info >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != 0 ]; then echo "start-docker: not root; start dockerd yourself" >&2; exit 0; fi
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
nohup dockerd --storage-driver=overlay2 >/tmp/observatory-dockerd.log 2>&1 &
for _ in $(seq 60); do docker info >/dev/null 2>&1 && exit 0; sleep 1; done
echo "start-docker: dockerd did not answer in 60 s; see /tmp/observatory-dockerd.log" >&2
