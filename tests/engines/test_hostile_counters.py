"""Counters that lie in new ways flag the arm, and no figure is derived from them (issue 32 item 2).

These use the hand-made STUB server (tests/support/stub_server.py): a real engine cannot be made to restart
between two reads, serve another model's series, accept more than it drafted, or report positions
beyond k on demand. Arm `mtp1` is a spec arm with k = 1 (observatory.model.arms' preset).
"""

from __future__ import annotations

import json
from pathlib import Path

from observatory.engines.metrics import CounterWatch, SpecCounters, parse_spec_counters
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import run_gate

_FAMILIES = (("num_drafts", "drafts"), ("num_draft_tokens", "tokens"), ("num_accepted_tokens", "accepted"))


def _text(i: int, labels: str = 'engine="0",model_name="stub-model"', per_pos: dict[int, int] | None = None,
          start: float | None = None, k: int = 1, alpha: float = 0.5, ratio: float = 1.0,
          others: tuple[tuple[str, int], ...] = ()) -> str:
    """The /metrics of read I: 10 drafts of K tokens per read, ALPHA of them accepted (x RATIO: a lie).

    OTHERS: more label sets (labels, multiplier), each with I x multiplier reads' worth at alpha 0.99.
    """
    series = [(labels, i, alpha * ratio)] + [(other, i * m, 0.99) for other, m in others]
    lines = [f"process_start_time_seconds {start}"] if start is not None else []
    for fam, key in _FAMILIES:
        lines.append(f"# TYPE vllm:spec_decode_{fam}_total counter")
        for lab, n, a in series:
            values = {"drafts": 10 * n, "tokens": 10 * k * n, "accepted": int(10 * k * n * a)}
            lines.append(f"vllm:spec_decode_{fam}_total{{{lab}}} {values[key]}")
    lines.append("# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter")
    for pos, n in (per_pos or {0: int(10 * k * alpha * ratio)}).items():
        lines.append(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}} {n * i}')
    return "\n".join(lines) + "\n"


def _run(tmp_path: Path, metrics: list[str]) -> tuple[int, dict[str, dict[str, object]], Path]:
    with StubServer("ok", token=5) as base, StubServer("ok", token=5, metrics=metrics) as spec:
        code, out, output = run_gate(tmp_path, f"base={base.url},mtp1={spec.url}")
    assert "Traceback" not in output, output
    data = json.loads((out / "session.json").read_text())
    assert (out / "report" / "index.html").is_file()
    return code, {a["name"]: a for a in data["arms"]}, out


def _flagged(arm: dict[str, object]) -> list[str]:
    return [v["detail"] for v in arm["validity"] if v["code"] == "INVALID"]  # type: ignore[attr-defined,index]


def _assert_unusable(arm: dict[str, object], problem: str) -> None:
    flagged = _flagged(arm)
    assert any("counters unusable" in d and problem in d for d in flagged), flagged
    acc = arm["acceptance"]
    assert acc["alpha"] is None and acc["tau"] is None and acc["per_position"] == []  # type: ignore[index]


def test_honest_counters_give_the_true_alpha(tmp_path: Path) -> None:
    """The positive control of this file's stubs: monotone counters of one label set give alpha = 0.5."""
    _, arms, _ = _run(tmp_path, [_text(i, start=100.0) for i in range(200)])
    assert not [d for d in _flagged(arms["mtp1"]) if "counters" in d], _flagged(arms["mtp1"])
    assert arms["mtp1"]["acceptance"]["alpha"] == 0.5  # type: ignore[index]


def test_restarted_server_is_flagged(tmp_path: Path) -> None:
    """A server that restarted and whose new counters overtook the old ones before the next read was
    taken as measured (alpha 0.058, true 0.5): its process start time changed between reads."""
    metrics = [_text(i, start=100.0) for i in range(3)] + [_text(i + 50, start=200.0) for i in range(200)]
    code, arms, _ = _run(tmp_path, metrics)
    assert code == 2
    _assert_unusable(arms["mtp1"], "restarted")


def test_another_models_series_is_not_summed_in(tmp_path: Path) -> None:
    """A second label set for another model was summed in (alpha 0.989, true 0.5): only the served
    model's series count."""
    other = (('engine="0",model_name="other-model"', 100),)
    _, arms, _ = _run(tmp_path, [_text(i, start=100.0, others=other) for i in range(200)])
    assert arms["mtp1"]["acceptance"]["alpha"] == 0.5, _flagged(arms["mtp1"])  # type: ignore[index]


