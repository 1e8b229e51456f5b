"""The mixed_batch channel (issue 15 item 4): its plan, its judge on stored results, its fault."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from observatory.channels import mixed_batch
from observatory.faults import field_state
from observatory.model.probes import Probe
from tests.support.state_channels import CLEAN, build, by_arm, suite

ROLES = {"base": "base", "mtp2": "spec"}


def test_plan_mixes_lengths_budgets_stops_and_streaming() -> None:
    """Issue 15 item 4: more requests than any spec depth, with different max_tokens, some stops, some streamed."""
    probes = mixed_batch.plan(suite())
    assert len(probes) > 4
    assert len({p.max_tokens for p in probes}) > 1 and max(p.max_tokens for p in probes) <= 32
    assert any(p.sampling.get("stop") for p in probes) and not all(p.sampling.get("stop") for p in probes)
    # both kinds of stop: one that ends a request early on prose, one held for the request's whole budget
    # (so the batch stays heterogeneous on a model whose prose writes "," within a few tokens)
    stops = {tuple(p.sampling["stop"]) for p in probes if p.sampling.get("stop")}
    assert stops == {tuple(mixed_batch.STOP_EARLY), tuple(mixed_batch.STOP_HELD)}
    held = [p for p in probes if p.sampling.get("stop") == mixed_batch.STOP_HELD]
    assert max(p.max_tokens for p in held) == max(mixed_batch.MAX_TOKENS)
    assert {p.meta["stream"] for p in probes} == {True, False}
    assert len({p.meta["of"] for p in probes}) > 1


def _view(tmp_path: Path, wrong: dict[str, set[int]], roles: dict[str, str] | None = None,
          rounds: tuple[int, ...] = (0,)) -> Any:
    """Each request stored alone and batched (every round); WRONG names the (arm -> batch indexes) answering
    wrong in the batch, in the rounds ROUNDS (0-based)."""
    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        odd = [5, 8, 8] if arm == "base" else [5, 9, 9]
        out = [{"tokens": CLEAN, "concurrency": 1}]
        for r in range(mixed_batch.ROUNDS):
            wrong_here = p.meta["index"] in wrong.get(arm, set()) and r in rounds
            out.append({"tokens": odd if wrong_here else CLEAN, "concurrency": mixed_batch.BATCH, "repeat": r})
        return out
    return build(tmp_path, mixed_batch.CHANNEL, roles or ROLES, answer)


def test_clean_batch_passes(tmp_path: Path) -> None:
    """The clean control: every output, alone and batched, equals base alone: PASS."""
    view = _view(tmp_path, {})
    rows = by_arm(mixed_batch.judge(view), view)
    assert rows["base"].verdict == "PASS" and rows["mtp2"].verdict == "PASS"
    assert len(rows["mtp2"].details["table"]) == (1 + mixed_batch.ROUNDS) * mixed_batch.BATCH


def test_rows_broken_only_in_the_batch_fail(tmp_path: Path) -> None:
    """Negative control: two rows whose batched output differs from base alone (a token swapped) FAIL."""
    view = _view(tmp_path, {"mtp2": {0, 1}})
    row = by_arm(mixed_batch.judge(view), view)["mtp2"]
    assert row.verdict == "FAIL" and "how=batch" in row.reason
    assert sorted((r["index"], r["how"]) for r in row.details["table"] if r["verdict"] == "FAIL") == [
        (0, "batch"), (1, "batch")]


def test_a_row_broken_in_a_later_round_only_fails(tmp_path: Path) -> None:
    """Negative control of the rounds: a swap that happens in the second batch only is still a FAIL, named so."""
    view = _view(tmp_path, {"mtp2": {3}}, rounds=(1,))
    row = by_arm(mixed_batch.judge(view), view)["mtp2"]
    assert row.verdict == "FAIL"
    assert [(r["index"], r["how"]) for r in row.details["table"] if r["verdict"] == "FAIL"] == [(3, "batch 2")]


def test_base_noise_in_a_later_round_is_not_attributable(tmp_path: Path) -> None:
    """Base differing from itself in the second batch makes spec's divergence there a WARN, as in the first."""
    view = _view(tmp_path, {"mtp2": {0}, "base": {0}}, rounds=(1,))
    rows = by_arm(mixed_batch.judge(view), view)
    assert rows["mtp2"].verdict == "WARN" and rows["base"].details["noisy"] == 1


