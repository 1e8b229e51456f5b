"""Channels ``teacher`` and ``seeds`` (issue 28 items 3 and 4): judges on stored rows, faults on fake tensors.

The judges are fed rows shaped as the engine stores them (a decode result and
its teacher-forced scores; copies of a seeded request; the choices of an n
request) through a real store. The engine run is
tests/real_engine/test_engine_channels_teacher_seeds.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from observatory.channels import seeds, teacher
from observatory.faults import FAULTS, field_seeds, patches
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, BASE, FAULT, SPEC
from observatory.store.session_store import Store
from tests.support.channel_rows import channel_view, verdicts

SUITE = [Probe(name="count", category="counting", messages=[{"role": "user", "content": "Count."}], max_tokens=64),
         Probe(name="count2", category="counting", messages=[{"role": "user", "content": "Count 2."}]),
         Probe(name="tool", category="tools", messages=[{"role": "user", "content": "t"}], tools=[{"x": 1}]),
         Probe(name="poem", category="prose_en", prompt="A poem:")]


# -- teacher ------------------------------------------------------------------------------------------------

IDS = [19, 14, 223, 20, 14, 223]
LPS = [-3e-5, -3e-4, -1e-7, -1e-5, -2e-6, -0.7]


def _scored(lps: list[float], ids: list[int] = IDS) -> dict[str, Any]:
    return {"ok": True, "token_ids": ids, "top_logprobs": [[[t, lp], [t + 1, lp - 9.0]] for t, lp in zip(ids, lps)],
            "finish_reason": "length"}


def _teacher(store: Store, decode: dict[str, list[float]], forced: dict[str, list[float]] | None = None,
             ids: dict[str, list[int]] | None = None) -> dict[tuple[str, str], tuple[str, str]]:
    """Arms base, base#2, mtp2 (and the fault arm when DECODE names it): decode logprobs as given, forced LPS."""
    roles = {"base": BASE, "base#2": AA_COPY, "mtp2": SPEC, "mtp2+fault=logprob_row": FAULT}
    arms = [(n, roles[n]) for n in decode]

    def rows(arm: str, p: Probe) -> list[tuple[int, dict[str, Any]]]:
        tok = (ids or {}).get(arm, IDS)
        return [(teacher.DECODE, _scored(decode[arm], tok)), (teacher.FORCED, _scored((forced or {}).get(arm, LPS), tok))]

    view = channel_view(store, teacher.NAME, teacher.plan(SUITE), arms, rows)
    return verdicts(view, teacher.judge)


def test_teacher_plan_takes_one_probe_per_category_without_tools() -> None:
    probes = teacher.plan(SUITE)
    assert [p.meta["of"] for p in probes] == ["count", "poem"]
    assert all(p.channel == teacher.NAME and p.greedy and p.max_tokens <= teacher.MAX_TOKENS for p in probes)


def test_teacher_clean_arms_pass_within_the_measured_noise(store: Store) -> None:
    """Clean control: decode and prefill differ by what base showed on the CPU engine (0.016 at most)."""
    noisy = [lp + 0.016 * (-1) ** i for i, lp in enumerate(LPS)]
    got = _teacher(store, {"base": noisy, "base#2": LPS, "mtp2": noisy})
    assert {k: v[0] for k, v in got.items()} == {("base", "teacher"): "PASS", ("base#2", "teacher"): "PASS",
                                                 ("mtp2", "teacher"): "PASS"}


def test_teacher_fails_logprobs_from_the_neighbouring_row(store: Store) -> None:
    """Negative control: the fault's signature (an accepted draft's logprob from the next position's row,
    -18 nats as the CPU engine showed) FAILs the spec arm by name; base and its A/A copy pass."""
    shifted = [LPS[0], -18.36, -20.13, LPS[3], -19.27, LPS[5]]
    got = _teacher(store, {"base": LPS, "base#2": LPS, "mtp2": LPS, "mtp2+fault=logprob_row": shifted})
    verdict, reason = got[("mtp2+fault=logprob_row", "teacher")]
    assert verdict == "FAIL" and "6 of 12 positions" in reason  # 3 per probe, 2 probes and "not the target's" in reason
    assert got[("mtp2", "teacher")][0] == "PASS" and got[("base", "teacher")][0] == "PASS"


def test_teacher_is_not_attributable_when_base_itself_is_beyond_the_tolerance(store: Store) -> None:
    off = [lp - 1.0 for lp in LPS]
    got = _teacher(store, {"base": off, "mtp2": off})
    assert got[("base", "teacher")][0] == "WARN" and "does not hold" in got[("base", "teacher")][1]
    assert got[("mtp2", "teacher")][0] == "WARN" and "not attributable" in got[("mtp2", "teacher")][1]


