"""llama.cpp's real llama-server on the bundled model (issue 17 items 1-3).

Skips, saying why, where scripts/build-llama.sh has not built llama-server.
One llama-server (base) answers the tokenizer checks; one session
``llama.cpp:base,llama.cpp:draft2,llama.cpp:ngram3`` is run once for the
module and every session test reads it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from observatory import llamacpp
from observatory.arms import parse_arms
from observatory.cli import cli
from observatory.judge import full_sequence, results_by_mode
from observatory.launch import RunningEngine, launch
from observatory.paths import DEFAULT_MODEL_DIR
from observatory.probes import load_probe_file, resolve_suite
from observatory.server import EngineSettings
from observatory.store import Store

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(llamacpp.server_binary() is None,
                       reason="llama-server not built: run `bash scripts/build-llama.sh` (setup.sh --test does)"),
]
ARMS = ["llama.cpp:base", "llama.cpp:draft2", "llama.cpp:ngram3"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A running llama-server (base arm) on the bundled model."""
    (arm,) = parse_arms("llama.cpp:base")
    settings = EngineSettings(model=str(DEFAULT_MODEL_DIR), max_model_len=1024, health_timeout_s=180)
    log = tmp_path_factory.mktemp("llama") / "server.log"
    with launch(arm, settings, None, log) as engine:
        yield engine


def _hf_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(DEFAULT_MODEL_DIR))


def _prompt_text(tok: Any, probe: Any) -> str:
    """The text our model sees for PROBE: the chat template applied as vLLM applies it."""
    if probe.kind != "chat":
        return str(probe.prompt)
    return str(tok.apply_chat_template(probe.messages, tools=probe.tools, tokenize=False,
                                       add_generation_prompt=True))


def test_llama_tokenizer_gives_our_ids_on_every_probe(server: RunningEngine) -> None:
    """Issue 17 item 2: llama.cpp's /tokenize gives the HF tokenizer's ids on every default probe."""
    tok = _hf_tokenizer()
    probes = load_probe_file(resolve_suite("default"))
    for probe in probes:
        text = _prompt_text(tok, probe)
        ours = tok(text, add_special_tokens=False)["input_ids"]
        r = httpx.post(f"{server.url}/tokenize", json={"content": text, "add_special": False, "parse_special": True})
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == ours, probe.name


def test_llama_chat_template_renders_our_prompts(server: RunningEngine) -> None:
    """Issue 17 item 2: the GGUF's chat template (--jinja) renders every chat probe as transformers does,
    tool probes included (llama.cpp's jinja refused our tojson(sort_keys=true) with a 400; the export
    rewrites it: llamacpp_gguf.llama_chat_template)."""
    tok = _hf_tokenizer()
    rendered = 0
    for probe in load_probe_file(resolve_suite("default")):
        if probe.kind != "chat":
            continue
        body: dict[str, Any] = {"messages": probe.messages}
        if probe.tools is not None:
            body["tools"] = probe.tools
        r = httpx.post(f"{server.url}/apply-template", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["prompt"] == _prompt_text(tok, probe), probe.name
        rendered += probe.tools is not None
    assert rendered == 3  # the three tool probes


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real llama.cpp session, base + draft + n-gram; `show --json` of it."""
    d = tmp_path_factory.mktemp("llama-session")
    db = d / "runs.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", ",".join(ARMS), "--db", str(db), "--log-dir", str(d / "logs"),
                                 "--quiet"], catch_exceptions=False)
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    data: dict[str, Any] = json.loads(shown.output)
    data["_exit"], data["_output"], data["_db"] = r.exit_code, r.output, str(db)
    return data


def _arm(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in data["arms"] if a["name"] == name)


def test_llama_session_stores_every_arm_with_ids(session: dict[str, Any]) -> None:
    """Issue 17 item 3: each arm launched llama-server, every probe judged and stored with token ids."""
    probes = [p.name for p in load_probe_file(resolve_suite("default"))]
    assert [a["name"] for a in session["arms"]] == ARMS, session["_output"]
    for a in session["arms"]:
        assert a["status"] == "ok", (a["name"], a["reason"], a["log_tail"])
        assert Path(a["launch"]["argv"][0]).name == "llama-server"
        assert a["engine_version"], a["name"]  # /props build_info
        assert [r["probe"] for r in a["results"]] == probes
        for r in a["results"]:
            assert r["ok"], (a["name"], r["probe"], r["error"])
            assert r["token_ids"] and all(isinstance(t, int) for t in r["token_ids"])
            assert r["verdicts"], (a["name"], r["probe"])


def test_llama_arms_pass_the_tool_probes(session: dict[str, Any]) -> None:
    """Issue 17 item 2: llama-server parses our model's hermes calls (<tool_call>...</tool_call>) into
    tool_calls, and every llama.cpp arm passes the tool probes' gates."""
    for a in session["arms"]:
        tools = [r for r in a["results"] if r["probe"].startswith("tool-")]
        assert len(tools) == 3, a["name"]
        for r in tools:
            assert r["tool_calls"], (a["name"], r["probe"], r["text"])
            assert r["verdicts"]["tool_calls"]["verdict"] == "PASS", (a["name"], r["probe"], r["verdicts"])
            assert r["verdict"] == "PASS", (a["name"], r["probe"], r["verdicts"])


def test_llama_spec_arms_emit_base_text(session: dict[str, Any]) -> None:
    """Greedy speculation on llama.cpp emits llama.cpp base's text on every probe it answered."""
    base = {r["probe"]: r["text"] for r in _arm(session, "llama.cpp:base")["results"]}
    for name in ARMS[1:]:
        for r in _arm(session, name)["results"]:
            if r["ok"]:
                assert r["text"] == base[r["probe"]], (name, r["probe"])


def test_llama_spec_arms_are_token_identical_to_base(session: dict[str, Any]) -> None:
    """Issue 17 item 1: greedy speculation on llama.cpp emits llama.cpp base's tokens.

    Compared on each arm's diff reference (judge.full_sequence): llama-server
    streams no ids for tokens accepted from a draft, so a spec arm's reference
    is its non-streamed result. The token_diff verdicts say the same.
    """
    with Store(session["_db"]) as store:
        arms = {a.name: a for a in store.arms(session["session"]["id"])}
        probes = {p.id: p.name for p in store.probes(session["session"]["id"])}
        seqs = {name: {probes[pid]: full_sequence(results_by_mode(store, a.id), pid) for pid in probes}
                for name, a in arms.items()}
    base = seqs["llama.cpp:base"]
    compared = 0
    for name in ARMS[1:]:
        verdicts = {r["probe"]: r["verdicts"] for r in _arm(session, name)["results"]}
        for probe, ref in base.items():
            if ref is None:
                continue
            mine = seqs[name][probe]
            assert mine is not None and mine.token_ids == ref.token_ids, (name, probe)
            assert verdicts[probe]["token_diff"]["verdict"] == "PASS", (name, probe, verdicts[probe]["token_diff"])
            compared += 1
    assert compared == len(ARMS[1:]) * 10, compared  # every default probe, tool probes included


def test_llama_acceptance_comes_from_its_own_counters(session: dict[str, Any]) -> None:
    """Drafted and accepted from llamacpp:spec_decode_* (/metrics); base drafted nothing."""
    for name in ARMS[1:]:
        c = _arm(session, name)["counters"]
        assert c["drafts"] and c["draft_tokens"] and c["accepted"] is not None, (name, c)
        assert 0 <= c["accepted"] <= c["draft_tokens"]
    base = _arm(session, "llama.cpp:base")["counters"]
    assert not base.get("drafts"), base
