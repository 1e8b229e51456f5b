"""llama.cpp's real llama-server on the bundled model, alone and beside vLLM (issue 17 items 1-4).

Skips, saying why, where scripts/build-llama.sh has not built llama-server
(``setup.sh --test`` builds it). One llama-server (base) answers the
tokenizer checks; one session across engines,
``vllm:base,vllm:ngram3,llama.cpp:base,llama.cpp:draft2,llama.cpp:ngram3``,
is run once for the module (about 4 minutes on two cores) and every session
test reads it: llama.cpp's arms as arms of their own engine, and the two
engines side by side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.engines import llamacpp
from observatory.engines.arm_engines import parse_arms
from observatory.engines.settings import EngineSettings
from observatory.judge.apply_gates import full_sequence, results_by_mode
from observatory.model.paths import DEFAULT_MODEL_DIR
from observatory.model.probes import load_probe_file, resolve_suite
from observatory.session.launch import RunningEngine, launch
from observatory.store.session_store import Store

pytestmark = pytest.mark.skipif(llamacpp.server_binary() is None,
                                reason="llama-server not built: run `bash scripts/build-llama.sh` (setup.sh --test does)")
LLAMA = ["llama.cpp:base", "llama.cpp:draft2", "llama.cpp:ngram3"]
ARMS = ["base", "ngram3", *LLAMA]  # plain names are vLLM arms


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


def test_client_tokenizes_and_detokenizes_through_llamas_own_form(server: RunningEngine) -> None:
    """The channels that build prompts from ids (length_sweep, memory_pressure, long_prompts) tokenize
    through `EngineClient`: on llama-server it must speak llama.cpp's /tokenize and /detokenize form.
    Negative control: vLLM's form, which llama-server answers with no tokens at all."""
    from observatory.client.send import EngineClient

    tok = _hf_tokenizer()
    text = "def add(a, b):\n    return a + b  # sum"  # ASCII: a lone token of a CJK character is a partial byte
    ours = tok(text, add_special_tokens=False)["input_ids"]
    client = EngineClient(server.url, engine="llama.cpp")
    try:
        assert client.tokenize(text) == ours
        assert "".join(client.detokenize(ours)) == text
        assert client.detokenize(ours[:3]) == [tok.decode([i]) for i in ours[:3]]
        assert client.adapter.ids_text(client._post_json, client.model(), tok("加法").input_ids) == "加法"
    finally:
        client.close()
    vllm_form = httpx.post(f"{server.url}/tokenize", json={"model": "m", "prompt": text, "add_special_tokens": False})
    assert vllm_form.json().get("tokens") in ([], None)  # why the adapter must choose the form
    vllm_client = EngineClient(server.url, engine="vllm")
    try:
        assert not vllm_client.tokenize(text)  # vLLM's form on llama-server: no ids
    finally:
        vllm_client.close()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real session across engines: vLLM base + n-gram, llama.cpp base + draft + n-gram; its
    `show --json`, exit code, output and rendered report."""
    d = tmp_path_factory.mktemp("llama-session")
    db = d / "runs.db"
    r = CliRunner().invoke(cli, ["compare", "--arms", "vllm:base,vllm:ngram3," + ",".join(LLAMA), "--db", str(db),
                                 "--log-dir", str(d / "logs"), "--quiet"], catch_exceptions=False)
    shown = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    rep = CliRunner().invoke(cli, ["report", "--db", str(db), "--out", str(d / "report")], catch_exceptions=False)
    data: dict[str, Any] = json.loads(shown.output)
    data["_exit"], data["_output"], data["_db"] = r.exit_code, r.output + rep.output, str(db)
    data["_report"] = (d / "report" / "index.html").read_text()
    return data


def _arm(data: dict[str, Any], name: str) -> dict[str, Any]:
    return next(a for a in data["arms"] if a["name"] == name)


def test_llama_session_stores_every_arm_with_ids(session: dict[str, Any]) -> None:
    """Issue 17 item 3: each llama.cpp arm launched llama-server, every probe judged and stored with token ids."""
    probes = [p.name for p in load_probe_file(resolve_suite("default"))]
    assert [a["name"] for a in session["arms"]] == ARMS, session["_output"]
    for a in session["arms"]:
        assert a["status"] == "ok", (a["name"], a["reason"], a["log_tail"])
        assert (Path(a["launch"]["argv"][0]).name == "llama-server") == (a["name"] in LLAMA), a["launch"]["argv"][:3]
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
        if a["name"] not in LLAMA:
            continue
        tools = [r for r in a["results"] if r["probe"].startswith("tool-")]
        assert len(tools) == 3, a["name"]
        for r in tools:
            assert r["tool_calls"], (a["name"], r["probe"], r["text"])
            assert r["verdicts"]["tool_calls"]["verdict"] == "PASS", (a["name"], r["probe"], r["verdicts"])
            assert r["verdict"] == "PASS", (a["name"], r["probe"], r["verdicts"])


def test_llama_spec_arms_emit_base_text(session: dict[str, Any]) -> None:
    """Greedy speculation on llama.cpp emits llama.cpp base's text on every probe it answered."""
    base = {r["probe"]: r["text"] for r in _arm(session, "llama.cpp:base")["results"]}
    for name in LLAMA[1:]:
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
    for name in LLAMA[1:]:
        verdicts = {r["probe"]: r["verdicts"] for r in _arm(session, name)["results"]}
        for probe, ref in base.items():
            if ref is None:
                continue
            mine = seqs[name][probe]
            assert mine is not None and mine.token_ids == ref.token_ids, (name, probe)
            assert verdicts[probe]["token_diff"]["verdict"] == "PASS", (name, probe, verdicts[probe]["token_diff"])
            compared += 1
    assert compared == len(LLAMA[1:]) * 10, compared  # every default probe, tool probes included


