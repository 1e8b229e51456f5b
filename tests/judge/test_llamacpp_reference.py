"""llama.cpp spec arms: the diff's reference is the non-streamed result (issue 17 item 1), and each engine's
arms are judged against their own engine's base (issue 17 item 4).

Sessions are made through the real store and judged by the real judge. The
stream shapes are llama-server's own (11434.0.0, draft2 arm on the bundled
model): the first streamed chunk carries a logprobs entry, every token
accepted from a draft arrives with ``logprobs: null``; the non-streamed
response lists every token with its ``id``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from observatory.client.answer import Response
from observatory.judge.apply_gates import judge_session
from observatory.model.arms import Arm
from observatory.model.probes import Probe
from observatory.model.roles import assign_roles
from observatory.session.measure import ArmRun
from observatory.session.options import SessionPlan
from observatory.store.arm_facts import launch_engine, launch_facts
from observatory.store.db import ArmRow, ResultRow
from observatory.store.session_store import Store
from tests.support.llama_sessions import IDS, PROBE, TEXTS, session_of_arms


def _verdicts(store: Store, sid: int) -> dict[tuple[str, str], Any]:
    names = {a.id: a.name for a in store.arms(sid)}
    return {(names[v.arm_id], v.gate): v for v in judge_session(store, sid)}


def test_llama_spec_arm_is_diffed_on_its_unstreamed_ids(store: Store) -> None:
    """Issue 17 item 1: a llama.cpp draft arm streamed 1 of 12 ids; its token diff uses the non-streamed
    result (every id), and the short stream is not measurable there (SKIP), not a WARN on every probe."""
    sid = session_of_arms(store, [("llama.cpp:base", "llama.cpp", None, True),
                           ("llama.cpp:draft2", "llama.cpp", {"method": "draft-simple", "num_speculative_tokens": 2},
                            False)])
    v = _verdicts(store, sid)
    diff = v[("llama.cpp:draft2", "token_diff")]
    assert diff.verdict == "PASS" and diff.details["compared"] == ["nonstream", "stream"], diff.reason
    short = v[("llama.cpp:draft2", "stream_tokens")]
    assert short.verdict == "SKIP" and "1 of 12" in short.reason and "server-context.cpp" in short.reason


def test_a_vllm_arm_with_withheld_stream_ids_still_warns(store: Store) -> None:
    """Negative control: on vLLM a short stream is the engine withholding ids (hermes parser): WARN."""
    sid = session_of_arms(store, [("base", "vllm", None, True),
                           ("mtp2", "vllm", {"method": "mtp", "num_speculative_tokens": 2}, False)])
    v = _verdicts(store, sid)
    assert v[("mtp2", "stream_tokens")].verdict == "WARN"
    assert v[("mtp2", "token_diff")].details["compared"] == ["nonstream", "stream"]


def test_each_engine_has_its_own_base() -> None:
    """Issue 17 item 4: in vllm:base,vllm:mtp2,llama.cpp:base,llama.cpp:draft2 both bases are base."""
    arms = [Arm("base"), Arm("mtp2", {"method": "mtp", "num_speculative_tokens": 2}),
            Arm("llama.cpp:base", engine="llama.cpp"),
            Arm("llama.cpp:draft2", {"method": "draft-simple", "num_speculative_tokens": 2}, engine="llama.cpp"),
            Arm("llama.cpp:base#2", engine="llama.cpp", copy_of="llama.cpp:base")]
    assert assign_roles(arms) == {"base": "base", "mtp2": "spec", "llama.cpp:base": "base",
                                  "llama.cpp:draft2": "spec", "llama.cpp:base#2": "aa_copy"}
    # stored before "engine" was in the launch dict: the binary tells (the rule migration m010 fills them by)
    assert launch_engine({"argv": ["/x/bin/llama-server"]}) == "llama.cpp" and launch_engine({"argv": ["vllm"]}) == "vllm"
    assert launch_facts([("base", {"argv": ["vllm"]}), ("llama.cpp:base", {"argv": ["/x/llama-server"]})]) == [
        ("base", "vllm"), ("base", "llama.cpp")]


def test_spec_arms_are_judged_against_their_own_engines_base(store: Store) -> None:
    """Issue 17 item 4: llama.cpp's draft arm is diffed against llama.cpp's base, never vLLM's (whose output
    differs here); vLLM's mtp2 against vLLM's base."""
    sid = session_of_arms(store, [("base", "vllm", None, True),
                           ("mtp2", "vllm", {"method": "mtp", "num_speculative_tokens": 2}, True),
                           ("llama.cpp:base", "llama.cpp", None, True),
                           ("llama.cpp:draft2", "llama.cpp", {"method": "draft-simple", "num_speculative_tokens": 2},
                            False)])
    vllm_base = store.arms(sid)[0]
    for r in store.results(vllm_base.id):  # vLLM's base says something else: no arm of llama.cpp may see it
        store.update(ResultRow, r.id, token_ids=IDS[:6] + [99] * 6)
    v = _verdicts(store, sid)
    assert v[("llama.cpp:draft2", "token_diff")].verdict == "PASS"
    assert v[("mtp2", "token_diff")].verdict == "FAIL"
    assert ("llama.cpp:base", "token_diff") not in v  # a base is never diffed, across engines neither


def test_no_diffs_still_fetches_the_reference_where_the_stream_is_short(tmp_path: Path) -> None:
    """Issue 17 item 1: with --no-diffs, the non-streamed pass still runs for probes whose stream carried
    too few ids (else a llama.cpp spec arm has nothing to diff); a complete stream needs none."""
    class Client:  # in-process stand-in for the engine's client: the stream shapes llama-server returns
        def __init__(self, short: bool) -> None:
            self.short, self.sent = short, []

        def run(self, probe: Probe, stream: bool = True) -> Response:
            self.sent.append("stream" if stream else "nonstream")
            n = 1 if stream and self.short else len(IDS)
            return Response(text="".join(TEXTS), token_ids=IDS[:n], token_texts=TEXTS[:n],
                            top_logprobs=[[[i, -0.01]] for i in IDS[:n]], usage={"completion_tokens": len(IDS)})

        def counters(self) -> Any:
            from observatory.engines.metrics import SpecCounters
            return SpecCounters()

    from observatory.session.runner import NullReporter

    for short, expected in ((True, ["stream", "stream", "nonstream"]), (False, ["stream", "stream"])):
        with Store(str(tmp_path / f"{short}.db"), write=True) as st:
            sid = session_of_arms(st, [])
            arm = st.add(ArmRow(session_id=sid, position=0, name="x", status="ok", launch={}))
            client = Client(short)
            run = ArmRun(Arm("x"), int(arm.id), st, {PROBE.name: st.probes(sid)[0].id}, [PROBE], NullReporter(),
                         SessionPlan(arms="x", diffs=False), client=client)  # type: ignore[arg-type]
            run.correctness()
            assert client.sent == expected
