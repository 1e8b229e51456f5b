"""Spec counters from real vLLM /metrics text (issue 2, DESIGN.md mistake 9)."""

from __future__ import annotations

import pytest

from observatory.errors import ObservatoryError
from observatory.metrics import SpecCounters, parse_spec_counters

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


def test_malformed_text_is_a_clear_error() -> None:
    with pytest.raises(ObservatoryError, match="not valid Prometheus text"):
        parse_spec_counters('vllm:spec_decode_num_drafts_total{engine="0" 3\n')
