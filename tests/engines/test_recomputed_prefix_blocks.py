"""adapter.recomputed_prefix_blocks: the one reading of the prefix-cache blocks a spec arm recomputes by design
(channel prefix_cache and the answer_fields gate's cached_tokens rule both use it)."""

from __future__ import annotations

from observatory.engines.adapter import recomputed_prefix_blocks
from observatory.engines.server_facts import reported_block_size


def test_vllm_mtp_and_eagle_recompute_one_block_others_none() -> None:
    for method in ("mtp", "eagle", "eagle3"):
        blocks, why = recomputed_prefix_blocks("vllm", {"speculative_config": {"method": method}})
        assert blocks == 1 and "by design" in why
    assert recomputed_prefix_blocks("vllm", {"speculative_config": {"method": "ngram"}}) == (0, "")
    assert recomputed_prefix_blocks("vllm", {"speculative_config": {"method": "mtp",
                                                                    "disable_eagle_block_drop": True}}) == (0, "")
    assert recomputed_prefix_blocks("vllm", {}) == (0, "")  # base: no speculative config
    assert recomputed_prefix_blocks("no-such-engine", {"speculative_config": {"method": "mtp"}}) == (0, "")


def test_reported_block_size_reads_the_servers_cache_config_or_nothing() -> None:
    assert reported_block_size({"cache_config": {"block_size": "16"}}) == 16
    assert reported_block_size({"cache_config": {"block_size": "None"}}) is None
    assert reported_block_size({}) is None and reported_block_size(None) is None
