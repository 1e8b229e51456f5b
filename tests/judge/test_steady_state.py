"""Issue 29 item 3: warm-up read from the timed requests themselves, left out of S (observatory.judge.steady_state).

Recorded data: the committed H200 nightly session (examples/h200-nightly/nightly-tiny.db.gz), whose mtp1
and mtp2 served their first timed request 50x and 12.7x slower to first token than the rest of their block,
and every other committed arm block (the negative control on real timings). Unit cases for each branch of
the rule. Cost: about 5 s (six example databases unpacked and read).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from observatory.judge.figures import compute_figures
from observatory.judge.perf_gates import steady_check
from observatory.judge.steady_state import MIN_EXCESS_MS, MIX_BANDS, PROBE_BANDS, excluded_keys, steady_state
from observatory.report.data import build
from observatory.report.html import speed_notes
from observatory.store.db import ResultRow
from observatory.store.session_store import Store
from tests.support.paths import example_db

EXAMPLES = ["h200/h200-tiny.db", "h200/h200-hybrid.db", "h200-nightly/nightly-tiny.db",
            "h200-nightly/nightly-hybrid.db", "h200x2/h200x2-parallel.db", "h200x2/h200x2-tp2.db"]


def req(probe: int, ttft: float, dur: float, tokens: int = 41, repeat: int = 0) -> ResultRow:
    return ResultRow(mode="timed", ok=True, probe_id=probe, repeat=repeat, concurrency=1, token_ids=[],
                     usage={"completion_tokens": tokens}, ttft_ms=ttft, duration_ms=dur, chunks=[])


def _single(store: Store, arm_id: int) -> list[ResultRow]:
    return [r for r in store.results(arm_id, "timed") if r.ok and r.concurrency == 1]


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("examples")
    return {rel: example_db(rel, d / rel.replace("/", "-")) for rel in EXAMPLES}


def test_recorded_warmup_is_found_and_clean_blocks_are_left_alone(examples: dict[str, Path]) -> None:
    """nightly-tiny's mtp1 and mtp2: the first timed request is warm-up; no other committed arm block has any."""
    found: dict[tuple[str, str], list[int]] = {}
    for rel, db in examples.items():
        store = Store(str(db))
        for a in store.arms(1):
            got = steady_state(_single(store, a.id))
            assert got["measurable"] and got["reached"], (rel, a.name, got)
            if got["warmup"]:
                found[(rel, a.name)] = [e["position"] for e in got["excluded"]]
    assert found == {("h200-nightly/nightly-tiny.db", "mtp1"): [0], ("h200-nightly/nightly-tiny.db", "mtp2"): [0]}


def test_warmup_is_left_out_of_S_on_both_sides(examples: dict[str, Path], tmp_path: Path) -> None:
    """Re-judged, nightly-tiny's mtp1 S compares the nine requests after the warm-up on both arms (by hand below)."""
    db = tmp_path / "n.db"
    shutil.copy(examples["h200-nightly/nightly-tiny.db"], db)
    store = Store(str(db), write=True)
    figs = compute_figures(store, 1)
    arms = {a.name: a for a in store.arms(1)}
    mtp1, base = figs[arms["mtp1"].id], figs[arms["base"].id]
    first = _single(store, arms["mtp1"].id)[0]
    assert mtp1["vs_base"]["warmup_left_out"] == [[first.probe_id, 0]]
    assert base["steady_state"]["warmup"] == 0

    def rate(arm: str) -> float:
        rows = [r for r in _single(store, arms[arm].id) if r.probe_id != first.probe_id]
        return sum(r.usage["completion_tokens"] for r in rows) / sum(r.duration_ms / 1000 for r in rows)

    assert mtp1["vs_base"]["S"] == pytest.approx(rate("mtp1") / rate("base"))
    assert mtp1["speed"]["requests"] == 9 and base["speed"]["requests"] == 10
    check = next(p for p in mtp1["performance"] if p["check"] == "steady_state")
    assert check["verdict"] == "PASS" and "this arm 1 of 10" in check["reason"]
    view = {a.name: a for a in build(store).arms}  # the report's speed section says so
    assert speed_notes(view["mtp1"])[0].startswith("1 of 10 timed request(s) still warming up")
    assert speed_notes(view["base"])[0] == "steady from the first of 10 timed requests"


def test_leading_slow_requests_are_warmup_and_a_later_slow_one_is_not() -> None:
    steady = [req(p, 20.0, 420.0) for p in range(2, 10)]
    cold = [req(0, 20.0 * (MIX_BANDS[0] + 1), 900.0), req(1, 20.0, 420.0 + 400 * MIX_BANDS[1])]  # TTFT, then decode
    got = steady_state(cold + steady)
    assert got["warmup"] == 2 and excluded_keys(got) == {(0, 0), (1, 0)}
    assert [e["reference"] for e in got["excluded"]] == ["probe mix", "probe mix"]
    late = steady_state(steady[:4] + cold + steady[4:])  # the same slow requests mid-block: noise, not warm-up
    assert late["warmup"] == 0 and late["excluded"] == []
    assert steady_state(steady)["warmup"] == 0  # the clean control


def test_a_probe_timed_again_is_its_own_reference() -> None:
    """--repeat 2: repeat 0 of probe 0 is 2x slower to first token than its repeat 1 (below the probe-mix band,
    beyond the same-probe band): warm-up; the same request without a later repeat is within the mix band."""
    ttft = 100.0 * (PROBE_BANDS[0] + 0.5)
    assert ttft / 100.0 < MIX_BANDS[0]
    rows = [req(0, ttft, 500.0 + ttft - 100.0)] + [req(p, 100.0, 500.0) for p in range(1, 6)]
    again = rows + [req(p, 100.0, 500.0, repeat=1) for p in range(6)]
    got = steady_state(again)
    assert got["warmup"] == 1 and got["excluded"][0]["reference"] == "same probe"
    assert steady_state(rows)["warmup"] == 0


def test_a_slow_request_by_less_than_the_clients_own_cost_is_not_warmup() -> None:
    """A 1 ms TTFT median (a stub, a tiny model): a 10x first token 9 ms late may be the client's, not warm-up."""
    assert steady_state([req(0, 10.0, 410.0)] + [req(p, 1.0, 401.0) for p in range(1, 6)])["warmup"] == 0
    assert steady_state([req(0, 10.0 + MIN_EXCESS_MS, 440.0)] + [req(p, 1.0, 401.0) for p in range(1, 6)]
                        )["warmup"] == 1


def test_an_arm_that_never_settles_excludes_nothing_and_warns() -> None:
    rows = [req(0, 200.0, 600.0), req(0, 200.0, 600.0, repeat=1), req(0, 20.0, 420.0, repeat=2)]
    got = steady_state(rows)
    assert not got["reached"] and got["excluded"] == [] and got["warmup"] == 2
    fig: dict[str, Any] = {"steady_state": got}
    check = steady_check(fig, {"steady_state": steady_state([req(p, 20.0, 420.0) for p in range(4)])})
    assert check["verdict"] == "WARN" and "this arm" in check["reason"] and "not trustworthy" in check["reason"]
    assert steady_check({"steady_state": steady_state(rows[2:])}, None)["verdict"] == "SKIP"  # one request
