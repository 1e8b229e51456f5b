"""Figures that can be backed (issue "No confident wrong verdict", items 6, 7, 9, 11, 12, 13, 15).

Speed functions run on ResultRow values; whole-session cases go through the
real store and `compute_figures`, as `observatory judge` does.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.client.answer import Response
from observatory.engines.server_facts import cache_config, served_facts
from observatory.judge.figures import compute_figures, validity
from observatory.judge.perf_gates import SPEEDUP_FAIL_BELOW, parse_fail_on, performance, stream_tau_check
from observatory.judge.speed import bunching, speed, stream_tau
from observatory.model.errors import ObservatoryError
from observatory.model.probes import Probe
from observatory.report.data import build
from observatory.session.measure import _completion_tokens
from observatory.store.db import ArmRow, MeasurementRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store
from tests.support.speed_figures import BASE, bracketed, by_check, spec_figures
from tests.support.stub_server import StubServer

T0 = datetime(2026, 11, 30, 12, 0, 0)


def res(chunks: list[list[Any]], usage: int | None = None, ids: int | None = None, ttft: float | None = None,
        duration: float | None = None, concurrency: int = 1, repeat: int = 0, mode: str = "timed",
        counters: dict[str, Any] | None = None) -> ResultRow:
    """One result: chunks [ms, n or None], usage tokens, streamed ids."""
    return ResultRow(mode=mode, ok=True, text="x", token_ids=list(range(ids or 0)), chunks=chunks,
                     usage={"completion_tokens": usage} if usage is not None else {},
                     ttft_ms=ttft if ttft is not None else (chunks[0][0] if chunks else None),
                     duration_ms=duration if duration is not None else (chunks[-1][0] if chunks else None),
                     concurrency=concurrency, repeat=repeat, counters_delta=counters or {})


def steady(n: int, step: float = 10.0, size: int = 1, ttft: float = 50.0) -> list[list[Any]]:
    """N tokens in chunks of SIZE, one chunk every STEP ms after TTFT."""
    return [[ttft + step * i, size] for i in range(n // size)]


# -- item 6: tokens from usage ------------------------------------------------

def test_tokens_per_request_come_from_usage_not_ids() -> None:
    """Issue item 6: vLLM withholds the ids of chunks its tool parser swallows; usage counts every token."""
    r = res(steady(10), usage=14, ids=10, duration=50.0 + 10 * 9)
    spd = speed([r], [r], [], allowed=1)
    assert spd["single_stream_tok_s"] == pytest.approx(14 / 0.14)
    assert spd["token_source"] == "usage"
    assert spd["token_count"] == {"requests": 1, "disagree": 1, "ids": 10, "usage": 14}
    check = performance({"speed": spd, "acceptance": {"alpha": None}}, None, None, {})[-1]
    assert check["check"] == "token_count" and check["verdict"] == "WARN"
    assert "10" in check["reason"] and "14" in check["reason"]


def test_ids_agreeing_with_usage_pass_the_cross_check() -> None:
    """Issue item 6: the cross-check is quiet when ids and usage agree."""
    r = res(steady(10), usage=10, ids=10)
    check = performance({"speed": speed([r], [r], [], 1), "acceptance": {"alpha": None}}, None, None, {})[-1]
    assert check["verdict"] == "PASS"


def test_timed_results_without_ids_still_give_speed() -> None:
    """Issue item 6: timed requests ask for no logprobs: chunks are [ms, null], tokens come from usage."""
    chunks = [[50.0 + 10 * i, None] for i in range(20)]
    r = res(chunks, usage=20, ids=None)
    spd = speed([r], [r], [], allowed=1)
    assert spd["single_stream_tok_s"] == pytest.approx(20 / (240 / 1000))
    assert spd["decode_tok_s"] == pytest.approx(19 / 0.19)
    assert spd["itl_ms"]["median"] == pytest.approx(10.0)
    assert spd["token_count"]["requests"] == 0


def test_measurement_completion_tokens_come_from_usage() -> None:
    """Issue item 6: MeasurementRow.completion_tokens is the sum of usage, not of ids."""
    assert _completion_tokens(Response(token_ids=[1, 2, 3], usage={"completion_tokens": 5})) == 5
    assert _completion_tokens(Response(token_ids=[1, 2, 3], usage={})) == 3


def test_throughput_recomputed_from_usage_of_the_batch() -> None:
    """Issue item 6: stored measurements counted ids; judge recomputes from the timed results' usage."""
    rs = [res(steady(4), usage=10, ids=4, concurrency=4) for _ in range(4)]
    m = MeasurementRow(concurrency=4, repeat=0, requests=4, completion_tokens=16, wall_s=2.0)
    spd = speed([], rs, [m], allowed=1)
    assert spd["throughput"]["4"]["tok_s"] == pytest.approx(40 / 2.0)


