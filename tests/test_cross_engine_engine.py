"""One real session across engines (issue 17 item 4): vLLM's CPU engine and llama.cpp's llama-server on the
bundled model, ``vllm:base,llama.cpp:base,llama.cpp:draft2``.

Skips, saying why, where scripts/build-llama.sh has not built llama-server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from observatory import llamacpp
from observatory.cli import cli
from observatory.probes import load_probe_file, resolve_suite

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(llamacpp.server_binary() is None,
                       reason="llama-server not built: run `bash scripts/build-llama.sh` (setup.sh --llama)"),
]
ARMS = ["base", "llama.cpp:base", "llama.cpp:draft2"]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The session's `show --json`, its exit code, and its rendered report."""
    d = tmp_path_factory.mktemp("cross-engine")
    db = d / "runs.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "vllm:base,llama.cpp:base,llama.cpp:draft2", "--db", str(db),
                                 "--log-dir", str(d / "logs"), "--quiet"], catch_exceptions=False)
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    rep = CliRunner().invoke(cli, ["report", "--db", str(db), "--out", str(d / "report")], catch_exceptions=False)
    data: dict[str, Any] = json.loads(shown.output)
    data["_output"], data["_report"] = r.output + rep.output, (d / "report" / "index.html").read_text()
    return data


def test_each_engine_judged_against_its_own_base(session: dict[str, Any]) -> None:
    """Both bases are bases; llama.cpp's draft arm is diffed against llama.cpp's base (token-identical)."""
    arms = {a["name"]: a for a in session["arms"]}
    assert list(arms) == ARMS, session["_output"]
    assert all(a["status"] == "ok" for a in arms.values()), [(a["name"], a["reason"]) for a in arms.values()]
    assert arms["base"]["role"] == "base" and arms["llama.cpp:base"]["role"] == "base"
    assert not any("token_diff" in r["verdicts"] for r in arms["llama.cpp:base"]["results"])
    for r in arms["llama.cpp:draft2"]["results"]:
        assert r["verdicts"]["token_diff"]["verdict"] == "PASS", (r["probe"], r["verdicts"]["token_diff"])


def test_tokenizer_alignment_is_checked_through_both_servers(session: dict[str, Any]) -> None:
    """vLLM's /tokenize and llama.cpp's /apply-template + /tokenize give the same prompt ids on every probe
    (the GGUF carries our tokenizer and a chat template that renders as ours); each aligned probe's base
    outputs are compared, with a kind."""
    ce = session["cross_engine"]
    assert ce["bases"] == {"vllm": "base", "llama.cpp": "llama.cpp:base"}
    (pair,) = ce["pairs"]
    probes = [p.name for p in load_probe_file(resolve_suite("default"))]
    assert [row["probe"] for row in pair["probes"]] == probes
    for row in pair["probes"]:
        al = row["alignment"]
        assert al["status"] == "aligned", (row["probe"], al)
        assert al["prompt_tokens"][0] == al["prompt_tokens"][1] and al["prompt_tokens"][0] > 10
        assert row["output"]["kind"] in ("identical", "near_tie", "diverged", "base_not_greedy"), row
    s = pair["summary"]
    assert s["aligned"] == len(probes) == s["identical"] + s["near_tie"] + s["diverged"] + s["base_not_greedy"]


def test_report_shows_the_cross_engine_section(session: dict[str, Any]) -> None:
    html = session["_report"]
    assert 'id="cross-engine"' in html and "Tokenizer alignment" in html
    assert f"{len(load_probe_file(resolve_suite('default')))} of" in html and "aligned" in html