def test_llama_acceptance_comes_from_its_own_counters(session: dict[str, Any]) -> None:
    """Drafted and accepted from llamacpp:spec_decode_* (/metrics); base drafted nothing."""
    for name in LLAMA[1:]:
        c = _arm(session, name)["counters"]
        assert c["drafts"] and c["draft_tokens"] and c["accepted"] is not None, (name, c)
        assert 0 <= c["accepted"] <= c["draft_tokens"]
    base = _arm(session, "llama.cpp:base")["counters"]
    assert not base.get("drafts"), base



def test_stream_tau_is_not_measurable_where_llama_withholds_drafted_ids(session: dict[str, Any]) -> None:
    """llama-server streams no ids for drafted tokens, so its spec arms' chunk counts cover only part of each
    answer; the stream-vs-counter tau check says "not measurable" instead of calling the counters liars
    (it WARNed "the counters may lie" on llama.cpp:ngram3 before)."""
    for name in LLAMA[1:]:
        (check,) = [c for c in _arm(session, name)["performance"] if c["check"] == "stream_tau"]
        assert check["verdict"] == "SKIP" and "not measurable" in check["reason"], (name, check)


# -- across engines (issue 17 item 4) ------------------------------------------------------------------------


def test_each_engine_judged_against_its_own_base(session: dict[str, Any]) -> None:
    """Both bases are bases; each engine's spec arms are diffed against their own engine's base (token-identical)."""
    arms = {a["name"]: a for a in session["arms"]}
    assert arms["base"]["role"] == "base" and arms["llama.cpp:base"]["role"] == "base"
    assert not any("token_diff" in r["verdicts"] for r in arms["llama.cpp:base"]["results"])
    for name in ("ngram3", "llama.cpp:draft2", "llama.cpp:ngram3"):
        for r in arms[name]["results"]:
            assert r["verdicts"]["token_diff"]["verdict"] == "PASS", (name, r["probe"], r["verdicts"]["token_diff"])


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


def test_ngram_acceptance_side_by_side_from_each_engines_counters(session: dict[str, Any]) -> None:
    """Issue 17 item 4: vLLM's ngram and llama.cpp's ngram-simple, both K=3, in one n-gram row, each from its
    own engine's counters (vLLM's spec_decode_* and llama.cpp's llamacpp:spec_decode_* on /metrics)."""
    (row,) = [r for r in session["cross_engine"]["acceptance"] if r["family"] == "n-gram"]
    by_engine = {a["engine"]: a for a in row["arms"]}
    assert set(by_engine) == {"vllm", "llama.cpp"}
    assert (by_engine["vllm"]["arm"], by_engine["llama.cpp"]["arm"]) == ("ngram3", "llama.cpp:ngram3")
    for engine, a in by_engine.items():
        acc = _arm(session, a["arm"])["acceptance"]  # the arm's own figures, from its engine's counters
        assert a["drafts"] and (a["drafts"], a["alpha"], a["tau"]) == (acc["drafts"], acc["alpha"], acc["tau"]), (a, acc)
        assert 0.0 <= a["alpha"] <= 1.0 and a["alpha"] == acc["accepted"] / acc["draft_tokens"], (engine, a)
    # the cross-engine view is never part of a verdict: the session's verdict reasons name no cross-engine pair
    assert not any("cross" in (r.get("code") or "").lower() for r in session["verdict"]["reasons"])


def test_report_shows_the_cross_engine_section(session: dict[str, Any]) -> None:
    html = session["_report"]
    assert 'id="cross-engine"' in html and "Tokenizer alignment" in html
    assert f"{len(load_probe_file(resolve_suite('default')))} of" in html and "aligned" in html