# -- item 7: bursty streams ----------------------------------------------------

def test_bursty_base_stream_has_no_itl_or_decode_rate() -> None:
    """Issue item 7: a whole response in two chunks is not an ITL of 0.11 ms; it is not measurable."""
    r = res([[50.0, 1], [60.0, 99]], usage=100, ids=100)
    spd = speed([r], [r], [], allowed=1)
    assert spd["bursty"]["bursty"] and spd["bursty"]["share"] == pytest.approx(0.98)
    assert spd["decode_tok_s"] is None and spd["itl_ms"]["median"] is None
    assert spd["single_stream_tok_s"] is not None  # end to end holds however tokens are grouped


@pytest.mark.parametrize(("size", "k", "bursty"), [(3, 2, False), (2, 1, False), (5, 1, True), (4, None, None)],
                         ids=["k2-chunks-of-3", "k1-chunks-of-2", "k1-chunks-of-5", "k-unknown"])
def test_spec_chunks_up_to_k_plus_one_are_not_bursty(size: int, k: int | None, bursty: bool | None) -> None:
    """Issue item 7: chunks of up to k + 1 tokens are what speculation emits per step."""
    r = res(steady(60, size=size), usage=60)
    b = bunching([r], None if k is None else k + 1)
    assert (b["bursty"] if b else None) == bursty


def test_bursty_timed_results_without_chunk_counts() -> None:
    """Issue item 7: without per-chunk counts, usage tokens over the chunk count tell the bunching."""
    r = res([[50.0, None], [60.0, None]], usage=100)
    assert bunching([r], 1)["bursty"]
    r2 = res([[50.0 + i, None] for i in range(100)], usage=100)
    assert not bunching([r2], 1)["bursty"]


# -- item 9: tau from the stream against the counters ----------------------------

def test_stream_tau_matches_honest_counters() -> None:
    """Issue item 9: one chunk per step on a spec arm; its mean size is tau."""
    chunks = [[50.0, 1]] + [[60.0 + 10 * i, 3 if i % 2 else 2] for i in range(40)] + [[500.0, 1]]
    st = stream_tau([res(chunks, usage=102, mode="stream")])
    assert st["tau"] == pytest.approx(2.5)
    assert stream_tau_check(st, 2.5, bursty=False)["verdict"] == "PASS"


def test_lying_counters_disagree_with_the_stream() -> None:
    """Issue item 9 (negative control): counters claiming tau 2.9 while the stream shows 1 token per step."""
    chunks = [[50.0 + 10 * i, 1] for i in range(60)]
    st = stream_tau([res(chunks, usage=60, mode="stream")])
    check = stream_tau_check(st, 2.9, bursty=False)
    assert check["verdict"] == "WARN" and "1.00" in check["reason"] and "2.90" in check["reason"]


def test_stream_tau_is_skipped_when_not_measurable() -> None:
    """Issue item 9: bursty streams, missing chunk counts, unreported counters give SKIP, never PASS."""
    assert stream_tau_check({"tau": 2.0, "se": 0.1, "chunks": 50}, 2.0, bursty=True)["verdict"] == "SKIP"
    assert stream_tau_check(None, 2.0, bursty=False)["verdict"] == "SKIP"
    assert stream_tau_check({"tau": 2.0, "se": 0.1, "chunks": 50}, None, bursty=False)["verdict"] == "SKIP"
    assert stream_tau([res([[1.0, None], [2.0, None], [3.0, None]], usage=9)]) is None



def test_stream_tau_leaves_out_streams_that_withheld_ids() -> None:
    """Issue 17: llama-server streams no logprobs for drafted tokens, so only the chunks of undrafted tokens
    carry counts (one token each): 40 counted tokens of 100 generated read as tau 1.00 against counters that
    truly say 2.5, and the check called the counters liars. Counts that do not cover usage are left out."""
    partial = [[50.0 + 10 * i, 1] for i in range(40)]
    assert stream_tau([res(partial, usage=100, mode="stream")]) is None
    assert stream_tau_check(None, 2.5, bursty=False)["verdict"] == "SKIP"
    whole = [[50.0, 1]] + [[60.0 + 10 * i, 3 if i % 2 else 2] for i in range(40)] + [[500.0, 1]]
    st = stream_tau([res(partial, usage=100, mode="stream"), res(whole, usage=102, mode="stream")])
    assert st is not None and st["tau"] == pytest.approx(2.5)  # the complete stream still counts

# -- item 15: performance checks -------------------------------------------------

@pytest.mark.parametrize("text", ["speedup>1", "speed<1", "speedup<", "ttft_ratio<3", "acceptance<0.5x"])
def test_fail_on_rejects_what_it_cannot_read(text: str) -> None:
    """Issue item 15: a malformed --fail-on is one clear error naming the syntax."""
    with pytest.raises(ObservatoryError, match="speedup<1.0,ttft_ratio>3,acceptance<0.5"):
        parse_fail_on(text)


