"""Unit tests of the fault plugin's pure parts: env parsing, transforms, stream rewrite.

No engine. The tensor transform tests need torch (skipped without it); the
rest needs only numpy. Scheduler outputs are hand-made stand-ins with the
fields the patch reads (vLLM's ``SchedulerOutput``, ``ModelRunnerOutput``,
``EngineCoreOutputs``/``EngineCoreOutput`` and ``LogprobsLists``).
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import types
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pytest

from observatory import faults
from observatory.faults import patches, transforms
from observatory.model.errors import ObservatoryError

# --------------------------------------------------------------------------
# Env parsing and register()
# --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "  ", "none", "NONE", "off", "0", "false", "no"])
def test_parse_off(value):
    assert faults.parse_faults(value) == frozenset()


@pytest.mark.parametrize(
    "value, expected",
    [
        ("ghost", {"ghost"}),
        (" Ghost ", {"ghost"}),
        ("accept_all", {"accept_all"}),
        ("accept-all", {"accept_all"}),
        ("drop_bonus,ghost", {"drop_bonus", "ghost"}),
        ("accept_all, drop_bonus", {"accept_all", "drop_bonus"}),
        ("ghost ghost", {"ghost"}),
    ],
)
def test_parse_names(value, expected):
    assert faults.parse_faults(value) == frozenset(expected)


@pytest.mark.parametrize("value", ["gost", "ghost,bogus", "all", "accept all"])
def test_parse_unknown_raises_clear_error(value):
    with pytest.raises(faults.FaultConfigError) as exc:
        faults.parse_faults(value)
    msg = str(exc.value)
    assert faults.ENV_VAR in msg and "known faults" in msg
    for name in faults.FAULTS:
        assert name in msg
    # raised inside the engine (the plugin imports nothing else of ours): a ValueError its log shows
    assert isinstance(exc.value, ValueError) and not isinstance(exc.value, ObservatoryError)


def test_active_faults_reads_mapping():
    assert faults.active_faults({}) == frozenset()
    assert faults.active_faults({faults.ENV_VAR: "ghost"}) == {"ghost"}


def test_register_inert_without_env(monkeypatch):
    monkeypatch.delenv(faults.ENV_VAR, raising=False)
    called = []
    monkeypatch.setattr(patches, "install", lambda f: called.append(f))
    faults.register()
    assert called == []


def test_register_unknown_raises(monkeypatch):
    monkeypatch.setenv(faults.ENV_VAR, "nope")
    with pytest.raises(faults.FaultConfigError):
        faults.register()


def test_register_installs(monkeypatch):
    monkeypatch.setenv(faults.ENV_VAR, "ghost,accept_all")
    called = []
    monkeypatch.setattr(patches, "install", lambda f: called.append(f))
    faults.register()
    assert called == [frozenset({"ghost", "accept_all"})]


def test_import_is_light():
    """Importing the plugin module pulls in neither vLLM nor torch nor the patches."""
    code = (
        "import sys, observatory.faults as f; "
        "bad = [m for m in ('vllm', 'torch', 'observatory.faults.patches') if m in sys.modules]; "
        "f.register(); "
        "bad += [m for m in ('vllm', 'torch', 'observatory.faults.patches') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != faults.ENV_VAR}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.strip() == ""


# --------------------------------------------------------------------------
# accept_all (V1 rejection sampler output)
# --------------------------------------------------------------------------


def test_accept_all_rows():
    torch = pytest.importorskip("torch")
    P = -1
    # Three requests: 2 drafts (first rejected), 0 drafts, 2 drafts (all accepted).
    out = torch.tensor([[50, P, P], [60, P, P], [7, 8, 9]], dtype=torch.int32)
    drafts = torch.tensor([11, 12, 7, 8], dtype=torch.int32)
    bonus = torch.tensor([[13], [60], [9]], dtype=torch.int64)
    new = transforms.accept_all_rows(out, drafts, [2, 0, 2], bonus)
    assert new.dtype == torch.int32
    assert new.tolist() == [[11, 12, 13], [60, P, P], [7, 8, 9]]
    assert out.tolist()[0] == [50, P, P]  # input not modified


def test_accept_all_rows_uneven_and_padded_drafts():
    torch = pytest.importorskip("torch")
    P = -1
    out = torch.tensor([[5, P, P], [6, P, P], [1, 2, P]], dtype=torch.int32)
    # request 1 has a padded (-1) draft: vLLM rejects it, so the row is kept.
    drafts = torch.tensor([21, 31, -1, 1], dtype=torch.int32)
    bonus = torch.tensor([22, 33, 2])
    new = transforms.accept_all_rows(out, drafts, [1, 2, 1], bonus)
    assert new.tolist() == [[21, 22, P], [6, P, P], [1, 2, P]]


def test_accept_all_rows_no_drafts_at_all():
    torch = pytest.importorskip("torch")
    out = torch.tensor([[4], [5]], dtype=torch.int32)
    new = transforms.accept_all_rows(out, torch.empty(0, dtype=torch.int32), [0, 0], out)
    assert new.tolist() == [[4], [5]]


# --------------------------------------------------------------------------
# Stream transforms
# --------------------------------------------------------------------------


class LP(NamedTuple):  # same layout as vllm.v1.outputs.LogprobsLists
    logprob_token_ids: np.ndarray
    logprobs: np.ndarray
    sampled_token_ranks: np.ndarray
    cu_num_generated_tokens: list[int] | None = None


def lp_for(tokens: list[int]) -> LP:
    ids = np.array([[t, t + 1000] for t in tokens], dtype=np.int64)
    vals = -np.arange(len(tokens) * 2, dtype=np.float32).reshape(-1, 2)
    return LP(ids, vals, np.ones(len(tokens), dtype=np.int64))


@pytest.mark.parametrize(
    "drafts, generated, per_step, expected",
    [
        (1, 2, 1, 1),  # k=1 fully accepted: bonus at index 1
        (3, 4, 1, 3),
        (1, 1, 1, None),  # rejected
        (3, 2, 1, None),  # partially accepted
        (0, 1, 1, None),  # not a spec step
        (2, 3, 0, None),  # no sampled token per step
    ],
)
def test_bonus_index(drafts, generated, per_step, expected):
    assert transforms.bonus_index(drafts, generated, per_step) == expected


def test_drop_index_keeps_logprobs_aligned():
    toks, lp = transforms.drop_index([7, 8, 9], lp_for([7, 8, 9]), 2)
    assert toks == [7, 8]
    assert lp.logprob_token_ids[:, 0].tolist() == [7, 8]
    assert len(lp.logprobs) == len(lp.sampled_token_ranks) == 2
    assert transforms.drop_index([7, 8], None, 1) == ([7], None)


def test_prepend_token_with_row():
    prev = lp_for([5])
    row = transforms.logprob_row(prev, 0)
    toks, lp = transforms.prepend_token([7, 8], lp_for([7, 8]), 5, row)
    assert toks == [5, 7, 8]
    assert lp.logprob_token_ids[:, 0].tolist() == [5, 7, 8]
    assert lp.logprobs.shape == (3, 2) and lp.sampled_token_ranks.shape == (3,)
    assert transforms.prepend_token([7], None, 5, None) == ([5, 7], None)
    with pytest.raises(ValueError):
        transforms.prepend_token([7], lp_for([7]), 5, None)


# --------------------------------------------------------------------------
# Scheduler -> client rewrite (ghost, drop_bonus)
# --------------------------------------------------------------------------


@dataclass
class ECO:  # EngineCoreOutput stand-in
    request_id: str
    new_token_ids: list[int]
    new_logprobs: Any = None
    finish_reason: Any = None
    new_sampling_mask: Any = None


@dataclass
class ECOs:  # EngineCoreOutputs stand-in
    outputs: list[ECO] = field(default_factory=list)


class FakeScheduler:
    num_sampled_tokens_per_step = 1

    def __init__(self):
        self.requests = {}


def step(sched, faults_, spec: dict, sampled: dict, emitted: dict | None = None, lps=False):
    """One update_from_output: `sampled` = runner tokens per request, `emitted` =
    what the original scheduler put in new_token_ids (default: all of them)."""
    emitted = emitted or sampled
    order = list(sampled)
    sched_out = types.SimpleNamespace(scheduled_spec_decode_tokens=spec)
    mro = types.SimpleNamespace(
        sampled_token_ids=[sampled[r] for r in order],
        req_id_to_index={r: i for i, r in enumerate(order)},
    )
    outs = [ECO(r, list(emitted[r]), lp_for(emitted[r]) if lps else None) for r in order]
    patches.rewrite_step_outputs(sched, sched_out, mro, {0: ECOs(outs)}, frozenset(faults_))
    return {o.request_id: o for o in outs}


def test_drop_bonus_only_on_fully_accepted_spec_steps():
    s = FakeScheduler()
    f = {"drop_bonus"}
    # prefill (no drafts): untouched
    assert step(s, f, {}, {"a": [1]})["a"].new_token_ids == [1]
    # rejected draft: untouched
    assert step(s, f, {"a": [9]}, {"a": [2]})["a"].new_token_ids == [2]
    # fully accepted: bonus (last) dropped, logprobs too
    o = step(s, f, {"a": [3]}, {"a": [3, 4]}, lps=True)["a"]
    assert o.new_token_ids == [3]
    assert o.new_logprobs.logprob_token_ids[:, 0].tolist() == [3]
    # k=2 fully accepted
    assert step(s, f, {"a": [5, 6]}, {"a": [5, 6, 7]})["a"].new_token_ids == [5, 6]
    # k=2 partially accepted
    assert step(s, f, {"a": [5, 9]}, {"a": [5, 6]})["a"].new_token_ids == [5, 6]
    # stop token cut the output before the bonus: nothing to drop
    out = step(s, f, {"a": [3]}, {"a": [3, 4]}, emitted={"a": [3]})["a"]
    assert out.new_token_ids == [3]


def test_ghost_repeats_previous_steps_last_token():
    s = FakeScheduler()
    f = {"ghost"}
    assert step(s, f, {}, {"a": [1]}, lps=True)["a"].new_token_ids == [1]  # prefill
    o = step(s, f, {"a": [2]}, {"a": [2, 3]}, lps=True)["a"]
    assert o.new_token_ids == [1, 2, 3]
    assert o.new_logprobs.logprob_token_ids[:, 0].tolist() == [1, 2, 3]
    o = step(s, f, {"a": [9]}, {"a": [4]}, lps=True)["a"]
    assert o.new_token_ids == [3, 4]
    assert o.new_logprobs.logprob_token_ids[:, 0].tolist() == [3, 4]


def test_ghost_not_on_non_spec_steps_and_per_request():
    s = FakeScheduler()
    f = {"ghost"}
    step(s, f, {}, {"a": [1], "b": [10]})
    out = step(s, f, {"a": [2]}, {"a": [2], "b": [11]})  # b has no drafts this step
    assert out["a"].new_token_ids == [1, 2]
    assert out["b"].new_token_ids == [11]
    out = step(s, f, {"b": [12]}, {"b": [12, 13]})
    assert out["b"].new_token_ids == [11, 12, 13]


def test_ghost_state_dropped_at_finish():
    s = FakeScheduler()
    step(s, {"ghost"}, {}, {"a": [1]})
    sched_out = types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [2]})
    mro = types.SimpleNamespace(sampled_token_ids=[[2]], req_id_to_index={"a": 0})
    o = ECO("a", [2], finish_reason="stop")
    patches.rewrite_step_outputs(s, sched_out, mro, {0: ECOs([o])}, frozenset({"ghost"}))
    assert o.new_token_ids == [1, 2]
    assert "a" not in s.__dict__[patches._STATE_ATTR]


def test_ghost_and_drop_bonus_together():
    s = FakeScheduler()
    f = {"ghost", "drop_bonus"}
    step(s, f, {}, {"a": [1]})
    # fully accepted [2, 3]: bonus 3 dropped, ghost 1 prepended; last emitted = 2
    assert step(s, f, {"a": [2]}, {"a": [2, 3]})["a"].new_token_ids == [1, 2]
    assert step(s, f, {"a": [9]}, {"a": [4]})["a"].new_token_ids == [2, 4]


def test_no_faults_in_rewrite_is_identity():
    s = FakeScheduler()
    assert step(s, set(), {"a": [2]}, {"a": [2, 3]})["a"].new_token_ids == [2, 3]


# --------------------------------------------------------------------------
# Patch installation (on stand-in modules; no vLLM needed)
# --------------------------------------------------------------------------


def _fake_module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    return m


def test_install_patches_loaded_module_once(monkeypatch):
    class Scheduler:
        def update_from_output(self, scheduler_output, model_runner_output):
            return {0: ECOs([ECO("a", [2, 3])])}

    mod = _fake_module(patches.SCHEDULER, Scheduler=Scheduler)
    monkeypatch.setitem(sys.modules, patches.SCHEDULER, mod)
    assert patches.install(frozenset({"drop_bonus"})) == [patches.SCHEDULER]
    first = Scheduler.update_from_output
    patches.install(frozenset({"drop_bonus"}))  # idempotent
    assert Scheduler.update_from_output is first
    s = Scheduler()
    s.num_sampled_tokens_per_step = 1
    res = s.update_from_output(
        types.SimpleNamespace(scheduled_spec_decode_tokens={"a": [2]}),
        types.SimpleNamespace(sampled_token_ids=[[2, 3]], req_id_to_index={"a": 0}),
    )
    assert res[0].outputs[0].new_token_ids == [2]


def test_install_v1_sampler_wraps_rejection_sample(monkeypatch):
    torch = pytest.importorskip("torch")

    def rejection_sample(
        draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens,
        draft_probs, target_logits, bonus_token_ids, sampling_metadata,
        synthetic_mode=False, synthetic_conditional_rates=None, use_fp64_gumbel=False,
    ):  # fmt: skip
        return torch.tensor([[50, -1]], dtype=torch.int32)  # draft rejected

    mod = _fake_module(patches.V1_SAMPLER, rejection_sample=rejection_sample,
                       PLACEHOLDER_TOKEN_ID=-1)  # fmt: skip
    monkeypatch.setitem(sys.modules, patches.V1_SAMPLER, mod)
    patches.install(frozenset({"accept_all"}))
    out = mod.rejection_sample(
        torch.tensor([11], dtype=torch.int32), [1], 1, torch.tensor([1]), None,
        torch.zeros(1, 4), torch.tensor([[12]]), object(),
    )  # fmt: skip
    assert out.tolist() == [[11, 12]]


def test_install_v2_sampler_forces_synthetic_acceptance(monkeypatch):
    torch = pytest.importorskip("torch")
    seen = {}

    def rejection_sample(
        target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
        expanded_idx_mapping, expanded_local_pos, temperature, seed,
        num_speculative_steps, synthetic_conditional_rates=None, use_fp64=False,
        use_block_verification=False,
    ):  # fmt: skip
        seen["rates"] = synthetic_conditional_rates
        seen["block"] = use_block_verification
        return "sampled", "num_sampled"

    mod = _fake_module(patches.V2_SAMPLER, rejection_sample=rejection_sample)
    monkeypatch.setitem(sys.modules, patches.V2_SAMPLER, mod)
    patches.install(frozenset({"accept_all"}))
    args = [torch.zeros(2, 4)] + [None] * 9 + [2]
    assert mod.rejection_sample(*args, use_block_verification=True) == ("sampled", "num_sampled")
    assert seen["rates"].tolist() == [2.0, 2.0] and seen["block"] is False


def test_post_import_hook_patches_on_first_import(tmp_path, monkeypatch):
    """A target imported after install() is patched right after it executes."""
    pkg = tmp_path / "fakevllm_obs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sched.py").write_text(
        "class Scheduler:\n    def update_from_output(self, so, mro):\n        return {}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    name = "fakevllm_obs.sched"
    monkeypatch.setitem(patches.TARGETS, name, (frozenset({"ghost"}), patches._patch_scheduler))
    for t in (patches.V1_SAMPLER, patches.V2_SAMPLER, patches.SCHEDULER):
        monkeypatch.delitem(patches.TARGETS, t)
    try:
        patches.install(frozenset({"ghost"}))
        assert name not in sys.modules
        mod = importlib.import_module(name)
        assert getattr(mod.Scheduler.update_from_output, patches._MARK, False)
        assert mod.__spec__.origin.endswith("sched.py")
    finally:
        sys.modules.pop(name, None)
        sys.modules.pop("fakevllm_obs", None)