def test_teacher_compares_the_spec_servers_scores_with_bases_on_the_same_ids(store: Store) -> None:
    """Where the spec output equals base's, base's own teacher-forced scores of those ids are the reference too:
    a spec server whose prefill is not the target's FAILs even when it agrees with itself."""
    other = [lp - 2.0 for lp in LPS]
    got = _teacher(store, {"base": LPS, "mtp2": other}, forced={"base": LPS, "mtp2": other})
    assert got[("mtp2", "teacher")][0] == "FAIL"
    # a different output: only the arm's own server can score it, and it agrees with itself
    got = _teacher(store, {"base": LPS, "mtp2": other}, forced={"base": LPS, "mtp2": other},
                   ids={"mtp2": [5, 6, 7, 8, 9, 10]})
    assert got[("mtp2", "teacher")][0] == "PASS"


def test_teacher_without_prompt_logprobs_is_not_measurable(store: Store) -> None:
    def rows(arm: str, p: Probe) -> list[tuple[int, dict[str, Any]]]:
        return [(teacher.DECODE, _scored(LPS)), (teacher.FORCED, {"ok": False, "error": "not measurable: no "
                                                                  "prompt_logprobs", "finish_reason": None})]

    view = channel_view(store, teacher.NAME, teacher.plan(SUITE), [("base", BASE), ("mtp2", SPEC)], rows)
    got = verdicts(view, teacher.judge)
    assert got[("base", "teacher")][0] == "SKIP" and "not measurable" in got[("base", "teacher")][1]


def test_teacher_emitted_logprob_is_read_by_id() -> None:
    r = SimpleNamespace(token_ids=[3, 4], top_logprobs=[[[9, -0.1], [3, -2.0]], [[5, -0.2]]])
    assert teacher.emitted_logprobs(r) == [-2.0, None]  # type: ignore[arg-type]
    assert teacher.largest_gap([-1.0, None, -3.0], [-1.1, -5.0, -4.0]) == (1.0, 2, 1)


# -- seeds --------------------------------------------------------------------------------------------------

def _seeds(store: Store, outputs: dict[str, dict[str, list[list[int]]]]) -> dict[tuple[str, str], tuple[str, str]]:
    """OUTPUTS: arm -> 'repeat' / 'n' -> each copy's (choice's) token ids (the same for every prompt)."""
    roles = {"base": BASE, "mtp2": SPEC, "mtp2+fault=seed_ignored": FAULT}

    def rows(arm: str, p: Probe) -> list[tuple[int, dict[str, Any]]]:
        return [(i, {"ok": True, "token_ids": ids, "finish_reason": "length"})
                for i, ids in enumerate(outputs[arm][p.meta["kind"]])]

    view = channel_view(store, seeds.NAME, seeds.plan([]), [(n, roles[n]) for n in outputs], rows)
    return verdicts(view, seeds.judge)


CLEAN = {"repeat": [[1, 2, 3], [1, 2, 3]], "n": [[1, 2, 3], [1, 5, 6], [4, 2, 2], [1, 2, 7]]}


def test_seeds_plan_is_seeded_sampled_and_the_same_on_every_arm() -> None:
    probes = seeds.plan([])
    assert {p.meta["kind"] for p in probes} == {seeds.REPEAT, seeds.MANY}
    assert all(p.sampling["temperature"] == seeds.TEMPERATURE and isinstance(p.sampling["seed"], int) and not p.greedy
               for p in probes)


def test_seeds_clean_arms_pass(store: Store) -> None:
    got = _seeds(store, {"base": CLEAN, "mtp2": CLEAN})
    assert {k: v[0] for k, v in got.items()} == {("base", "seeds:reproduce"): "PASS", ("mtp2", "seeds:reproduce"): "PASS",
                                                 ("base", "seeds:n"): "PASS", ("mtp2", "seeds:n"): "PASS"}


def test_seeds_fail_a_spec_arm_whose_seed_does_not_reproduce(store: Store) -> None:
    """Negative control: the fault's signature (the first token seeded by the prefill, the spec positions not)."""
    faulty = {"repeat": [[1, 2, 3], [1, 8, 9]], "n": CLEAN["n"]}
    got = _seeds(store, {"base": CLEAN, "mtp2": CLEAN, "mtp2+fault=seed_ignored": faulty})
    verdict, reason = got[("mtp2+fault=seed_ignored", "seeds:reproduce")]
    assert verdict == "FAIL" and "base's reproduce" in reason
    assert got[("mtp2", "seeds:reproduce")][0] == "PASS"
    assert got[("mtp2+fault=seed_ignored", "seeds:n")][0] == "PASS"


def test_seeds_base_that_does_not_reproduce_fails_base_and_makes_spec_not_attributable(store: Store) -> None:
    bad = {"repeat": [[1, 2, 3], [1, 2, 4]], "n": CLEAN["n"]}
    got = _seeds(store, {"base": bad, "mtp2": bad})
    assert got[("base", "seeds:reproduce")][0] == "FAIL"
    assert got[("mtp2", "seeds:reproduce")][0] == "WARN" and "not attributable" in got[("mtp2", "seeds:reproduce")][1]


