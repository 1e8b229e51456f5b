"""The faults of issue 49 item 12 (observatory/faults/field_boundaries.py), as pure functions: no vLLM needed."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace
from typing import Any

import numpy as np

from observatory.faults import FAULTS, field_boundaries, parse_faults, patches, repairs
from observatory.session.fault_selftest import resolve_repairs


def _outs(tokens: dict[str, list[int]]) -> list[SimpleNamespace]:
    return [SimpleNamespace(request_id=r, new_token_ids=list(t), new_logprobs=None, finish_reason=None)
            for r, t in tokens.items()]


def _sched(num_tokens: dict[str, int], limit: int = 100, k: int = 2) -> SimpleNamespace:
    reqs = {r: SimpleNamespace(num_tokens=n, output_token_ids=[7, 8, 9]) for r, n in num_tokens.items()}
    return SimpleNamespace(num_spec_tokens=k, max_model_len=limit, requests=reqs)


def test_the_faults_are_registered_and_parse() -> None:
    """Issue 49 item 12: each fault has a name the plugin knows, and its patch targets are installed."""
    names = {"limit_neighbour", "abort_stale", "stream_top_copy", "stream_args_drop", "min_tokens_short"}
    assert names <= FAULTS.keys()
    assert parse_faults(",".join(sorted(names))) == names
    assert field_boundaries.SCHEDULER_FAULTS <= patches.TARGETS[patches.SCHEDULER][0]
    assert any(field_boundaries.TARGETS is t for t in patches.MORE_TARGETS)


def test_at_limit_names_requests_with_fewer_free_positions_than_k_plus_one() -> None:
    """limit_neighbour's condition: max_model_len - num_tokens < k + 1, read before the step."""
    sched = _sched({"a": 97, "b": 98, "c": 50}, limit=100, k=2)  # room 3, 2, 50
    so = SimpleNamespace(num_scheduled_tokens={"a": 1, "b": 1, "c": 3})
    assert field_boundaries.at_limit(sched, so) == {"b"}
    assert field_boundaries.at_limit(_sched({"a": 99}, k=0), SimpleNamespace(num_scheduled_tokens={"a": 1})) == set()


def test_limit_neighbour_corrupts_spec_neighbours_only() -> None:
    """A neighbour that verified drafts gets the boundary request's first token; non-spec rows and the boundary
    request itself are intact; nothing changes in a step without a boundary request."""
    outs = _outs({"b": [5], "n1": [11, 12], "n2": [21]})
    so = SimpleNamespace(scheduled_spec_decode_tokens={"n1": [1], "b": [1]})
    field_boundaries.rewrite(_sched({}), so, {0: SimpleNamespace(outputs=outs)}, frozenset({"limit_neighbour"}), {"b"})
    assert {o.request_id: o.new_token_ids for o in outs} == {"b": [5], "n1": [5, 12], "n2": [21]}
    clean = _outs({"n1": [11, 12]})
    field_boundaries.rewrite(_sched({}), so, {0: SimpleNamespace(outputs=clean)}, frozenset({"limit_neighbour"}), set())
    assert clean[0].new_token_ids == [11, 12]


def test_set_first_moves_the_logprob_row_with_the_token() -> None:
    """The client reads token ids from the logprob rows: the replaced token's row travels with it."""
    lp = namedtuple("lp", "ids lps ranks")  # a LogprobsLists-like tuple
    mine = lp(np.array([[11, 1], [12, 2]]), np.array([[-0.1, -2.0], [-0.2, -3.0]]), np.array([1, 1]))
    row = lp(np.array([[5, 6]]), np.array([[-0.5, -1.0]]), np.array([2]))
    tokens, got = field_boundaries.set_first([11, 12], mine, 5, row)
    assert tokens == [5, 12] and got.ids.tolist() == [[5, 6], [12, 2]] and got.ranks.tolist() == [2, 1]
    tokens, got = field_boundaries.set_first([11, 12], mine, 9)
    assert tokens == [9, 12] and got.ids.tolist() == [[9, 1], [12, 2]]