def test_fail_on_parses() -> None:
    """Issue item 15: the documented example."""
    assert parse_fail_on("speedup<1.0, ttft_ratio>3,acceptance<0.5") == {
        "speedup": 1.0, "ttft_ratio": 3.0, "acceptance": 0.5}
    assert parse_fail_on(None) == {}


def test_slow_spec_arm_warns_by_default_and_fails_on_thresholds() -> None:
    """Issue item 15: S = 0.85 and TTFT ten times base no longer pass silently."""
    fig = spec_figures(0.85, 1000.0, 0.7, ci=[0.80, 0.95])  # beyond the noise below 1, not wholly below 0.9
    warn = by_check(performance(fig, BASE, None, {}))
    assert warn["speedup"]["verdict"] == "WARN" and warn["speedup"]["value"] == 0.85
    assert "beyond the noise" in warn["speedup"]["reason"]
    assert warn["ttft_ratio"]["verdict"] == "WARN" and warn["ttft_ratio"]["value"] == pytest.approx(10.0)
    assert warn["acceptance_floor"]["verdict"] == "PASS"
    fail = by_check(performance(fig, BASE, None, parse_fail_on("speedup<1.0,ttft_ratio>3,acceptance<0.8")))
    assert {fail[c]["verdict"] for c in ("speedup", "ttft_ratio", "acceptance_floor")} == {"FAIL"}
    assert fail["speedup"]["threshold"] == 1.0 and fail["ttft_ratio"]["threshold"] == 3.0


def test_speedup_below_one_within_noise_is_a_pass_marked_within_noise() -> None:
    """Issue 30.4: S below 1 but inside the A/A spread (or the CI) is no WARN: PASS, marked "within noise"."""
    for floor, ci in (({"throughput_spread": 0.05}, None), (None, [0.88, 1.03])):
        for fail_on in ({}, {"speedup": 1.0}):
            check = by_check(performance(spec_figures(0.97, 100.0, 0.7, ci=ci), BASE, floor, fail_on))["speedup"]
            assert check["verdict"] == "PASS" and "within noise" in check["reason"], (floor, fail_on)
    # the negative control: the same S with a tight interval is beyond the noise
    tight = by_check(performance(spec_figures(0.97, 100.0, 0.7, ci=[0.95, 0.99]), BASE, None, {}))["speedup"]
    assert tight["verdict"] == "WARN" and "beyond the noise" in tight["reason"]


@pytest.mark.parametrize("noise", ["aa_spread", "bracketed", "paired"])
def test_four_times_slower_fails_by_default(noise: str) -> None:
    """Issue 30.4: S = 0.25 (4x slower) FAILs with no --fail-on, with the 26% A/A spread measured on the
    H200 tiny session (examples/h200/README.md), a bracketed or a paired interval (each measures the host's
    drift); --fail-on 'speedup<X' overrides the floor."""
    floor = {"throughput_spread": 0.26} if noise == "aa_spread" else None
    fig = spec_figures(0.25, 100.0, 0.7)
    if noise == "bracketed":
        fig = bracketed(fig, [0.22, 0.27], -0.02)
    elif noise == "paired":
        fig = {**fig, "vs_base": {**fig["vs_base"], "design": "paired", "ci": [0.22, 0.27], "pairs": 20}}
    check = by_check(performance(fig, BASE, floor, {}))["speedup"]
    assert check["verdict"] == "FAIL" and check["threshold"] == SPEEDUP_FAIL_BELOW, check
    off = by_check(performance(fig, BASE, floor, parse_fail_on("speedup<0.2")))["speedup"]
    assert off["verdict"] == "WARN" and off["threshold"] == 0.2, off
    # the floor needs the whole noise below it: S = 0.85 with a CI reaching 0.95 is a WARN, not a FAIL
    near = by_check(performance(spec_figures(0.85, 100.0, 0.7, ci=[0.80, 0.95]), BASE, None, {}))["speedup"]
    assert near["verdict"] == "WARN"
    # spec requests too short to time against the client's own cost (up to 30 ms): the default floor does not
    # FAIL; a user's does
    short = {**fig, "speed": {**fig["speed"], "samples": [[2.0, 0.025]] * 5}}
    quick = by_check(performance(short, BASE, floor, {}))["speedup"]
    assert quick["verdict"] == "WARN" and "client's own cost" in quick["reason"], quick
    assert by_check(performance(short, BASE, floor, {"speedup": 0.9}))["speedup"]["verdict"] == "FAIL"
    # an arm whose figures cannot be trusted (validity INVALID, CONFOUNDED, ...): WARN by default
    invalid = by_check(performance(fig, BASE, floor, {}, "CONFOUNDED"))["speedup"]
    assert invalid["verdict"] == "WARN" and "CONFOUNDED" in invalid["reason"], invalid
    assert by_check(performance(fig, BASE, floor, {"speedup": 0.9}, "CONFOUNDED"))["speedup"]["verdict"] == "FAIL"
    # ... and that guard never turns a within-noise PASS into a WARN
    calm = by_check(performance(spec_figures(0.97, 100.0, 0.7, ci=[0.88, 1.03]), BASE, None, {}, "INVALID"))["speedup"]
    assert calm["verdict"] == "PASS" and "within noise" in calm["reason"], calm
    # unknown noise: the default floor does not FAIL what it cannot back; a user's threshold does
    blind = spec_figures(0.25, 100.0, 0.7)
    assert by_check(performance(blind, BASE, None, {}))["speedup"]["verdict"] == "WARN"
    assert by_check(performance(blind, BASE, None, {"speedup": 0.9}))["speedup"]["verdict"] == "FAIL"


