"""Channel finish (issue 15 item 5): stop strings, stop ids, EOS and max_tokens inside a spec run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from observatory.channels import finish
from observatory.channels.view import ChannelView
from observatory.client.answer import Response
from observatory.model.gates import default_registry
from observatory.model.probes import Probe
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

SUITE = [Probe("count", "counting", messages=[{"role": "user", "content": "Count"}], max_tokens=32),
         Probe("tool", "tool_call", messages=[{"role": "user", "content": "w"}], tools=[{"type": "function"}]),
         Probe("prose", "prose_en", messages=[{"role": "user", "content": "Write"}])]
IDS = list(range(100, 110))
TEXTS = [f" w{i}" for i in range(10)]


def _answers(ids: list[int], texts: list[str], params: dict[str, Any]) -> tuple[list[int], list[str], str, str]:
    """What a correct engine answers to PARAMS when its greedy output is IDS/TEXTS (ids, texts, text, finish)."""
    if "max_tokens" in params:
        n = params["max_tokens"]
        return ids[:n], texts[:n], "".join(texts[:n]), "length"
    if "stop_token_ids" in params:
        n = ids.index(params["stop_token_ids"][0]) + 1
        return ids[:n], texts[:n], "".join(texts[: n - 1]), "stop"
    if "stop" in params:
        full = "".join(texts)
        return ids, texts, full[: full.index(params["stop"][0])], "stop"
    return ids, texts, "".join(texts), "length"


def _judge(store: Store, arms: list[str], leak_on: str | None = None, past_stop_on: str | None = None) -> dict[str, Any]:
    probes = finish.plan(SUITE)
    sid, arm_rows, pids = session(store, probes, arms, options={"channels": ["finish"]})
    for name, arm in arm_rows.items():
        for p in probes:
            params = finish.derive(IDS, TEXTS, p.meta["variant"])
            assert params is not None
            ids, texts, text, why = _answers(IDS, TEXTS, params)
            if name == leak_on and p.meta["variant"] == "stop_str":
                text = "".join(texts)  # the stop string and what follows it leaked into the text
            if name == past_stop_on and p.meta["variant"] == "stop_str":
                ids, texts = ids + [999], texts + [" !"]  # a token past the stop kept in the ids, text still cut
            result(store, arm, pids[p.name], "finish", ids, texts, text=text, finish=why)
    all_arms = store.arms(sid)
    roles = {a.name: str(a.role) for a in all_arms}
    view = ChannelView(store, sid, "finish", all_arms, roles, {pids[p.name]: p for p in probes}, default_registry())
    names = {a.id: a.name for a in all_arms}
    return {names[v.arm_id]: v for v in finish.judge(view)}


def test_plan_makes_five_requests_per_probe_without_tools() -> None:
    """Issue 15 item 5: eos, max_tokens at length-1 and -2, a stop string, a stop id; tool probes left out."""
    probes = finish.plan(SUITE)
    assert {p.meta["of"] for p in probes} == {"count", "prose"}
    assert [p.meta["variant"] for p in probes if p.meta["of"] == "count"] == list(finish.VARIANTS)
    assert all(p.channel == "finish" and p.name.startswith("finish:") for p in probes)


def test_derive_lands_inside_the_arm_own_output() -> None:
    """Issue 15 item 5: the limits come from the arm's own greedy output: length-1, length-2, a token inside it."""
    assert finish.derive(IDS, TEXTS, "len-1") == {"max_tokens": 9}
    assert finish.derive(IDS, TEXTS, "len-2") == {"max_tokens": 8}
    assert finish.derive(IDS, TEXTS, "stop_id") == {"stop_token_ids": [104]}
    assert finish.derive(IDS, TEXTS, "stop_str") == {"stop": ["w6"]}
    assert finish.derive(IDS[:2], TEXTS[:2], "len-1") is None


def test_text_past_a_stop_string_fails(store: Store) -> None:
    """Issue 15 item 5 (fault: output past a stop): a spec arm whose text runs past its stop string FAILs."""
    got = _judge(store, ["base", "base#2", "mtp2"], leak_on="mtp2")
    assert got["mtp2"].verdict == "FAIL" and got["mtp2"].gate == "finish"
    assert "stop_str" in got["mtp2"].reason
    assert got["base#2"].verdict == "PASS"


def test_ids_past_a_stop_string_fail_showing_both_sides_from_the_divergence(store: Store) -> None:
    """Issue 30 (the H200 nightly's finish FAILs): the text agrees, the ids do not. The row shows both sides
    from the first divergence (base ended, the arm added a token), never the two identical texts."""
    got = _judge(store, ["base", "mtp2"], past_stop_on="mtp2")
    assert got["mtp2"].verdict == "FAIL"
    row = next(r for r in got["mtp2"].details["table"] if r["result"].startswith("FAIL"))
    assert row["variant"] == "stop_str" and row["from_token"] == len(IDS)
    assert (row["base"], row["base_ids"], row["here"], row["here_ids"]) == ([], [], [" !"], [999])
    equal = [r for r in got["mtp2"].details["table"] if r["result"] == "equal"]
    assert equal and not any("here" in r for r in equal)  # only differing rows carry continuations


def test_clean_arms_pass(store: Store) -> None:
    """Issue 15 item 5, clean control: every request equal to base's passes."""
    got = _judge(store, ["base", "mtp2"])
    assert got["mtp2"].verdict == "PASS"
    assert len(got["mtp2"].details["table"]) == 10


