"""How precise S is (issue 29 item 1): the smallest detectable change, the traffic spent and the traffic a target needs.

The arithmetic on constructed figures (a known SE gives a known MDE; traffic scales as 1/sqrt(n)),
"not measurable" as None where S has no interval, the speedup check's wording, and the fields in a
judged session's ``show --json`` and terminal closing block.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from observatory.cli import cli
from observatory.judge.figures import compute_figures, vs_base
from observatory.judge.perf_gates import speedup_check
from observatory.judge.precision import TARGET_HALF_WIDTH, Z_80, Z_975, precision, spent, step_phrase
from observatory.model.probes import Probe
from observatory.report.data import build
from observatory.report.terminal import print_closing
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store

PRECISION_KEYS = ("se", "half_width", "detectable_change", "timed_requests", "timed_s", "traffic_for")


def _ci(S: float, se: float) -> list[float]:
    """A symmetric 95% interval of S with standard error SE."""
    return [S - Z_975 * se, S + Z_975 * se]


def test_a_known_standard_error_gives_a_known_detectable_change() -> None:
    """MDE = (z_0.975 + z_0.8) SE / S: SE 0.05 on S = 1 detects 14.0%; on S = 0.5, 28.0% of S."""
    assert Z_975 + Z_80 == pytest.approx(2.8016, abs=1e-4)
    p = precision(1.0, _ci(1.0, 0.05), (30, 60.0), (30, 40.0))
    assert p["se"] == pytest.approx(0.05) and p["detectable_change"] == pytest.approx(0.14008, abs=1e-5)
    assert p["half_width"] == pytest.approx(Z_975 * 0.05)
    assert precision(0.5, _ci(0.5, 0.05), (30, 60.0), (30, 40.0))["detectable_change"] == pytest.approx(0.28016,
                                                                                                       abs=1e-5)
    assert p["timed_requests"] == {"arm": 30, "base": 30} and p["timed_s"] == {"arm": 60.0, "base": 40.0}


def test_traffic_for_a_target_scales_as_one_over_sqrt_n() -> None:
    """A +-4% interval needs 4x the traffic for +-2%; +-2% already needs 1x; quadrupling n halves the half-width."""
    p = precision(1.0, [0.96, 1.04], (30, 60.0), (20, 40.0))
    need = p["traffic_for"]
    assert need["half_width"] == TARGET_HALF_WIDTH and need["scale"] == pytest.approx(4.0)
    assert need["requests"] == {"arm": 120, "base": 80}
    assert need["s"]["arm"] == pytest.approx(240.0) and need["s"]["base"] == pytest.approx(160.0)
    assert "1/sqrt(n)" in need["assumption"]
    assert precision(1.0, [0.98, 1.02], (30, 60.0), (20, 40.0))["traffic_for"]["scale"] == pytest.approx(1.0)
    # the assumption checked on the real bootstrap: the same request mix four times over halves S's interval
    rng = np.random.default_rng(1)
    spec = [[64.0, float(s)] for s in rng.uniform(0.8, 1.4, 40)]
    base = [[64.0, float(s)] for s in rng.uniform(0.9, 1.3, 40)]
    one = vs_base({}, _speed(spec), _speed(base), None)
    four = vs_base({}, _speed(spec * 4), _speed(base * 4), None)
    assert four["timed_requests"] == {"arm": 160, "base": 160}
    assert four["half_width"] / one["half_width"] == pytest.approx(0.5, abs=0.06)
    # and the traffic one asked for +-half-width/2 is the traffic four was given
    assert precision(one["S"], one["ci"], spent(spec), spent(base),
                     target=one["half_width"] / 2)["traffic_for"]["requests"] == {"arm": 160, "base": 160}


def _speed(samples: list[list[float]]) -> dict[str, Any]:
    return {"samples": samples, "single_stream_tok_s": sum(t for t, _ in samples) / sum(s for _, s in samples)}


def test_without_an_interval_the_precision_is_not_measurable_never_zero() -> None:
    """One timed request per arm, an interval of zero width, no S: None (not measurable), never 0."""
    lone = vs_base({}, _speed([[64.0, 1.0]]), _speed([[64.0, 0.9]]), None)
    assert lone["S"] is not None and lone["ci"] is None
    assert lone["detectable_change"] is None and lone["traffic_for"] is None and lone["se"] is None
    assert lone["timed_requests"] == {"arm": 1, "base": 1}  # what was spent is known all the same
    flat = vs_base({}, _speed([[64.0, 1.0]] * 5), _speed([[64.0, 0.9]] * 5), None)
    assert flat["ci"] is not None and flat["ci"][0] == flat["ci"][1]
    assert flat["detectable_change"] is None and flat["traffic_for"] is None
    none = vs_base({}, {"samples": [], "single_stream_tok_s": None}, _speed([[64.0, 0.9]] * 5), None)
    assert all(none[k] is None for k in PRECISION_KEYS)


def test_a_speedup_within_noise_says_what_change_it_cannot_see() -> None:
    """The PASS "within noise" claims no more than the session can detect; unknown precision says so."""
    vb = {"S": 0.97, "ci": [0.88, 1.03], **precision(0.97, [0.88, 1.03], (20, 40.0), (20, 30.0))}
    calm = speedup_check(vb, None, {})
    assert calm["verdict"] == "PASS" and "within noise" in calm["reason"]
    assert f"smaller than {vb['detectable_change']:.0%} is not detectable in this session" in calm["reason"]
    assert "11%" in calm["reason"]  # 2.80 x (0.15 / 3.92) / 0.97
    # a vs_base without the field (stored before it existed): not measurable, never a guess
    blind = speedup_check({"S": 0.97, "ci": [0.88, 1.03]}, None, {})
    assert blind["verdict"] == "PASS" and "not measurable" in blind["reason"] and "not detectable" not in blind["reason"]
    # judged by an A/A spread wider than the interval's MDE: the spread bounds what the check could see
    wide = speedup_check(vb, {"throughput_spread": 0.2}, {})
    assert wide["verdict"] == "PASS" and "smaller than 20% (the A/A spread) is not detectable" in wide["reason"]
    narrow = speedup_check(vb, {"throughput_spread": 0.05}, {})
    assert narrow["verdict"] == "PASS" and "smaller than 11% is not detectable" in narrow["reason"]
    # the negative control: beyond the noise the check WARNs and makes no within-noise claim
    tight = speedup_check({"S": 0.97, "ci": [0.95, 0.99]}, None, {})
    assert tight["verdict"] == "WARN" and "not detectable" not in tight["reason"]


T0 = datetime(2026, 12, 1, 12, 0, 0)


def _session(tmp_path: Path) -> Path:
    """A stored session of base and mtp1, 12 timed single-stream requests each of varying length."""
    store = Store(str(tmp_path / "runs.db"), write=True)
    s = store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t", options={},
                             status="complete", started_at=T0))
    p = Probe("p", "prose_en", prompt="hi")
    pid = store.add(ProbeRow(session_id=s.id, position=0, name="p", category="prose_en",
                             content_hash=p.content_hash, definition=p.to_dict(), params={})).id
    rng = np.random.default_rng(7)
    for pos, (name, k, ms) in enumerate((("base", None, 1000.0), ("mtp1", 1, 900.0))):
        sc = {"method": "mtp", "num_speculative_tokens": k} if k else None
        a = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", engine_version="0.1", model="m",
                             started_at=T0 + timedelta(minutes=pos), finished_at=T0 + timedelta(minutes=pos + 1),
                             launch={"speculative_config": sc, "argv": [], "env": {}, "host": "h1",
                                     "gpu_models": ["H200"], "served": {}}))
        for i in range(12):
            dur = ms * float(rng.uniform(0.8, 1.2))
            chunks = [[40.0, 1]] + [[40.0 + (dur - 40.0) * (j + 1) / 20, 1] for j in range(20)]
            cd = {"drafts": 20, "draft_tokens": 20, "accepted": 10, "accepted_per_pos": [10]} if k else {}
            store.add(ResultRow(arm_id=a.id, probe_id=pid, mode="timed", ok=True, text="x", token_ids=list(range(21)),
                                chunks=chunks, usage={"completion_tokens": 21}, ttft_ms=40.0, duration_ms=dur,
                                concurrency=1, repeat=i, counters_delta=cd))
        if k:  # a streamed probe with the engine's counters: the arm's tau (1.5 tokens a step)
            store.add(ResultRow(arm_id=a.id, probe_id=pid, mode="stream", ok=True, text="x", token_ids=list(range(21)),
                                chunks=[], usage={"completion_tokens": 21}, concurrency=1, repeat=0,
                                counters_delta={"drafts": 20, "draft_tokens": 20, "accepted": 10,
                                                "accepted_per_pos": [10]}))
    compute_figures(store, int(s.id))
    return tmp_path / "runs.db"


def test_show_json_and_the_closing_block_carry_the_precision(tmp_path: Path) -> None:
    """A judged session's spec arm has every precision field in ``show --json``; the closing block a short phrase."""
    db = _session(tmp_path)
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    arms = {a["name"]: a for a in json.loads(r.output)["arms"]}
    vb = arms["mtp1"]["vs_base"]
    assert set(PRECISION_KEYS) <= set(vb)
    assert vb["timed_requests"] == {"arm": 12, "base": 12} and 0 < vb["detectable_change"] < 1
    assert vb["timed_s"]["arm"] == pytest.approx(sum(x[1] for x in arms["mtp1"]["speed"]["samples"]))
    assert vb["traffic_for"]["requests"]["arm"] >= 1
    console = Console(record=True, width=400)
    print_closing(build(Store(str(db))), {}, console)
    text = console.export_text()
    assert f"S detects ≥{vb['detectable_change']:.0%}; ±2% needs ~" in text, text