def test_a_failing_row_shows_both_sides_from_the_first_divergence(tmp_path: Path) -> None:
    """Issue 30: a differing row carries base's and this arm's tokens from the divergence on (texts and ids),
    never each output from its start (identical up to the divergence); an arm that runs on past base's end
    says so in its kind (no logprob margin exists there)."""
    view = _view(tmp_path, {"mtp2": {0}})
    row = next(r for r in by_arm(mixed_batch.judge(view), view)["mtp2"].details["table"] if r["verdict"] == "FAIL")
    at = row["position"]
    assert row["from_token"] == at and row["base_ids"] == CLEAN[at:] and row["here_ids"] == [9, 9][: len(CLEAN) - at]
    assert row["base_ids"] != row["here_ids"] and len(row["base"]) == len(row["base_ids"])

    def past_the_end(p: Probe, arm: str) -> list[dict[str, Any]]:  # the arm keeps one token more in the batch
        batched = CLEAN + [9] if arm == "mtp2" and p.meta["index"] == 0 else CLEAN
        return [{"tokens": CLEAN, "concurrency": 1}, {"tokens": batched, "concurrency": mixed_batch.BATCH}]

    longer = build(tmp_path / "longer", mixed_batch.CHANNEL, ROLES, past_the_end)
    row = next(r for r in by_arm(mixed_batch.judge(longer), longer)["mtp2"].details["table"] if r["verdict"] == "FAIL")
    assert row["kind"] == "here continues past base's end" and row["margin"] is None
    assert (row["from_token"], row["base_ids"], row["here_ids"]) == (len(CLEAN), [], [9])


def test_where_base_differs_in_the_batch_it_is_not_attributable(tmp_path: Path) -> None:
    """Base's own batched output differs from its alone output: spec's divergence there is WARN only."""
    view = _view(tmp_path, {"mtp2": {0}, "base": {0}})
    rows = by_arm(mixed_batch.judge(view), view)
    assert rows["mtp2"].verdict == "WARN" and rows["base"].details["noisy"] == 1
    kinds = [r["kind"] for r in rows["mtp2"].details["table"] if r["verdict"] == "WARN"]
    assert kinds == ["not attributable: base differs alone and in the batch"]


def _outs(tokens: dict[str, list[int]]) -> list[Any]:
    return [SimpleNamespace(request_id=r, new_token_ids=list(t), new_logprobs=None, finish_reason=None,
                            new_sampling_mask=None) for r, t in tokens.items()]


def _sched(stops: dict[str, Any]) -> Any:
    reqs = {r: SimpleNamespace(prompt_token_ids=[ord(r)], num_prompt_tokens=1,
                               sampling_params=SimpleNamespace(stop=s)) for r, s in stops.items()}
    return SimpleNamespace(requests=reqs, cache_config=SimpleNamespace(block_size=128), num_spec_tokens=2)


def test_batch_swap_swaps_two_spec_rows_only_beside_a_stop_string() -> None:
    """The fault: spec rows a and b trade their first new token when the batch holds a request with stops."""
    for stops, want in (({"a": None, "b": None, "c": [","]}, {"a": [21, 12], "b": [11, 22], "c": [31]}),
                        ({"a": None, "b": None, "c": None}, {"a": [11, 12], "b": [21, 22], "c": [31]})):
        sched = _sched(stops)
        outs = _outs({"a": [11, 12], "b": [21, 22], "c": [31]})
        so = SimpleNamespace(scheduled_spec_decode_tokens={"a": [1], "b": [1]}, num_scheduled_tokens=dict.fromkeys("abc", 2))
        field_state.rewrite(sched, so, {0: SimpleNamespace(outputs=outs)}, frozenset({"batch_swap"}))
        assert {o.request_id: o.new_token_ids for o in outs} == want
    alone = _outs({"a": [11, 12]})  # one spec row alone: nothing to swap with
    so = SimpleNamespace(scheduled_spec_decode_tokens={"a": [1]}, num_scheduled_tokens={"a": 2})
    field_state.rewrite(_sched({"a": [","]}), so, {0: SimpleNamespace(outputs=alone)}, frozenset({"batch_swap"}))
    assert alone[0].new_token_ids == [11, 12]