def test_a_new_engine_label_set_mid_arm_is_flagged(tmp_path: Path) -> None:
    """Another engine's series appearing after the first read would be summed in: flagged, no figure."""
    second = (('engine="1",model_name="stub-model"', 100),)
    metrics = [_text(i, start=100.0) for i in range(3)] + [_text(i, start=100.0, others=second)
                                                           for i in range(3, 200)]
    code, arms, _ = _run(tmp_path, metrics)
    assert code == 2
    _assert_unusable(arms["mtp1"], "appeared after the first read")


def test_accepted_above_drafted_is_flagged(tmp_path: Path) -> None:
    """Accepted tokens greater than draft tokens printed alpha 469.25: alpha must be <= 1."""
    code, arms, _ = _run(tmp_path, [_text(i, ratio=900.0) for i in range(200)])
    assert code == 2
    _assert_unusable(arms["mtp1"], "> draft tokens")


def test_positions_beyond_k_are_flagged(tmp_path: Path) -> None:
    """Per-position series for positions beyond k were stored and charted."""
    code, arms, _ = _run(tmp_path, [_text(i, per_pos={0: 5, 3: 0}) for i in range(200)])
    assert code == 2
    _assert_unusable(arms["mtp1"], "beyond k = 1")


def test_an_absurd_position_allocates_nothing(tmp_path: Path) -> None:
    """Position 1,000,000 gave a 1M-entry list stored and charted (a 462 MB report); 1,000,000,000 a
    MemoryError. Positions are bounded before anything is sized by them."""
    for pos in (1_000_000, 1_000_000_000):
        run_dir = tmp_path / str(pos)
        run_dir.mkdir()
        code, arms, out = _run(run_dir, [_text(i, per_pos={0: 5, pos: 1}) for i in range(200)])
        assert code == 2
        _assert_unusable(arms["mtp1"], "not a position")
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        assert size < 20_000_000, size


def test_duplicated_samples_are_flagged(tmp_path: Path) -> None:
    """Every sample twice with identical labels doubled the counts."""
    def doubled(text: str) -> str:
        return "".join(line + "\n" + (line + "\n" if line.startswith("vllm:") else "") for line in text.splitlines())

    code, arms, _ = _run(tmp_path, [doubled(_text(i)) for i in range(200)])
    assert code == 2
    _assert_unusable(arms["mtp1"], "twice with identical labels")


def test_counter_watch_sees_a_fall_between_reads_and_keeps_it() -> None:
    """A restart without a start time: a counter lower than at the previous read, even when each
    before/after pair grows; the problem stays for every later read."""
    w = CounterWatch()
    assert w.check(SpecCounters(100, 200, 100, [100]), "").problem is None
    assert w.check(SpecCounters(110, 220, 110, [110]), "").problem is None
    fell = w.check(SpecCounters(5, 10, 5, [5]), "")
    assert fell.problem is not None and "decreased" in fell.problem
    assert w.check(SpecCounters(500, 1000, 500, [500]), "").problem == fell.problem
    assert CounterWatch().check(SpecCounters(5, 10, 5, [5]), "").problem is None  # negative control


def test_parse_bounds_positions_and_drops_other_models() -> None:
    c = parse_spec_counters(_text(1, per_pos={0: 5, 10**9: 1}))
    assert c.problem and "not a position" in c.problem and c.accepted_per_pos is None
    assert parse_spec_counters(_text(1)).accepted_per_pos == [5]
    mixed = _text(1, others=(('engine="0",model_name="x"', 7),))
    assert parse_spec_counters(mixed, "stub-model").drafts == 10
    assert parse_spec_counters(mixed).drafts == 80  # negative control: without the model, both are summed


def test_a_count_beyond_a_double_is_not_a_count() -> None:
    """A counter of 1e30 is finite and integral but no exact count: unusable, never stored as 10^30."""
    c = parse_spec_counters(_text(1).replace("vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"stub-model\"} 10",
                                             "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"stub-model\"} 1e30"))
    assert c.problem and "is not a count" in c.problem and c.drafts is None
    assert parse_spec_counters(_text(1)).drafts == 10  # negative control