def test_a_five_times_slower_arm_on_short_requests_fails() -> None:
    """Issue 46 item 3: the stored CPU night with a dead drafter (examples/cpu-fault-nights session 7: base's
    requests 60 ms, the spec arm's about 300 ms, S 0.20 [0.12, 0.32]) was excused as "median request 60 ms <
    100 ms". The client's own cost (at most 30 ms a request) cannot make a 300 ms request out of a 60 ms one."""
    fig = {**spec_figures(0.20, 60.0, 0.0, request_s=0.30),
           "vs_base": {"S": 0.20, "ci": [0.12, 0.32], "design": "paired", "pairs": 24}}
    short_base = {"speed": {"ttft_ms": {"median": 7.0}, "samples": [[12.0, 0.060]] * 5}}
    check = by_check(performance(fig, short_base, None, {}))["speedup"]
    assert check["verdict"] == "FAIL", check
    # the control: a clean arm 10% slower on 40 ms requests stays a WARN (the client could be all of that)
    clean = {**spec_figures(0.80, 20.0, 0.9, request_s=0.045),
             "vs_base": {"S": 0.80, "ci": [0.74, 0.86], "design": "paired", "pairs": 24}}
    assert by_check(performance(clean, short_base, None, {}))["speedup"]["verdict"] == "WARN"
    # paired on shared CPU cores (figures marks it: pairs_share_cores): alternating requests time the two
    # engines' contention, unmeasured (a clean CPU night read S 0.18 with its step at 0.63, session 9 of the
    # same database), so the default floor WARNs and says why; the dead drafter FAILs on its acceptance there,
    # and the history's collapse (tests/channels/test_channel_history.py); a user's threshold still FAILs
    shared = {**fig, "vs_base": {**fig["vs_base"], "pairs_share_cores": True},
              "acceptance": {"alpha": 0.0, "accepted": 0, "draft_tokens": 2400}}
    both = by_check(performance(shared, short_base, None, {}))
    assert both["speedup"]["verdict"] == "WARN" and "shared CPU cores" in both["speedup"]["reason"], both
    assert both["acceptance_floor"]["verdict"] == "FAIL", both["acceptance_floor"]
    assert by_check(performance(shared, short_base, None, {"speedup": 0.9}))["speedup"]["verdict"] == "FAIL"


def test_a_host_that_drifted_more_than_the_effect_makes_s_not_measurable() -> None:
    """Issue 46 item 3: bracketed timing measures base's rate before and after the arm; where it moved by more
    than the effect, S is "not measurable", never a FAIL; with a steady host the same S is judged."""
    drifted = bracketed(spec_figures(0.80, 100.0, 0.7), [0.60, 0.85], -0.35)
    check = by_check(performance(drifted, BASE, None, {}))["speedup"]
    assert check["verdict"] == "SKIP" and "drifted by 35%" in check["reason"], check
    steady = bracketed(spec_figures(0.80, 100.0, 0.7), [0.76, 0.84], 0.02)
    steady_check = by_check(performance(steady, BASE, None, {}))["speedup"]
    assert steady_check["verdict"] == "FAIL" and "drift-corrected" in steady_check["reason"], steady_check
    # sequential timing with no A/A copy measured no drift: below the floor is a WARN that says so
    blind = spec_figures(0.80, 100.0, 0.7, ci=[0.76, 0.84])
    warn = by_check(performance(blind, BASE, None, {}))["speedup"]
    assert warn["verdict"] == "WARN" and "drift between arms was not measured" in warn["reason"], warn


def test_unmeasurable_figures_are_skipped_not_passed() -> None:
    """Issue item 15: no base, no S, counters not reported: SKIP with the reason."""
    perf = by_check(performance(spec_figures(None, 100.0, None), None, None, {}))
    for c in ("speedup", "ttft_ratio", "acceptance_floor", "stream_tau", "token_count"):
        assert perf[c]["verdict"] == "SKIP" and perf[c]["reason"], c