def test_the_closing_block_states_s_step_and_its_precision(tmp_path: Path) -> None:
    """S at the median step travels with its own interval: ``show --json`` and the closing block's phrase."""
    db = _session(tmp_path)
    r = CliRunner().invoke(cli, ["show", "--db", str(db), "--json"], catch_exceptions=False)
    step = {a["name"]: a for a in json.loads(r.output)["arms"]}["mtp1"]["vs_base"]["step"]
    assert set(PRECISION_KEYS) <= set(step)
    console = Console(record=True, width=400)
    print_closing(build(Store(str(db))), {}, console)
    text = console.export_text()
    assert step["S"] == pytest.approx(1.5 * step["base_step_ms"] / step["arm_step_ms"]) and step["ci"] is not None
    assert step_phrase({"step": step}) in text, text


def test_the_step_phrase_says_what_it_cannot_measure() -> None:
    assert step_phrase({"step": {"S": 1.8632, "half_width": 0.0095}}) == "S_step 1.863 ±0.9%"
    assert step_phrase({"step": {"S": 1.8632, "half_width": None}}) == "S_step 1.863 (interval not measurable)"
    assert step_phrase({"step": {"S": None, "why": "not measurable: no tokens per step (tau)"}}) == \
        "S_step not measurable"
    assert step_phrase(None) == "S_step not measurable"
