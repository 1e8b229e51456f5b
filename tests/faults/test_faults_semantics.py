"""The semantics faults (issue 15 item 12) on stand-ins shaped like vLLM's hook points (the engine test runs them for real)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from observatory.faults import FAULTS, field_semantics, parse_faults
from observatory.faults.patches import TARGETS


def test_the_four_faults_are_registered_with_a_hook() -> None:
    """Each fault is a known name and has a target module."""
    names = {"past_stop", "stream_drop", "draft_noise", "inflate_accepted"}
    assert parse_faults(",".join(sorted(names))) == names and names <= set(FAULTS)
    served = set().union(*(serves for serves, _ in TARGETS.values()))
    assert names <= served


def _detokenizer_module() -> types.ModuleType:
    """A module shaped like vllm.v1.engine.detokenizer: update() calls the module's check_stop_strings."""
    mod = types.ModuleType("fake_detokenizer")

    def check_stop_strings(output_text: str, new_char_count: int, stop: list[str], include_in_output: bool) -> Any:
        i = output_text.find(stop[0])
        return None if i < 0 else (stop[0], i)

    class BaseIncrementalDetokenizer:
        def __init__(self) -> None:
            self.output_text = ""

        def update(self, new_token_ids: list[int], stop_terminated: bool) -> Any:
            self.output_text += "".join(f" t{i}" for i in new_token_ids)
            found = mod.check_stop_strings(self.output_text, 1, ["t3"], False)
            if found is not None and found[1] != -1:
                self.output_text = self.output_text[: found[1]]
            return found

    mod.check_stop_strings = check_stop_strings  # type: ignore[attr-defined]
    mod.BaseIncrementalDetokenizer = BaseIncrementalDetokenizer  # type: ignore[attr-defined]
    return mod


def test_past_stop_leaks_only_on_multi_token_steps() -> None:
    """past_stop: a stop found in a step of several tokens no longer cuts the text; one token a step still does."""
    mod = _detokenizer_module()
    field_semantics._patch_detokenizer(mod, frozenset({"past_stop"}))
    one = mod.BaseIncrementalDetokenizer()
    for i in (1, 2, 3, 4):
        if one.update([i], False):
            break
    assert one.output_text == " t1 t2 "
    spec = mod.BaseIncrementalDetokenizer()
    spec.update([1], False)
    spec.update([2, 3, 4], False)
    assert spec.output_text == " t1 t2 t3 t4"


def test_stream_drop_cuts_the_last_token_text_only() -> None:
    """stream_drop: the last token's text leaves the delta; a text not ending with it is left alone."""
    assert field_semantics.cut_last_text(" one two", " two") == " one"
    assert field_semantics.cut_last_text(" one two", " three") == " one two"


def test_inflate_accepted_counts_every_draft_step_twice() -> None:
    """inflate_accepted: each observed draft step is counted twice (alpha and tau unchanged, totals doubled)."""
    mod = types.ModuleType("fake_metrics")

    class SpecDecodingStats:
        def __init__(self) -> None:
            self.num_drafts = self.num_accepted_tokens = 0

        def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
            self.num_drafts += 1
            self.num_accepted_tokens += num_accepted_tokens

    mod.SpecDecodingStats = SpecDecodingStats  # type: ignore[attr-defined]
    field_semantics._patch_spec_metrics(mod, frozenset({"inflate_accepted"}))
    stats = mod.SpecDecodingStats()
    stats.observe_draft(2, 1)
    assert (stats.num_drafts, stats.num_accepted_tokens) == (2, 2)


def test_draft_noise_keeps_the_shape() -> None:
    """draft_noise: random ids of the drafts' shape, lists and tensors alike."""
    import torch

    gen = torch.Generator().manual_seed(0)
    t = torch.zeros((3, 2), dtype=torch.int32)
    noisy = field_semantics.noise_like(t, 50, gen)
    assert noisy.shape == t.shape and noisy.dtype == t.dtype and int(noisy.max()) < 50
    rows = field_semantics.noise_like([[1, 2], [3]], 50, gen)
    assert [len(r) for r in rows] == [2, 1]


def test_draft_noise_can_replace_a_share_of_the_rows() -> None:
    """OBSERVATORY_DRAFT_NOISE_FRACTION: a drafter a third worse, not only a dead one; all rows by default."""
    import torch

    gen = torch.Generator().manual_seed(0)
    drafts = torch.full((3000, 2), 7, dtype=torch.int64)
    out = field_semantics.partly_noise(drafts, 50_000, gen, 0.33)
    replaced = (out != 7).any(dim=1).float().mean().item()
    assert 0.30 < replaced < 0.36 and out.shape == drafts.shape
    assert ((out == 7).all(dim=1) | (out != 7).any(dim=1)).all()  # a row is kept whole or replaced whole
    rows = field_semantics.partly_noise([[7, 7]] * 400, 50_000, gen, 0.5)
    assert 150 < sum(r != [7, 7] for r in rows) < 250
    assert field_semantics.noise_fraction({}) == 1.0
    assert field_semantics.noise_fraction({"OBSERVATORY_DRAFT_NOISE_FRACTION": "0.33"}) == 0.33
    for bad in ("0", "1.5", "x"):
        with pytest.raises(ValueError, match="OBSERVATORY_DRAFT_NOISE_FRACTION"):
            field_semantics.noise_fraction({"OBSERVATORY_DRAFT_NOISE_FRACTION": bad})