def test_acceptance_collapse_under_concurrency_trips_the_floor() -> None:
    """Issue items 11 and 15: 70% overall but 1.2% at 4-way concurrency."""
    fig = spec_figures(1.2, 100.0, 0.7)
    fig["by_concurrency"] = {"1": {"alpha": 0.7}, "4": {"alpha": 0.012}}
    check = by_check(performance(fig, BASE, None, {}))["acceptance_floor"]
    assert check["verdict"] == "WARN" and "concurrency 4" in check["reason"] and check["value"] == 0.012


# -- whole sessions through the store -------------------------------------------

def _session(store: Store, arms: list[dict[str, Any]], options: dict[str, Any] | None = None) -> int:
    """A session of ARMS: each {"name", "k", "rate", "ttft", "counters_per_level", ...}."""
    s = store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t",
                             options=options or {}))
    p = Probe("p", "prose_en", prompt="hi")
    pid = store.add(ProbeRow(session_id=s.id, position=0, name="p", category="prose_en",
                             content_hash=p.content_hash, definition=p.to_dict(), params={})).id
    for pos, spec in enumerate(arms):
        k = spec.get("k")
        sc = {"method": "mtp", "num_speculative_tokens": k} if k else None
        start = T0 + timedelta(seconds=spec.get("start_s", pos * 60))
        a = store.add(ArmRow(session_id=s.id, position=pos, name=spec["name"], status="ok",
                             engine_version=spec.get("version", "0.1"), model="m",
                             started_at=start, finished_at=start + timedelta(seconds=50),
                             launch={"speculative_config": sc, "url": spec.get("url"), "argv": [], "env": {},
                                     "host": spec.get("host", "h1"), "gpu_models": ["H200"],
                                     "served": spec.get("served", {}), "copy_of": spec.get("copy_of")}))
        step = 1000.0 / spec["rate"]
        size = (k or 0) + 1
        chunks = [[spec["ttft"], 1]] + [[spec["ttft"] + step * size * (i + 1), size] for i in range(20)]
        drafts = 20 if k else 0
        cd = {"drafts": drafts, "draft_tokens": drafts * (k or 0), "accepted": drafts * (k or 0),
              "accepted_per_pos": [drafts] * (k or 0)}
        store.add(_at(res(chunks, usage=1 + 20 * size, ids=1 + 20 * size, mode="stream", counters=cd), a.id, pid))
        if not spec.get("untimed"):  # an arm that crashed before its timed pass has none
            store.add(_at(res(chunks, usage=1 + 20 * size, ids=1 + 20 * size), a.id, pid))
        for level, c in (spec.get("counters_per_level") or {}).items():
            store.add(_at(res(chunks, usage=1 + 20 * size, concurrency=level), a.id, pid))
            store.add(MeasurementRow(arm_id=a.id, concurrency=level, repeat=0, requests=level,
                                     completion_tokens=0, wall_s=(1 + 20 * size) / spec["rate"], counters_delta=c))
    return int(s.id)


def _at(r: ResultRow, arm_id: int, probe_id: int) -> ResultRow:
    r.arm_id, r.probe_id = arm_id, probe_id
    return r


def _arm(store: Store, sid: int, name: str) -> ArmRow:
    return next(a for a in store.arms(sid) if a.name == name)


def test_figures_per_concurrency_level(store: Store) -> None:
    """Issue item 11: alpha, tau, TTFT, throughput and S per concurrency level, not one mix."""
    lvl = {1: {"drafts": 100, "draft_tokens": 200, "accepted": 100, "accepted_per_pos": [60, 40]},
           4: {"drafts": 100, "draft_tokens": 200, "accepted": 124, "accepted_per_pos": [70, 54]}}
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "counters_per_level": {1: {}, 4: {}}},
                           {"name": "mtp2", "k": 2, "rate": 60, "ttft": 40.0, "counters_per_level": lvl}])
    compute_figures(store, sid)
    levels = _arm(store, sid, "mtp2").figures["by_concurrency"]
    assert levels["1"]["alpha"] == pytest.approx(0.5) and levels["4"]["alpha"] == pytest.approx(0.62)
    assert levels["4"]["tau"] == pytest.approx(2.24)
    assert levels["4"]["ttft_ms"] == pytest.approx(40.0)
    assert levels["4"]["S"] == pytest.approx(60 / 50)
    assert _arm(store, sid, "base").figures["by_concurrency"]["4"]["alpha"] is None


