"""Speed figures from timed passes, which carry no token ids (issue "A fast instrument" item 1)."""

from __future__ import annotations

from observatory.judge.figures import speed
from observatory.store.db import ResultRow


def test_timed_results_are_counted_by_usage_and_their_chunks_give_no_itl() -> None:
    """A timed Response has usage.completion_tokens and chunks [[ms, None], ...]: decode speed
    comes from usage; the per-token gap is not measurable from chunks of unknown size."""
    rows = [ResultRow(mode="timed", ok=True, token_ids=[], usage={"completion_tokens": 11}, ttft_ms=100.0,
                      duration_ms=1100.0, chunks=[[100.0, None], [600.0, None], [1100.0, None]])]
    got = speed(rows, [])
    assert got["decode_tok_s"] == 10.0
    assert got["single_stream_tok_s"] == 10.0
    assert got["itl_ms"] == {"median": None, "p90": None}