def test_abort_stale_answers_the_next_request_from_the_aborted_slot() -> None:
    """After an abort, the first new request's first spec step gets the aborted request's last token first;
    requests known at the abort, non-spec steps and later requests are intact; other finishes note nothing."""
    sched = _sched({"old": 10, "gone": 20})
    field_boundaries.note_abort(sched, ["gone"], SimpleNamespace(name="FINISHED_STOPPED"))
    assert field_boundaries._STALE not in sched.__dict__
    field_boundaries.note_abort(sched, ["gone"], SimpleNamespace(name="FINISHED_ABORTED"))
    outs = _outs({"old": [1, 2], "new": [3, 4], "later": [5, 6]})
    so = SimpleNamespace(scheduled_spec_decode_tokens={"old": [1], "new": [1], "later": [1]})
    field_boundaries.rewrite(sched, so, {0: SimpleNamespace(outputs=outs)}, frozenset({"abort_stale"}), set())
    assert {o.request_id: o.new_token_ids for o in outs} == {"old": [1, 2], "new": [9, 3, 4], "later": [5, 6]}
    assert field_boundaries._STALE not in sched.__dict__  # one request per abort


def test_copy_first_top_keeps_each_position_own_token_first() -> None:
    """stream_top_copy: positions after the first take the first's entries, their own sampled token first."""
    a, b, c = {1: "a1", 2: "a2", 3: "a3"}, {4: "b4", 1: "b1"}, {5: "c5"}
    got = field_boundaries.copy_first_top([1, 4, 5], [a, b, c])
    assert got[0] == a and list(got[1]) == [4, 1, 2, 3] and got[1][4] == "b4" and got[1][1] == "a1"
    assert list(got[2]) == [5, 1, 2, 3]


def test_drop_arguments_keeps_names_and_drops_fragments() -> None:
    """stream_args_drop: argument fragments leave the delta; a name delta stays (without arguments)."""
    name_only = SimpleNamespace(function=SimpleNamespace(name="f", arguments=None))
    args_only = SimpleNamespace(function={"arguments": '{"a": 1'})
    both = SimpleNamespace(function=SimpleNamespace(name="g", arguments="{}"))
    kept = field_boundaries.drop_arguments([name_only, args_only, both])
    assert kept == [name_only, both] and both.function.arguments is None


def test_one_short_lowers_each_min_tokens_by_one() -> None:
    """min_tokens_short: the processor's entries (min_tokens, outputs, stop ids, structured) one lower."""
    entries: dict[int, tuple[Any, ...]] = {0: (5, [1, 2], {0}, False), 3: (0, [], {0}, False)}
    assert field_boundaries.one_short(entries) == {0: (4, [1, 2], {0}, False), 3: (0, [], {0}, False)}


def test_the_min_tokens_bonus_repair_masks_the_bonus_row_from_its_own_position() -> None:
    """The repair of the engine bug stop_bounds found: a request's bonus row keeps the stop tokens masked only
    while its committed output plus the step's drafts is below min_tokens (entries (min_tokens, outputs, ...))."""
    min_toks = {0: (27, [0] * 26, {2}, False), 1: (27, [0] * 25, {2}, False), 2: (10, [0] * 3, {2}, False)}
    drafts = [[5], [5], [5, 6]]
    # row 0: 26 + 1 = 27, not below 27: unmasked (the bug masked it); row 1: 25 + 1 < 27: masked; row 2 masked
    assert repairs.bonus_rows([0, 1, 2, 3], min_toks, drafts) == [False, True, True, True]
    assert repairs.bonus_rows([0], min_toks, None) == [True]
    assert "min_tokens_bonus" in repairs.CPU_REPAIRS and repairs.ENGINE_BUGS["min_tokens_bonus"].breaks == (
        "stop_bounds",)
    assert resolve_repairs("auto", ["stop_bounds"], n_gpus=0) == ("min_tokens_bonus",)


def test_prepend_gives_the_stale_token_a_row_of_its_own() -> None:
    """abort_stale's token travels with a logprob row whose sampled id is it (the client reads ids from rows)."""
    lp = namedtuple("lp", "ids lps ranks")
    mine = lp(np.array([[11, 1], [12, 2]]), np.array([[-0.1, -2.0], [-0.2, -3.0]]), np.array([1, 1]))
    tokens, got = field_boundaries.prepend([11, 12], mine, 9)
    assert tokens == [9, 11, 12] and got.ids.tolist() == [[9, 1], [11, 1], [12, 2]] and len(got.ranks) == 3
