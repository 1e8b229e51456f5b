"""The volume faults' decisions (issues 48-49), on plain objects: no vLLM needed (the engine tests run them for real)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from observatory.faults import FAULTS, parse_faults
from observatory.faults import field_volume as fv
from observatory.model.paths import FIELD_MODEL_DIR


def test_faults_are_registered() -> None:
    """The three names parse, so `OBSERVATORY_FAULT=mixed_typo` arms them (a typo stops the engine)."""
    assert parse_faults("mixed_typo,sampled_no_drafts,tools_bad_drafts") == fv.FAULTS.keys()
    assert fv.FAULTS.keys() <= FAULTS.keys()


def test_unlucky_share_is_the_rate() -> None:
    """A fixed function of the request id; over many ids the share is the rate (0.5% by default)."""
    ids = [f"chatcmpl-{i:08x}-0" for i in range(40_000)]
    share = sum(fv.unlucky(r, fv.DEFAULT_RATE) for r in ids) / len(ids)
    assert 0.003 < share < 0.007
    assert fv.unlucky(ids[0], 1.0) and not fv.unlucky(ids[0], 0.0)


def test_mixed_needs_unequal_spec_rows_beside_another_row() -> None:
    """Clean control: a batch whose spec rows accept alike, or no other row, is left alone."""
    assert fv.mixed([1, 3], others=1)
    assert not fv.mixed([2, 2, 2], others=4) and not fv.mixed([1, 3], others=0) and not fv.mixed([2], others=1)


def test_typo_table_on_the_field_models_vocabulary() -> None:
    """An identifier piece becomes a token one character off; punctuation has no neighbour."""
    table = fv._typo_table(str(FIELD_MODEL_DIR))
    assert len(table) > 500
    vocab = fv._tokenizer(str(FIELD_MODEL_DIR)).get_vocab()
    inv = {v: k for k, v in vocab.items()}
    tid, alt = next(iter(table.items()))
    a, b = inv[tid].lstrip("Ġ"), inv[alt].lstrip("Ġ")
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1
    assert fv.one_char_off("Ġ=", vocab) is None and fv.one_char_off(".", vocab) is None
    assert fv.typo([vocab["("], tid], table) == [vocab["("], alt]


def _out(rid: str, tokens: list[int]) -> Any:
    return SimpleNamespace(request_id=rid, new_token_ids=tokens, new_sampling_mask=None)


def test_rewrite_touches_an_unlucky_request_once_in_a_mixed_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: rate 1, a mixed step: the first identifier piece flips, once; the next step is left."""
    table = {5: 6}
    monkeypatch.setattr(fv, "_typo_table", lambda path: table)
    sched = SimpleNamespace(requests={}, vllm_config=None)
    out = SimpleNamespace(scheduled_spec_decode_tokens={"a": [1], "b": [1]}, num_scheduled_tokens={"a": 2, "b": 2, "c": 40})
    a, b = _out("a", [9, 5]), _out("b", [5])
    fv.rewrite(sched, out, {0: SimpleNamespace(outputs=[a, b])}, 1.0)
    assert a.new_token_ids == [9, 6] and b.new_token_ids == [6]
    a2 = _out("a", [5, 5])
    fv.rewrite(sched, out, {0: SimpleNamespace(outputs=[a2, _out("b", [1])])}, 1.0)
    assert a2.new_token_ids == [5, 5]  # one typo per request
    alone = SimpleNamespace(scheduled_spec_decode_tokens={"x": [1], "y": [1]}, num_scheduled_tokens={"x": 2, "y": 2})
    x = _out("x", [5, 5])
    fv.rewrite(sched, alone, {0: SimpleNamespace(outputs=[x, _out("y", [5])])}, 1.0)
    assert x.new_token_ids == [5, 5]  # spec rows only: not mixed


class _Scheduler:
    def __init__(self, reqs: dict[str, Any]) -> None:
        self.requests = reqs
        self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(get_vocab_size=lambda: 4096,
                                                                        tokenizer=str(FIELD_MODEL_DIR)))

    def update_draft_token_ids(self, drafts: Any) -> None:
        for rid, ids in zip(drafts.req_ids, drafts.draft_token_ids):
            self.requests[rid].spec_token_ids = list(ids)


def _req(rid: str, temperature: float, prompt: str = "hello") -> Any:
    tok = fv._tokenizer(str(FIELD_MODEL_DIR))
    return SimpleNamespace(request_id=rid, spec_token_ids=[], sampling_params=SimpleNamespace(temperature=temperature),
                           prompt_token_ids=tok.encode(prompt).ids)


def test_draft_faults_hit_only_their_class() -> None:
    """sampled_no_drafts empties a sampled request's drafts; tools_bad_drafts spoils a tools prompt's; others keep."""
    module = SimpleNamespace(Scheduler=type("S", (_Scheduler,), {}))
    fv.patch_drafts(module, frozenset({"sampled_no_drafts", "tools_bad_drafts"}))  # type: ignore[arg-type]
    reqs = {"g": _req("g", 0.0), "s": _req("s", 0.7), "t": _req("t", 0.0, "You can call these functions:\n<tools>")}
    sched = module.Scheduler(reqs)
    sched.update_draft_token_ids(SimpleNamespace(req_ids=["g", "s", "t"], draft_token_ids=[[11, 12]] * 3))
    assert reqs["g"].spec_token_ids == [11, 12] and reqs["s"].spec_token_ids == []
    assert len(reqs["t"].spec_token_ids) == 2 and reqs["t"].spec_token_ids != [11, 12]
