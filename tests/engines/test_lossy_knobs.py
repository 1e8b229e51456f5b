"""Lossy by configuration (issue 28 item 6): an arm whose settings loosen verification is LOSSY.

Unit tests per engine knob in each form it is passed (flag, environment, speculative-config key,
inside `--speculative-config` JSON, vLLM's dotted flag, docker `-e`), negative controls (a clean
config, a knob at its lossless value, a knob of another engine), the validity code and the
performance entries it makes INVALID, and a CLI-level gate against STUB servers (URL arms: an
arms file declares the spec arm's speculative config; the stub stands in for a server started
elsewhere, since the gate cannot launch a vLLM here in seconds).
"""

from __future__ import annotations

import json
import xml.dom.minidom
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from observatory.cli import cli
from observatory.engines.lossy_knobs import LOSSY_KNOBS, lossy_settings
from observatory.judge.figures import validity
from observatory.judge.perf_gates import not_lossless
from observatory.model.vocabulary import INVALID_CODES
from observatory.store.db import ArmRow
from tests.support.stub_server import StubServer
from tests.support.stub_sessions import moving_counters, tiny_suite

MTP2 = {"method": "mtp", "num_speculative_tokens": 2}


@pytest.mark.parametrize(("engine", "launch", "named"), [
    ("vllm", {"speculative_config": {**MTP2, "rejection_sample_method": "synthetic",
                                     "synthetic_acceptance_length": 2.5}},
     ["rejection_sample_method='synthetic'", "synthetic_acceptance_length=2.5"]),
    ("vllm", {"speculative_config": {**MTP2, "rejection_sample_method": "synthetic",
                                     "synthetic_acceptance_rates": [0.9, 0.5]}},
     ["rejection_sample_method='synthetic'", "synthetic_acceptance_rates=[0.9, 0.5]"]),
    ("vllm", {"argv": ["vllm", "serve", "m", "--speculative-config",
                       json.dumps({**MTP2, "rejection_sample_method": "synthetic"})]},
     ["rejection_sample_method='synthetic'"]),
    ("vllm", {"argv": ["vllm", "serve", "m", "--speculative-config.rejection_sample_method=synthetic"]},
     ["rejection_sample_method='synthetic'"]),
    ("sglang", {"argv": ["python", "-m", "sglang.launch_server", "--speculative-accept-threshold-single", "0.5"]},
     ["--speculative-accept-threshold-single='0.5'"]),
    ("sglang", {"argv": ["python", "-m", "sglang.launch_server", "--speculative_accept_threshold_acc=0.3"]},
     ["--speculative-accept-threshold-acc='0.3'"]),
    ("sglang", {"env": {"SGLANG_SIMULATE_ACC_LEN": "3.2"}}, ["SGLANG_SIMULATE_ACC_LEN='3.2'"]),
    ("sglang", {"argv": ["docker", "run", "--rm", "-e", "SGLANG_SIMULATE_ACC_LEN=2", "img", "--port", "1"]},
     ["SGLANG_SIMULATE_ACC_LEN='2'"]),
])
def test_each_knob_in_each_form_is_named(engine: str, launch: dict[str, Any], named: list[str]) -> None:
    found = lossy_settings(engine, launch)
    assert len(found) == len(named), found
    for text, name in zip(found, named, strict=True):
        assert text.startswith(name), (text, name)
        assert "lossy when" in text and ("sglang" in text or "vllm" in text)