def test_judge_reapplies_stored_fail_on(store: Store) -> None:
    """Issue item 15: thresholds live in the session's options, so `judge` re-applies them."""
    arms = [{"name": "base", "rate": 100, "ttft": 40.0}, {"name": "mtp1", "k": 1, "rate": 25, "ttft": 400.0}]
    sid = _session(store, arms, options={"fail_on": {"speedup": 1.0, "ttft_ratio": 3.0}})
    compute_figures(store, sid)
    perf = by_check(_arm(store, sid, "mtp1").figures["performance"])
    assert perf["speedup"]["verdict"] == "FAIL" and perf["ttft_ratio"]["verdict"] == "FAIL"
    assert perf["stream_tau"]["verdict"] == "PASS" and perf["token_count"]["verdict"] == "PASS"
    assert "performance" not in _arm(store, sid, "base").figures


def _codes(store: Store, sid: int, name: str) -> dict[str, str]:
    compute_figures(store, sid)
    return {v["code"]: v["detail"] for v in _arm(store, sid, name).validity}


@pytest.mark.parametrize(("change", "word"), [({"start_s": 3 * 3600}, "apart"), ({"host": "other-box"}, "host"),
                                              ({"version": "0.2"}, "engine version")],
                         ids=["hours-later", "other-host", "other-engine"])
def test_resumed_arm_is_cross_session(store: Store, change: dict[str, Any], word: str) -> None:
    """Issue item 12: an arm resumed later, elsewhere or on another engine is CROSS_SESSION."""
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, **change}])
    codes = _codes(store, sid, "mtp1")
    assert "CROSS_SESSION" in codes and word in codes["CROSS_SESSION"]
    assert _arm(store, sid, "mtp1").figures["vs_base"]["cross_session"]


def test_arms_run_together_are_not_cross_session(store: Store) -> None:
    """Issue item 12: the control: same host, same engine, minutes apart."""
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "start_s": 1800}])
    assert "CROSS_SESSION" not in _codes(store, sid, "mtp1")
    assert _arm(store, sid, "mtp1").figures["vs_base"]["cross_session"] is None


def test_url_arms_with_other_max_model_len_are_confounded(store: Store) -> None:
    """Issue item 13: URL arms are checked on what their servers expose; unknowns are listed as unchecked."""
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "url": "http://a",
                            "served": {"max_model_len": 4096}},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "url": "http://b",
                            "served": {"max_model_len": 32768}}])
    codes = _codes(store, sid, "mtp1")
    assert "max_model_len: 4096 on base, 32768 here" in codes["CONFOUNDED"]
    assert "launch flags" in codes["UNCHECKED"]


def test_url_arm_facts_not_reported_are_unchecked(store: Store) -> None:
    """Issue item 13: a server that does not report max_model_len is unchecked, not equal."""
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "url": "http://a"},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "url": "http://b"}])
    codes = _codes(store, sid, "mtp1")
    assert "CONFOUNDED" not in codes and "max_model_len (not reported)" in codes["UNCHECKED"]


def test_served_facts_from_v1_models() -> None:
    """Issue item 13: max_model_len read from the server's /v1/models (a stub stands in for it)."""
    from observatory.client.send import EngineClient

    with StubServer("ok", max_model_len=8192) as s:
        assert served_facts(EngineClient(s.url)) == {"served_model": "stub-model", "root": None, "max_model_len": 8192}
    with StubServer("ok") as s:
        assert "max_model_len" not in served_facts(EngineClient(s.url))
    assert served_facts(EngineClient("http://127.0.0.1:9", timeout=1.0), timeout=1.0) == {}


def test_validity_without_session_arms_still_works() -> None:
    """The validity signature stays backward compatible (arms optional)."""
    a = ArmRow(name="mtp1", status="ok", launch={"speculative_config": {"num_speculative_tokens": 1}})
    b = ArmRow(name="base", status="ok", launch={"speculative_config": None})
    assert validity(a, b, {"drafts": 500}, {}) == []


def test_compare_checks_url_arms_and_stores_fail_on(tmp_path: Path) -> None:
    """Issue items 13 and 15 end to end: URL arms whose servers differ in max_model_len are CONFOUNDED,
    and --fail-on lands in the session's options and in each spec arm's performance checks.
    Hand-made stub servers stand in for two servers someone else started."""
    suite = tmp_path / "p.toml"
    suite.write_text('[[probe]]\nname = "one"\ncategory = "prose_en"\n'
                     'messages = [{ role = "user", content = "Say something." }]\nmax_tokens = 8\n')
    db = tmp_path / "u.db"
    with StubServer("ok", max_model_len=4096) as a, StubServer("ok", max_model_len=32768) as b:
        r = CliRunner().invoke(cli, ["compare", "--arms", f"base={a.url},mtp1={b.url}", "--suite", str(suite),
                                     "--db", str(db), "--quiet", "--fail-on", "speedup<0.9"])
    store = Store(str(db))
    # compare exits as gate does, with the session's own verdict (the stub speculates nothing: INVALID, or FAIL
    # where its timing breaks the user's speedup<0.9 first)
    assert r.exit_code == build(store, store.session().id).verdict.exit_code != 0, r.output
    session = store.session()
    assert session.options["fail_on"] == {"speedup": 0.9}
    mtp1 = _arm(store, session.id, "mtp1")
    codes = {v["code"]: v["detail"] for v in mtp1.validity}
    assert "max_model_len: 4096 on base, 32768 here" in codes["CONFOUNDED"]
    assert mtp1.launch["served"]["max_model_len"] == 32768 and mtp1.launch["host"]
    speedup = by_check(mtp1.figures["performance"])["speedup"]
    assert speedup["threshold"] == 0.9


