"""free_port picks below the kernel's ephemeral range, so a bind to port 0 elsewhere cannot take an engine's port
between the pick and the engine's own bind (a CI flake of 2026-12-06: a stub server answered /health for a spec
arm whose engine then died at its bind)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from observatory.engines import server


def test_the_port_is_below_the_ephemeral_range_and_bindable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = tmp_path / "range"
    rng.write_text("32768\t60999\n")
    monkeypatch.setattr(server, "EPHEMERAL_RANGE", rng)
    for _ in range(20):
        port = server.free_port()
        assert server.LOWEST_PICKED <= port < 32768
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))
    assert server.free_port(12000) <= 12000


def test_without_room_below_the_range_the_kernel_picks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = tmp_path / "range"
    rng.write_text("9000 60999\n")
    monkeypatch.setattr(server, "EPHEMERAL_RANGE", rng)
    assert server._below_ephemeral(65535) is None
    monkeypatch.setattr(server, "EPHEMERAL_RANGE", tmp_path / "absent")
    assert server._below_ephemeral(65535) is None
    assert 1024 < server.free_port() <= 65535