def test_seeds_n_choices_that_coincide(store: Store) -> None:
    same = {"repeat": CLEAN["repeat"], "n": [[1, 2, 3]] * 4}
    got = _seeds(store, {"base": CLEAN, "mtp2": same})
    assert got[("mtp2", "seeds:n")][0] == "FAIL"
    got = _seeds(store, {"base": same, "mtp2": same})  # base's own coincide: nothing to compare with
    assert got[("mtp2", "seeds:n")][0] == "SKIP" and "not measurable" in got[("mtp2", "seeds:n")][1]


# -- the faults on fake tensors -------------------------------------------------------------------------------

def test_faults_are_registered_and_named_by_their_channels() -> None:
    assert {"seed_ignored", "logprob_row", "n_seed_shared"} <= FAULTS.keys()
    assert teacher.CHANNEL.faults == ("logprob_row",) and seeds.CHANNEL.faults == ("seed_ignored", "n_seed_shared")
    assert {"seed_ignored", "logprob_row"} <= patches.TARGETS[patches.V1_SAMPLER][0]
    assert patches.TARGETS[field_seeds.PARALLEL_SAMPLING][0] == {"n_seed_shared"}


def test_n_seed_shared_gives_every_child_the_parents_seed() -> None:
    class ParentRequest:
        def __init__(self, seed: int | None) -> None:
            self.sampling_params = SimpleNamespace(seed=seed)

        def _get_child_sampling_params(self, index: int) -> Any:
            seed = self.sampling_params.seed
            return SimpleNamespace(seed=None if seed is None else seed + index)

    module = SimpleNamespace(ParentRequest=ParentRequest)
    field_seeds.TARGETS[field_seeds.PARALLEL_SAMPLING][1](module, frozenset({"n_seed_shared"}))  # type: ignore[arg-type]
    assert [ParentRequest(7)._get_child_sampling_params(i).seed for i in range(3)] == [7, 7, 7]
    assert ParentRequest(None)._get_child_sampling_params(2).seed is None


def test_logprob_row_points_accepted_drafts_at_the_next_row() -> None:
    """Rows of k + 1 = 3: two drafts accepted + bonus; one accepted + recovered; none accepted (recovered only)."""
    sampled = torch.tensor([[5, 6, 7], [5, 6, -1], [5, -1, -1]])
    flat = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7, 8])
    got = field_seeds.shifted_indices(flat, sampled, placeholder=-1).tolist()
    assert got == [1, 2, 2, 4, 4, 5, 6, 7, 8]


def test_seed_ignored_drops_the_generators_of_spec_positions() -> None:
    seen: list[Any] = []
    meta = SimpleNamespace(generators={0: "g"})

    def uniform(n: int, drafts: list[int], generators: dict[int, Any], device: Any) -> str:
        seen.append(("uniform", generators))
        return "u"

    def recovered(*args: Any) -> str:
        seen.append(("recovered", args[6].generators))
        return "r"

    from dataclasses import dataclass

    @dataclass
    class Meta:
        generators: dict[int, Any]

    module = SimpleNamespace(generate_uniform_probs=uniform, sample_recovered_tokens=recovered)
    field_seeds.patch_v1_sampler(module, frozenset({"seed_ignored"}))  # type: ignore[arg-type]
    assert module.generate_uniform_probs(3, [1], meta.generators, "cpu") == "u"
    assert module.sample_recovered_tokens(1, [1], None, None, None, None, Meta({0: "g"}), "cpu") == "r"
    assert seen == [("uniform", {}), ("recovered", {})]
    patched = module.generate_uniform_probs
    field_seeds.patch_v1_sampler(module, frozenset({"seed_ignored"}))  # type: ignore[arg-type]
    assert module.generate_uniform_probs is patched  # once


def test_seeds_arm_that_never_reached_the_phase_is_not_measured(store: Store) -> None:
    """An arm stopped before its seeds phase (an engine crash, an interrupted session) has no answers: SKIP, never
    the FAIL a missing n answer read as 'all choices the same', nor a PASS over 0 prompts; the arm with answers
    beside it (the control) is still judged."""
    got = _seeds(store, {"base": CLEAN, "mtp2": {"repeat": [], "n": []}, "mtp2+fault=seed_ignored": CLEAN})
    assert got[("mtp2", "seeds:n")][0] == "SKIP" and "not measured" in got[("mtp2", "seeds:n")][1]
    assert got[("mtp2", "seeds:reproduce")][0] == "SKIP"
    assert got[("mtp2+fault=seed_ignored", "seeds:n")][0] == "PASS"