@pytest.mark.parametrize(("engine", "launch"), [
    ("vllm", {"speculative_config": MTP2, "argv": ["vllm", "serve", "m", "--port", "8000"], "env": {}}),
    ("vllm", {"speculative_config": {**MTP2, "rejection_sample_method": "standard",
                                     "draft_sample_method": "greedy"}}),
    ("vllm", {"speculative_config": {**MTP2, "rejection_sample_method": "block"}}),  # lossless, docs/design.md
    ("vllm", {"speculative_config": {**MTP2, "synthetic_acceptance_length": None}}),
    ("sglang", {"argv": ["sglang", "--speculative-accept-threshold-single", "1.0",
                         "--speculative-accept-threshold-acc=1"]}),
    ("sglang", {"env": {"SGLANG_SIMULATE_ACC_LEN": "-1", "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}}),
    # another engine's knob does nothing here
    ("vllm", {"env": {"SGLANG_SIMULATE_ACC_LEN": "3"}}),
    ("sglang", {"speculative_config": {"rejection_sample_method": "synthetic"}}),
    ("llama.cpp", {"argv": ["llama-server", "--draft-p-min", "0.1", "--draft-max", "16"]}),
])
def test_clean_and_lossless_values_are_not_flagged(engine: str, launch: dict[str, Any]) -> None:
    assert lossy_settings(engine, launch) == []


def test_an_unreadable_value_counts_as_lossy() -> None:
    """A value the check cannot read cannot be vouched for: flagged, never taken for the lossless default."""
    assert lossy_settings("sglang", {"argv": ["x", "--speculative-accept-threshold-acc", "lots"]})


def test_every_knob_names_its_source_and_condition() -> None:
    assert {k.engine for k in LOSSY_KNOBS} == {"vllm", "sglang"}
    for k in LOSSY_KNOBS:
        assert k.how in ("flag", "env", "spec") and k.source and k.condition


def _arms(spec_launch: dict[str, Any]) -> tuple[ArmRow, ArmRow]:
    base = ArmRow(name="base", status="ok", launch={"speculative_config": None, "argv": [], "env": {}})
    arm = ArmRow(name="mtp2", status="ok", launch={"argv": [], "env": {}, **spec_launch},
                 engine=spec_launch.get("engine"))
    return arm, base


def test_validity_marks_the_arm_lossy_and_invalid() -> None:
    arm, base = _arms({"speculative_config": {**MTP2, "rejection_sample_method": "synthetic",
                                              "synthetic_acceptance_length": 3.0}})
    codes = validity(arm, base, {"drafts": 500}, {})
    lossy = [c for c in codes if c["code"] == "LOSSY"]
    assert len(lossy) == 2 and "rejection_sample_method='synthetic'" in lossy[0]["detail"]
    assert "LOSSY" in INVALID_CODES
    clean, base = _arms({"speculative_config": MTP2})
    assert validity(clean, base, {"drafts": 500}, {}) == []  # negative control


def test_validity_of_a_url_arm_says_what_was_not_checked() -> None:
    arm, base = _arms({"speculative_config": MTP2, "url": "http://127.0.0.1:9"})
    notes = [c for c in validity(arm, base, {"drafts": 500}, {}) if "lossy-by-configuration" in c["detail"]]
    assert [c["code"] for c in notes] == ["UNCHECKED"] and "not checked" in notes[0]["detail"]


def test_a_lossy_arm_has_no_passing_performance_check() -> None:
    entries = [{"check": "speedup", "verdict": "PASS", "reason": "S = 2.10 >= 1.00", "value": 2.1, "threshold": 1},
               {"check": "acceptance", "verdict": "WARN", "reason": "low", "value": 0.1, "threshold": 0.3},
               {"check": "ttft_ratio", "verdict": "SKIP", "reason": "no base", "value": None, "threshold": 1.5}]
    out = not_lossless(entries, "SGLANG_SIMULATE_ACC_LEN='3'")
    assert [e["verdict"] for e in out] == ["INVALID", "INVALID", "SKIP"]
    assert out[0]["value"] == 2.1 and "not a lossless result" in out[0]["reason"] and "S = 2.10" in out[0]["reason"]


def _gate(tmp: Path, base_url: str, spec_url: str, spec: dict[str, Any]) -> tuple[int, dict[str, Any], Path]:
    arms = tmp / "arms.toml"
    inline = ", ".join(f"{k} = {json.dumps(v)}" for k, v in spec.items())
    arms.write_text(f'[arms.base]\nurl = "{base_url}"\n\n[arms.mtp2]\nurl = "{spec_url}"\n'
                    f"speculative_config = {{ {inline} }}\n")
    out = tmp / "out"
    r = CliRunner().invoke(cli, ["gate", "--arms-file", str(arms), "--arms", "base,mtp2", "--suite", tiny_suite(tmp),
                                 "--db", str(tmp / "g.db"), "--report", str(out / "report"), "--junit", str(out / "junit.xml"),
                                 "--json", str(out / "session.json"), "--no-diffs", "--quiet"])
    data = json.loads((out / "session.json").read_text()) if (out / "session.json").is_file() else {}
    return r.exit_code, data, out


def test_gate_on_an_arms_file_with_synthetic_acceptance_is_invalid(tmp_path: Path) -> None:
    """STUB servers (URL arms, the spec one with moving draft counters): the arms file's spec arm asks
    vLLM for synthetic acceptance; the gate exits 2 naming the knob, and no performance check of the
    arm passes. The negative control, the same servers and config without the knob, exits 0."""
    for name, spec, want in (("lossy", {**MTP2, "rejection_sample_method": "synthetic",
                                        "synthetic_acceptance_length": 2.5}, 2),
                             ("clean", MTP2, 0)):
        (tmp_path / name).mkdir()
        with StubServer("ok", token=5) as base, StubServer("ok", token=5, metrics=moving_counters()) as sp:
            code, data, out = _gate(tmp_path / name, base.url, sp.url, spec)
        assert code == want, (name, code, data.get("verdict"))
        arm = next(a for a in data["arms"] if a["name"] == "mtp2")
        lossy = [v for v in arm["validity"] if v["code"] == "LOSSY"]
        passed = [p["check"] for p in arm["performance"] if p["verdict"] == "PASS"]
        if name == "lossy":
            assert lossy and "rejection_sample_method='synthetic'" in lossy[0]["detail"], arm["validity"]
            assert not passed, arm["performance"]
            doc = xml.dom.minidom.parse(str(out / "junit.xml"))
            errors = {c.getAttribute("classname") + "/" + c.getAttribute("name")
                      for c in doc.getElementsByTagName("testcase") if c.getElementsByTagName("error")}
            assert "arm.mtp2/validity" in errors, errors
        else:
            assert not lossy and passed, (arm["validity"], arm["performance"])


def test_a_url_arm_is_checked_on_what_its_server_reports() -> None:
    """STUB server standing in for an SGLang server (its /get_server_info): the relaxed threshold it
    reports is named LOSSY; the threshold at 1.0, and a server that reports nothing (vLLM: 404), are not."""
    from observatory.client.send import EngineClient
    from observatory.engines.server_facts import served_facts
    info = {"speculative_accept_threshold_single": 1.0, "speculative_accept_threshold_acc": 0.5,
            "speculative_algorithm": "EAGLE", "api_key": "not-kept"}
    with StubServer("ok", server_info=info) as s, StubServer("ok") as plain, \
            StubServer("ok", server_info=["not", "a", "dict"]) as odd:
        reported = served_facts(EngineClient(s.url))
        assert reported["server_args"] == {"speculative_accept_threshold_single": 1.0,
                                           "speculative_accept_threshold_acc": 0.5}
        assert "server_args" not in served_facts(EngineClient(plain.url))
        assert "server_args" not in served_facts(EngineClient(odd.url))
    arm, base = _arms({"speculative_config": MTP2, "url": s.url, "engine": "sglang", "served": reported})
    codes = validity(arm, base, {"drafts": 500}, {})
    lossy = [c["detail"] for c in codes if c["code"] == "LOSSY"]
    assert len(lossy) == 1 and "--speculative-accept-threshold-acc=0.5" in lossy[0], codes
    note = next(c["detail"] for c in codes if "lossy-by-configuration" in c["detail"])
    assert "speculative_accept_threshold_acc" in note and "environment" in note
    reported["server_args"]["speculative_accept_threshold_acc"] = 1.0  # negative control
    assert not [c for c in validity(arm, base, {"drafts": 500}, {}) if c["code"] == "LOSSY"]


def test_one_argv_reader_for_the_figures_and_the_lossy_table() -> None:
    """Issue 47 item 8: the figures' flag comparison and the lossy table read argv through one parser: the
    program and its module are no flags, ``--a=1`` and ``--a 1`` are alike, a flag alone is set, the last
    occurrence wins."""
    from observatory.engines.argv_flags import flag_pairs
    from observatory.engines.lossy_knobs import _argv_settings
    from observatory.judge.figures import _flags

    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--dtype", "bfloat16", "--enforce-eager",
            "--max-num-seqs=8", "--speculative_config", '{"method": "mtp"}', "--seed", "1", "--seed", "2", "-e", "X"]
    assert flag_pairs(argv) == [("--dtype", "bfloat16"), ("--enforce-eager", None), ("--max-num-seqs", "8"),
                                ("--speculative_config", '{"method": "mtp"}'), ("--seed", "1"), ("--seed", "2")]
    assert _flags(argv) == {"--dtype": "bfloat16", "--enforce-eager": True, "--max-num-seqs": "8",
                            "--speculative_config": '{"method": "mtp"}', "--seed": "2"}
    flags, env, spec = _argv_settings(argv)
    assert flags == {"--dtype": "bfloat16", "--enforce-eager": "true", "--max-num-seqs": "8", "--seed": "2"}
    assert spec == {"method": "mtp"} and env == {}
