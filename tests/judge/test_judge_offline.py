"""The judge reads only the store (issue 47 item 3): `observatory judge` re-judges a copy of a stored session
with the network unreachable.

The session is the H200 one on vLLM and SGLang (examples/h200-engines, 1.5 s of CPU to judge): the cross-engine
comparison reads each base's prompt ids from the store, where the session phase put them while the bases were up
(`observatory.session.prompt_tokens`). The session on three engines with eleven field channels judges offline
alike (about 25 s of CPU: run by hand, not here).
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.client.send import EngineClient
from observatory.model.probes import Probe
from observatory.report.data import build
from observatory.session.prompt_tokens import prompt_ids
from observatory.store.session_store import Store
from tests.support.paths import example_db


def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every socket connection fails (and is counted): the network is unreachable."""
    tried: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        tried.append(args[1:] or args)
        raise OSError("network unreachable (a test of issue 47 item 3)")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tried


def test_negative_control_nothing_connects(monkeypatch: pytest.MonkeyPatch) -> None:
    """The patch holds for the observatory's own HTTP client: a server it asks is not reached."""
    tried = _no_network(monkeypatch)
    with pytest.raises(OSError, match="unreachable"):
        socket.create_connection(("127.0.0.1", 9))
    assert EngineClient("http://127.0.0.1:9").health() is False
    # tokenizing over HTTP, as the judge's cross-engine module once did for the runner, is refused and counted
    probe = Probe("p", "prose_en", prompt="hello", max_tokens=4)
    assert "error" in prompt_ids("http://127.0.0.1:9", "vllm", "m", [probe])["p"]
    assert len(tried) >= 3


def test_judge_on_a_copied_database_needs_no_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = example_db("h200-engines/h200-vllm-sglang.db", tmp_path / "copy.db")
    tried = _no_network(monkeypatch)
    result = CliRunner().invoke(cli, ["judge", "1", "--db", str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "verdict: WARN (unchanged)" in result.output  # the stored verdict, judged again offline
    with Store(str(db), create=False) as store:
        cross = build(store, 1).cross_engine
    assert cross is not None and cross["pairs"][0]["summary"]["aligned"] == 10  # prompt ids read from the store
    assert tried == []
