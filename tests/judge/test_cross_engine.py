"""Across engines (issue 17 item 4): tokenizer alignment, base against base with margins, acceptance side by
side, all kept out of every verdict. Sessions through the real store, judge, figures and report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from observatory.commands.evaluate import evaluate
from observatory.engines.arm_engines import parse_arms
from observatory.judge.cross_engine import ALIGNED, NOT_COMPARABLE, NOT_MEASURED, align
from observatory.model.read_model import to_plain
from observatory.report.data import build
from observatory.report.html import render_session
from observatory.store.db import ArmRow, ProbeRow, SessionRow
from observatory.store.session_store import Store
from tests.support.llama_sessions import IDS, PROBE, TEXTS, launch_record, result_row

NGRAM_V = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
NGRAM_L = {"method": "ngram-simple", "num_speculative_tokens": 3}
PROMPT = {"ids": [1, 2, 3, 4], "pieces": ["<|im_start|>", "user", "\n", "hi"]}


def test_a_session_of_two_engines_is_planned_with_a_base_each() -> None:
    """Issue 17 item 4: vllm:base,vllm:mtp2,llama.cpp:base,llama.cpp:draft2 was refused; now each engine
    keeps its own base."""
    arms = parse_arms("vllm:base,vllm:mtp2,llama.cpp:base,llama.cpp:draft2")
    assert [(a.name, a.engine) for a in arms] == [("base", "vllm"), ("mtp2", "vllm"),
                                                  ("llama.cpp:base", "llama.cpp"), ("llama.cpp:draft2", "llama.cpp")]


def test_alignment_names_the_first_differing_token() -> None:
    assert align(PROMPT, dict(PROMPT)).status == ALIGNED
    other = {"ids": [1, 2, 9, 4, 5], "pieces": ["<|im_start|>", "user", "\n\n", "hi", "!"]}
    al = align(PROMPT, other)
    assert al.status == NOT_COMPARABLE and al.position == 2 and al.prompt_tokens == [4, 5]
    assert al.tokens == [{"id": 3, "piece": "\n"}, {"id": 9, "piece": "\n\n"}]
    shorter = align(PROMPT, {"ids": [1, 2, 3], "pieces": []})
    assert shorter.status == NOT_COMPARABLE and shorter.position == 3 and shorter.tokens[1] == {"id": None,
                                                                                                "piece": None}
    missing = align(PROMPT, {"error": "HTTPStatusError: 404"})
    assert missing.status == NOT_MEASURED and "404" in (missing.why or "")
    assert align(PROMPT, None).status == NOT_MEASURED


def _two_engine_session(store: Store, llama_prompt: dict[str, Any], llama_base_ids: list[int]) -> int:
    s = store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t", options={}))
    pid = store.add(ProbeRow(session_id=s.id, position=0, name=PROBE.name, category=PROBE.category,
                             content_hash=PROBE.content_hash, definition=PROBE.to_dict(), params={})).id
    arms = [("base", "vllm", None), ("ngram3", "vllm", NGRAM_V),
            ("llama.cpp:base", "llama.cpp", None), ("llama.cpp:ngram3", "llama.cpp", NGRAM_L)]
    for pos, (name, engine, spec) in enumerate(arms):
        launch = {**launch_record(name, engine, spec), "role": "spec" if spec else "base"}
        if spec is None:
            launch["prompt_ids"] = {PROBE.name: PROMPT if engine == "vllm" else llama_prompt}
        counters = {"drafts": 300, "draft_tokens": 900, "accepted": 600 if engine == "vllm" else 450,
                    "accepted_per_pos": None} if spec else {}
        a = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", launch=launch, counters=counters))
        ids = llama_base_ids if engine == "llama.cpp" else IDS  # each engine's spec arm agrees with its own base
        for mode in ("stream", "nonstream"):
            row = result_row(a.id, pid, mode, ids, TEXTS)
            row.counters_delta = counters if mode == "stream" else {}
            store.add(row)
    evaluate(store, s.id)
    return int(s.id)


def test_bases_diverging_across_engines_never_enter_a_verdict(store: Store) -> None:
    """Issue 17 item 4: llama.cpp's base says something else than vLLM's at token 6: shown as a diverged
    cross-engine output with vLLM's margin, while every within-engine verdict and the session verdict stay
    as they are (each spec arm agrees with its own engine's base)."""
    diverging = IDS[:6] + [7] + IDS[7:]
    data = to_plain(build(store, _two_engine_session(store, PROMPT, diverging)))
    same = to_plain(build(store, _two_engine_session(store, PROMPT, IDS)))
    assert data["verdict"]["verdict"] == same["verdict"]["verdict"]
    assert data["verdict"]["reasons"] == same["verdict"]["reasons"]
    for a in data["arms"]:
        assert all(r["verdicts"].get("token_diff", {}).get("verdict", "PASS") == "PASS" for r in a["results"]), a["name"]
    ce = data["cross_engine"]
    assert ce["engines"] == ["vllm", "llama.cpp"] and ce["bases"] == {"vllm": "base", "llama.cpp": "llama.cpp:base"}
    (pair,) = ce["pairs"]
    assert (pair["reference"], pair["other"]) == ("base", "llama.cpp:base")
    (row,) = pair["probes"]
    assert row["alignment"]["status"] == ALIGNED
    out = row["output"]
    assert out["kind"] == "diverged" and out["position"] == 6 and out["margin"] == pytest.approx(4.99)
    assert out["reason"].startswith("first difference at token 6: #223 on base, #7 on llama.cpp:base; "
                                    "base's margin there 4.990 nats (diverged;")
    assert pair["summary"]["diverged"] == 1 and same["cross_engine"]["pairs"][0]["summary"]["identical"] == 1


def test_a_probe_whose_prompt_ids_differ_is_not_comparable(store: Store) -> None:
    """Issue 17 item 4: tokenizer alignment comes first: different prompt ids, no output comparison."""
    other = {"ids": [1, 2, 30, 4], "pieces": ["<|im_start|>", "user", " \n", "hi"]}
    pair = to_plain(build(store, _two_engine_session(store, other, IDS)))["cross_engine"]["pairs"][0]
    (row,) = pair["probes"]
    assert row["alignment"]["status"] == NOT_COMPARABLE and row["alignment"]["position"] == 2
    assert row["output"] is None and pair["summary"]["not comparable"] == 1


def test_acceptance_of_ngram_on_both_engines_side_by_side(store: Store) -> None:
    """Issue 17 item 4: n-gram on vLLM (ngram) and on llama.cpp (ngram-simple), each from its own counters."""
    ce = to_plain(build(store, _two_engine_session(store, PROMPT, IDS)))["cross_engine"]
    (group,) = ce["acceptance"]
    assert group["family"] == "n-gram"
    rows = {r["arm"]: r for r in group["arms"]}
    assert rows["ngram3"]["engine"] == "vllm" and rows["llama.cpp:ngram3"]["engine"] == "llama.cpp"
    assert rows["ngram3"]["alpha"] == pytest.approx(600 / 900) and rows["llama.cpp:ngram3"]["alpha"] == pytest.approx(0.5)


def test_one_engine_has_no_cross_engine_section(store: Store, tmp_path: Path) -> None:
    """A one-engine session: the key is None and the report has no such section."""
    from tests.support.llama_sessions import session_of_arms

    sid = session_of_arms(store, [("base", "vllm", None, True), ("mtp2", "vllm", {"method": "mtp",
                                                                           "num_speculative_tokens": 2}, True)])
    evaluate(store, sid)
    data = build(store, sid)
    assert data.cross_engine is None and to_plain(data)["cross_engine"] is None
    html = render_session(data, tmp_path / "one").read_text()
    assert 'id="cross-engine"' not in html


def test_cross_engine_section_renders_escaped(store: Store, tmp_path: Path) -> None:
    """The report's own section: alignment with the first differing token, escaped (model vocabulary is
    untrusted text)."""
    other = {"ids": [1, 2, 30, 4], "pieces": ["<|im_start|>", "user", "<script>x</script>", "hi"]}
    sid = _two_engine_session(store, other, IDS)
    html = render_session(build(store, sid), tmp_path / "r").read_text()
    assert 'id="cross-engine"' in html and "not comparable: first differing token at 2" in html
    assert "<script>x</script>" not in html and "never part of the session verdict" in html
    assert "n-gram" in html


def test_cross_engine_is_in_show_json(tmp_path: Path) -> None:
    """`show --json` carries the comparison under its own key; no verdict row is stored for it."""
    import json

    from click.testing import CliRunner

    from observatory.cli import cli

    db = tmp_path / "s.db"
    with Store(str(db), write=True) as st:
        _two_engine_session(st, PROMPT, IDS)
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    assert json.loads(r.output)["cross_engine"]["pairs"][0]["summary"]["identical"] == 1
    with Store(str(db)) as st:  # the stored verdicts hold no cross-engine row
        sid = st.session(None).id
        gates = {v.gate for a in st.arms(sid) for v in st.verdicts(a.id)}
    assert gates and not any("cross" in g for g in gates)
