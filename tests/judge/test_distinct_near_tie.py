"""distinct_outputs on an arm judged against base: a shared answer a near-tie explains (issue 27 item 4).

On every H200 field night (vLLM 0.26, bf16) tool-call-1 parted from base's
output at a 0.000-nat margin and then equalled tool-call-4's answer, and the
invalidating gate made both MTP arms INVALID. Judged here on stored results.
"""

from __future__ import annotations

from pathlib import Path

from observatory.judge.apply_gates import judge_session
from observatory.model.probes import Probe
from observatory.store.session_store import Store
from tests.support.semantics_store import result, session

PROBES = [Probe(f"p{i}", "prose_en", messages=[{"role": "user", "content": f"Say thing number {i}."}])
          for i in range(3)]
ANSWERS = {"p0": [10, 11, 12, 13, 14, 15], "p1": [10, 11, 20, 21, 22, 23], "p2": [30, 31, 32, 33, 34, 35]}


def _texts(ids: list[int]) -> list[str]:
    return [f" word{i}" for i in ids]


def _judge(tmp_path: Path, margin: float) -> dict[str, str]:
    """Base answers ANSWERS; mtp1 answers p1 as p0 (parting at token 2, where base's margin is MARGIN)."""
    store = Store(str(tmp_path / "runs.db"))
    sid, arms, pids = session(store, PROBES, ["base", "mtp1"])
    for name, arm in arms.items():
        for p in PROBES:
            ids = ANSWERS["p0"] if (name == "mtp1" and p.name == "p1") else ANSWERS[p.name]
            top = [[[i, -0.1], [99, -3.0]] for i in ids]
            if name == "base" and p.name == "p1":
                top[2] = [[20, -0.70], [12, -0.70 - margin]]
            result(store, arm, pids[p.name], "stream", ids, _texts(ids), top_logprobs=top,
                   logprobs=[-0.1] * len(ids))
    rows = judge_session(store, sid)
    return {r.gate: r.verdict for r in rows if r.arm_id == arms["mtp1"].id and r.gate == "distinct_outputs"} | {
        f"token_diff:{r.probe_id}": r.verdict for r in rows if r.arm_id == arms["mtp1"].id and r.gate == "token_diff"
        and r.probe_id == pids["p1"]}


def test_a_shared_answer_a_near_tie_explains_is_a_warn(tmp_path: Path) -> None:
    got = _judge(tmp_path, margin=0.0)
    assert [v for k, v in got.items() if k.startswith("token_diff")] == ["WARN"]  # the near-tie itself
    assert got["distinct_outputs"] == "WARN"


def test_a_shared_answer_after_a_hard_divergence_stays_invalid(tmp_path: Path) -> None:
    """Negative control: the same shared answer after a 2-nat margin (a hard divergence) invalidates the arm."""
    got = _judge(tmp_path, margin=2.0)
    assert [v for k, v in got.items() if k.startswith("token_diff")] == ["FAIL"]
    assert got["distinct_outputs"] == "INVALID"