def test_cross_session_speed_is_not_judged(store: Store) -> None:
    """Issue items 12 and 15: a resumed arm's S against base is not a same-session figure: SKIP, not PASS/FAIL."""
    sid = _session(store, [{"name": "base", "rate": 100, "ttft": 40.0},
                           {"name": "mtp1", "k": 1, "rate": 25, "ttft": 400.0, "host": "other-box"}],
                   options={"fail_on": {"speedup": 1.0}})
    compute_figures(store, sid)
    perf = by_check(_arm(store, sid, "mtp1").figures["performance"])
    assert perf["speedup"]["verdict"] == "SKIP" and "cross-session" in perf["speedup"]["reason"]
    assert perf["ttft_ratio"]["verdict"] == "SKIP"


VLLM_CACHE_INFO = """# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="%s",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="%d"} 1.0
"""


def test_cache_config_from_metrics() -> None:
    """Issue item 13: vLLM's cache settings as /metrics publishes them; block counts left out."""
    assert cache_config(VLLM_CACHE_INFO % ("True", 1000)) == {
        "block_size": "16", "cache_dtype": "auto", "enable_prefix_caching": "True", "gpu_memory_utilization": "0.9"}
    assert cache_config("vllm:num_requests_running 0\n") is None


def test_url_arms_with_other_cache_settings_are_confounded(store: Store) -> None:
    """Issue item 13: prefix caching on one URL arm only is a confound; block counts may differ."""
    base = {"max_model_len": 4096, "cache_config": cache_config(VLLM_CACHE_INFO % ("False", 1000))}
    spec = {"max_model_len": 4096, "cache_config": cache_config(VLLM_CACHE_INFO % ("True", 900))}
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "url": "http://a", "served": base},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "url": "http://b", "served": spec}])
    codes = _codes(store, sid, "mtp1")
    assert codes["CONFOUNDED"].endswith("cache enable_prefix_caching: 'False' on base, 'True' here")
    same = {**spec, "cache_config": cache_config(VLLM_CACHE_INFO % ("False", 900))}
    sid2 = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "url": "http://a", "served": base},
                            {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "url": "http://b", "served": same}])
    assert "CONFOUNDED" not in _codes(store, sid2, "mtp1")


def test_bunching_is_judged_on_counted_chunks_when_timed_ones_have_none() -> None:
    """Issue item 7: timed requests without logprobs have [ms, null] chunks; the streamed results'
    per-chunk counts decide whether the arm is bursty."""
    timed = res([[50.0 + i, None] for i in range(50)], usage=100)  # 2 tokens per chunk on average
    bursty_stream = res([[50.0, 1], [60.0, 99]], usage=100, ids=100, mode="stream")
    steady_stream = res(steady(100), usage=100, ids=100, mode="stream")
    assert speed([timed], [timed], [], allowed=1, streamed=[bursty_stream])["bursty"]["bursty"]
    assert not speed([timed], [timed], [], allowed=1, streamed=[steady_stream])["bursty"]["bursty"]


def test_arms_file_sets_fail_on_and_the_flag_wins(tmp_path: Path) -> None:
    """Issue 13 item 15: thresholds from the arms file (top-level fail_on); --fail-on overrides them.
    Hand-made stub servers stand in for servers someone else started."""
    suite = tmp_path / "p.toml"
    suite.write_text('[[probe]]\nname = "one"\ncategory = "prose_en"\n'
                     'messages = [{ role = "user", content = "Say something." }]\nmax_tokens = 8\n')
    arms = tmp_path / "arms.toml"
    arms.write_text('fail_on = "speedup<0.8,acceptance<0.3"\n[arms.fast]\nspeculative_config = '
                    '{ method = "mtp", num_speculative_tokens = 1 }\n')
    for extra, want in (([], {"speedup": 0.8, "acceptance": 0.3}), (["--fail-on", "speedup<0.5"], {"speedup": 0.5})):
        db = tmp_path / f"a{len(extra)}.db"
        with StubServer("ok") as a, StubServer("ok") as b:
            r = CliRunner().invoke(cli, ["compare", "--arms", f"base={a.url},fast={b.url}", "--arms-file", str(arms),
                                         "--suite", str(suite), "--db", str(db), "--quiet", *extra])
        # compare exits as gate does, with the session's own verdict (a stub that speculates nothing is INVALID;
        # its timing against the user's speedup<X may FAIL first)
        with Store(str(db)) as st:
            assert r.exit_code == build(st, st.session().id).verdict.exit_code != 0, r.output
        assert Store(str(db)).session().options["fail_on"] == want
    arms.write_text("fail_on = 3\n")
    r = CliRunner().invoke(cli, ["compare", "--arms", "base", "--arms-file", str(arms), "--db", str(tmp_path / "x.db")])
    assert r.exit_code == 3 and "fail_on must be a string" in r.output


