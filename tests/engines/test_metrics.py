"""Spec counters from real vLLM /metrics text (issue 2, docs/design.md mistake 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from observatory.engines.metrics import SpecCounters, parse_spec_counters
from tests.support.paths import REPO

# Shape as vLLM 0.32 (CPU) exposes it, trimmed to the relevant families.
REAL = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="/m"} 30.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="/m"} 60.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="/m"} 41.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="/m",position="0"} 25.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="/m",position="1"} 16.0
# HELP vllm:num_requests_running Number of requests.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="/m"} 0.0
"""


def test_parses_vllm_counters() -> None:
    c = parse_spec_counters(REAL)
    assert c == SpecCounters(drafts=30, draft_tokens=60, accepted=41, accepted_per_pos=[25, 16])


def test_two_engines_are_summed() -> None:
    two = REAL + REAL.replace('engine="0"', 'engine="1"').replace("# HELP", "# X").replace("# TYPE", "# Y")
    c = parse_spec_counters("\n".join(line for line in two.splitlines() if not line.startswith("# X") and not line.startswith("# Y")))
    assert c.drafts == 60 and c.accepted_per_pos == [50, 32]


def test_no_speculation_is_all_zero() -> None:
    assert parse_spec_counters("vllm:num_requests_running 0\n") == SpecCounters()


def test_delta_and_sum() -> None:
    a = SpecCounters(10, 20, 5, [4, 1])
    b = SpecCounters(30, 60, 41, [25, 16])
    d = b - a
    assert d == SpecCounters(20, 40, 36, [21, 15])
    assert (a + d) == b
    assert SpecCounters.from_dict(d.to_dict()) == d


def test_malformed_text_makes_the_counters_unusable() -> None:
    c = parse_spec_counters('vllm:spec_decode_num_drafts_total{engine="0" 3\n')
    assert c.problem is not None and "not valid Prometheus text" in c.problem
    assert (c.drafts, c.draft_tokens, c.accepted, c.accepted_per_pos) == (None, None, None, None)


def _counter(name: str, value: str, kind: str = "counter", labels: str = 'engine="0"') -> str:
    return f"# TYPE vllm:spec_decode_{name} {kind}\nvllm:spec_decode_{name}_total{{{labels}}} {value}\n"


@pytest.mark.parametrize(
    "text, match",
    [
        (REAL.replace("} 30.0", "} NaN", 1), "is not a count"),
        (REAL.replace("} 60.0", "} +Inf", 1), "is not a count"),
        (REAL.replace("} 41.0", "} -2000", 1), "is not a count"),
        (REAL.replace("} 41.0", "} 40.5", 1), "is not a count"),
        (REAL.replace("# TYPE vllm:spec_decode_num_drafts_total counter",
                      "# TYPE vllm:spec_decode_num_drafts_total gauge"), "is a gauge, not a counter"),
    ],
    ids=["nan", "inf", "negative", "fractional", "gauge"],
)
def test_hostile_values_make_the_counters_unusable(text: str, match: str) -> None:
    """Issue 19 item 1: NaN / Inf raised ValueError (traceback, session aborted); a negative counter
    was stored as drafts -2000; a gauge was counted as drafts. Now: unusable, with the reason."""
    c = parse_spec_counters(text)
    assert c.problem is not None and match in c.problem
    assert (c.drafts, c.draft_tokens, c.accepted) == (None, None, None)


def test_a_decreasing_counter_makes_the_delta_unusable() -> None:
    """Issue 19 item 1: a counter that goes down between two reads gave negative deltas that passed."""
    before = SpecCounters(30, 60, 41, [25, 16])
    after = SpecCounters(10, 60, 41, [25, 16])
    d = after - before
    assert d.problem is not None and "decreased" in d.problem and "drafts 30 -> 10" in d.problem
    # the problem survives sums and storage
    total = SpecCounters() + d + SpecCounters(1, 2, 1, [1, 0])
    assert total.problem == d.problem
    assert SpecCounters.from_dict(total.to_dict()).problem == d.problem


def test_not_reported_is_kept_apart_from_zero() -> None:
    """Issue 13 item 8: None (not reported) propagates through +, -, to_dict and from_dict."""
    partial = SpecCounters(drafts=43, draft_tokens=None, accepted=None, accepted_per_pos=None)
    total = SpecCounters() + partial
    assert (total.drafts, total.draft_tokens, total.accepted, total.accepted_per_pos) == (43, None, None, None)
    d = total.to_dict()
    assert d["accepted"] is None and d["accepted_per_pos"] is None
    assert SpecCounters.from_dict(d) == total
    # rows stored before this change lack keys: those were zeros
    assert SpecCounters.from_dict({}) == SpecCounters()


def test_other_gauges_under_the_prefix_are_not_read() -> None:
    """vLLM v0 exposed acceptance-rate gauges under the same prefix: not counters, not a problem either."""
    text = REAL + ("# TYPE vllm:spec_decode_draft_acceptance_rate gauge\n"
                   'vllm:spec_decode_draft_acceptance_rate{engine="0"} NaN\n')
    assert parse_spec_counters(text) == SpecCounters(drafts=30, draft_tokens=60, accepted=41, accepted_per_pos=[25, 16])


def test_one_prometheus_reader() -> None:
    """Issue 14 item 6: /metrics is parsed in metrics.py only (server facts read their info gauge through it)."""
    from observatory.engines.metrics import read_info

    parsers = [p.name for p in [*(REPO / "observatory").rglob("*.py"), *(REPO / "benchmarks").glob("*.py")]
               if "text_string_to_metric_families" in p.read_text()]
    assert parsers == ["metrics.py"]
    text = '# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size="16",engine="0"} 1.0\n'
    assert read_info(text, "vllm:cache_config_info") == {"block_size": "16", "engine": "0"}
    assert read_info(text, "vllm:other_info") is None and read_info("not { prometheus", "x") is None


def test_counters_never_read_are_unknown_in_the_session_data(tmp_path: Path) -> None:
    """Issue 14 item 6: an arm that failed before its counters were read showed drafts 0; they are unknown."""
    from observatory.model.read_model import to_plain
    from observatory.report.data import build
    from observatory.store.db import ArmRow, SessionRow
    from observatory.store.session_store import Store

    with Store(str(tmp_path / "c.db")) as store:
        sid = store.add(SessionRow(host="h", machine={}, command=[], options={}, suite="s", status="complete")).id
        store.add(ArmRow(session_id=sid, position=0, name="base", status="failed", launch={}))
        (arm,) = build(store, sid).arms
    assert to_plain(arm.counters) == {"drafts": None, "draft_tokens": None, "accepted": None, "accepted_per_pos": None}