def test_a_difference_base_shows_against_its_copy_is_a_warn(store: Store) -> None:
    """Issue 15 item 5: where base's A/A copy differs from base on a request too, the spec arm's difference WARNs."""
    probes = finish.plan(SUITE[:1])
    sid, arms, pids = session(store, probes, ["base", "base#2", "mtp2"], options={"channels": ["finish"]})
    for name, arm in arms.items():
        for p in probes:
            ids, texts, text, why = _answers(IDS, TEXTS, finish.derive(IDS, TEXTS, p.meta["variant"]) or {})
            if name != "base" and p.meta["variant"] == "len-1":
                ids, texts, text = [*ids[:-1], 7], [*texts[:-1], " x"], "".join([*texts[:-1], " x"])
            result(store, arm, pids[p.name], "finish", ids, texts, text=text, finish=why)
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "finish", all_arms, {a.name: str(a.role) for a in all_arms},
                       {pids[p.name]: p for p in probes}, default_registry())
    got = {v.arm_id: v for v in finish.judge(view)}
    assert got[arms["mtp2"].id].verdict == "WARN"


class _Client:
    """A client answering as a correct engine whose greedy output is IDS/TEXTS; records what it was asked."""

    def __init__(self) -> None:
        self.sent: list[Probe] = []

    def run(self, probe: Probe, stream: bool = True) -> Response:
        self.sent.append(probe)
        params = {**probe.sampling, **({"max_tokens": probe.max_tokens} if probe.max_tokens < 32 else {})}
        ids, texts, text, why = _answers(IDS, TEXTS, params)
        return Response(text=text, token_ids=ids, token_texts=texts, finish_reason=why)


class _Run:
    def __init__(self) -> None:
        self.client = _Client()
        self.stored: list[tuple[str, Response]] = []

    def store_result(self, probe: Probe, resp: Response, mode: str, *a: Any, **k: Any) -> None:
        self.stored.append((probe.name, resp))

    def check_alive(self, resp: Response) -> None:
        pass


def test_measure_sends_the_requests_made_from_the_arm_own_output() -> None:
    """Issue 15 item 5: measure sends eos first, then the four requests derived from its output."""
    run = _Run()
    finish.measure(run, finish.plan(SUITE[:1]))
    sent = [(p.meta["variant"], p.max_tokens, p.sampling) for p in run.client.sent]
    assert sent == [("eos", 32, {}), ("len-1", 9, {}), ("len-2", 8, {}),
                    ("stop_str", 32, {"stop": ["w6"]}), ("stop_id", 32, {"stop_token_ids": [104]})]
    assert [n for n, _ in run.stored] == [p.name for p in finish.plan(SUITE[:1])]


def test_the_aa_copy_differing_from_base_is_noise_not_a_fail(store: Store) -> None:
    """Channel rules: base against its own copy is the engine's noise: a WARN, never a FAIL."""
    got = _judge(store, ["base", "base#2"], leak_on="base#2")
    assert got["base#2"].verdict == "WARN" and "A/A copy" in got["base#2"].reason


def _judge_diverged(store: Store, leak: bool) -> Any:
    """mtp2's greedy output departs from base's at token 5 (a near-tie the suite's token diff judges), so every
    request made from it differs too; with LEAK its stop-string answer also shows its own stop string."""
    probes = finish.plan(SUITE[:1])
    sid, arms, pids = session(store, probes, ["base", "mtp2"], options={"channels": ["finish"]})
    other_ids, other_texts = [*IDS[:5], *range(200, 205)], [*TEXTS[:5], *(f" v{i}" for i in range(5))]
    for name, arm in arms.items():
        ids0, texts0 = (IDS, TEXTS) if name == "base" else (other_ids, other_texts)
        for p in probes:
            params = finish.derive(ids0, texts0, p.meta["variant"]) or {}
            ids, texts, text, why = _answers(ids0, texts0, params)
            if leak and name == "mtp2" and p.meta["variant"] == "stop_str":
                text = "".join(texts)
            result(store, arm, pids[p.name], "finish", ids, texts, text=text, finish=why)
    all_arms = store.arms(sid)
    view = ChannelView(store, sid, "finish", all_arms, {a.name: str(a.role) for a in all_arms},
                       {pids[p.name]: p for p in probes}, default_registry())
    return {v.arm_id: v for v in finish.judge(view)}[arms["mtp2"].id]


def test_an_arm_whose_own_output_differs_is_not_compared_but_keeps_its_leak_check(store: Store) -> None:
    """Issue 27 item 4 (H200 field nights): a bf16 near-tie made a spec arm's eos output differ from base's at
    token 16, and eos, len-1 and len-2 FAILed here although the suite's token diff had judged it a near-tie
    WARN. Such rows are "not comparable" (no FAIL, no WARN of their own); a stop string in the arm's own text
    still FAILs."""
    got = _judge_diverged(store, leak=False)
    assert got.verdict == "SKIP", got.reason  # nothing left to compare: not measurable, never a FAIL
    assert all(r["result"].startswith("not comparable") for r in got.details["table"])
    assert "5 finish requests not comparable" in got.reason
    store2 = Store(str(Path(store.engine.url.database).with_name("leak.db")))
    leaked = _judge_diverged(store2, leak=True)
    assert leaked.verdict == "FAIL" and "past its stop string" in leaked.reason