def test_a_block_size_the_engine_chose_is_a_note_not_a_confound(store: Store) -> None:
    """H200 hybrid nightly: vLLM picked block_size 272 on base and 288 with MTP, no flag set it: ENGINE_CHOSEN,
    not CONFOUNDED. Set by a flag on one arm, or prefix caching served differently, it stays a confound."""
    def served(block: str, prefix: str = "False") -> dict[str, Any]:
        return {"cache_config": {"block_size": block, "enable_prefix_caching": prefix}}

    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "served": served("272")},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "served": served("288")}])
    codes = _codes(store, sid, "mtp1")
    assert "CONFOUNDED" not in codes and codes["ENGINE_CHOSEN"].startswith("cache block_size: '272' on base")
    sid2 = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0, "served": served("272")},
                            {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "served": served("288", "True")}])
    codes2 = _codes(store, sid2, "mtp1")
    assert "enable_prefix_caching" in codes2["CONFOUNDED"] and "block_size" not in codes2["CONFOUNDED"]


def test_speed_floor_needs_the_interval_too_where_an_aa_copy_exists() -> None:
    """S = 0.79 with a 0.02 A/A spread but a 95% CI of [0.34, 1.58] (the committed H200 tiny nightly's mtp1,
    one warm-up request wide) is within noise: the spread alone does not see the arm's own noise."""
    wide = by_check(performance(spec_figures(0.79, 100.0, 0.7, ci=[0.34, 1.58]), BASE, {"throughput_spread": 0.02}, {}))
    assert wide["speedup"]["verdict"] == "PASS" and "within noise" in wide["speedup"]["reason"], wide["speedup"]
    # the negative control: the same spread with an interval wholly below the floor FAILs
    tight = by_check(performance(spec_figures(0.79, 100.0, 0.7, ci=[0.75, 0.83]), BASE, {"throughput_spread": 0.02}, {}))
    assert tight["speedup"]["verdict"] == "FAIL", tight["speedup"]
    # and a narrow interval inside a wide A/A spread stays within noise (the drift the spread measured)
    drift = by_check(performance(spec_figures(0.85, 100.0, 0.7, ci=[0.83, 0.87]), BASE, {"throughput_spread": 0.26}, {}))
    assert drift["speedup"]["verdict"] == "PASS", drift["speedup"]


@pytest.mark.parametrize("untimed", [True, False], ids=["spec-arm-crashed-before-timing", "control-both-timed"])
def test_no_speedup_from_a_correctness_pass_against_a_timed_pass(store: Store, untimed: bool) -> None:
    """sglang:sgl-mtp2 crashed on the H200 before its timed pass (examples/h200-engines): its S came from
    its correctness pass (logprobs on, answers whole) over base's timed pass, 0.65. Now "not measurable"."""
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0},
                           {"name": "mtp1", "k": 1, "rate": 60, "ttft": 40.0, "untimed": untimed}])
    compute_figures(store, sid)
    vb = _arm(store, sid, "mtp1").figures["vs_base"]
    if untimed:
        assert vb["S"] is None and vb["ci"] is None and "mtp1 has no timed pass" in vb["not_measurable"]
    else:
        assert vb["S"] == pytest.approx(60 / 50, rel=0.05) and "not_measurable" not in vb  # e2e: TTFT included


def test_the_report_says_why_s_is_not_measurable(tmp_path: Path) -> None:
    """The speedup table names why a crashed arm has no S (escaped), instead of a bare dash."""
    db = tmp_path / "r.db"
    store = Store(str(db))
    sid = _session(store, [{"name": "base", "rate": 50, "ttft": 40.0},
                           {"name": "mtp1<b>", "k": 1, "rate": 60, "ttft": 40.0, "untimed": True}])
    compute_figures(store, sid)
    store.close()
    out = tmp_path / "rep"
    r = CliRunner().invoke(cli, ["report", str(sid), "--db", str(db), "--out", str(out)])
    assert r.exit_code == 0, r.output
    page = (out / "index.html").read_text()
    assert "S: mtp1&lt;b&gt; has no timed pass" in page and "mtp1<b> has no timed pass" not in page
