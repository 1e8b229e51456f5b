"""llama.cpp arms without a server: the engine prefix, llama-server's command line, the GGUF (issue 17)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from observatory.engines import llamacpp
from observatory.engines.arm_engines import parse_arms
from observatory.engines.server import EngineSettings, engine_argv
from observatory.model.errors import ArmError, ObservatoryError
from tests.support.paths import REPO

DEFAULT_MODEL = REPO / "observatory" / "default_model"


def test_engine_prefix_names_the_engine() -> None:
    """Issue 17 item 3: llama.cpp:base/draftK/ngramK are llama.cpp arms; vllm:mtp2 is mtp2."""
    vllm = parse_arms("vllm:base,vllm:mtp2")
    assert [a.name for a in vllm] == ["base", "mtp2"] and {a.engine for a in vllm} == {"vllm"}
    assert vllm[1].speculative_config == parse_arms("mtp2")[0].speculative_config
    arms = parse_arms("llama.cpp:base,llama.cpp:draft2,llama.cpp:ngram3")
    assert [a.name for a in arms] == ["llama.cpp:base", "llama.cpp:draft2", "llama.cpp:ngram3"]
    assert {a.engine for a in arms} == {"llama.cpp"}
    assert arms[0].speculative_config is None
    assert arms[1].speculative_config == {"method": "draft-simple", "num_speculative_tokens": 2}
    assert arms[2].speculative_config == {"method": "ngram-simple", "num_speculative_tokens": 3}


def test_llama_arm_twice_is_an_aa_copy_and_takes_a_url() -> None:
    arms = parse_arms("llama.cpp:base,llama.cpp:base,llama.cpp:ngram2=http://10.0.0.5:8080")
    assert [a.name for a in arms] == ["llama.cpp:base", "llama.cpp:base#2", "llama.cpp:ngram2"]
    assert arms[1].copy_of == "llama.cpp:base"
    assert arms[2].url == "http://10.0.0.5:8080" and arms[2].engine == "llama.cpp"


@pytest.mark.parametrize("item, needle", [
    ("llama.cpp:mtp2", "Unknown llama.cpp arm 'mtp2'"),
    ("llama.cpp:draft2+fault=ghost", "faults (+fault=) and images"),
    ("llama.cpp:base@observatory/vllm-cpu:local", "faults (+fault=) and images"),
])
def test_llama_arm_errors_are_one_clear_line(item: str, needle: str) -> None:
    with pytest.raises(ArmError, match=None) as e:
        parse_arms(item)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_arms_file_engine_key(tmp_path: Path) -> None:
    f = tmp_path / "arms.toml"
    f.write_text('[arms.lookup4]\nengine = "llama.cpp"\n'
                 'speculative_config = { method = "ngram-mod", num_speculative_tokens = 4 }\n')
    (arm,) = parse_arms("llama.cpp:lookup4", arms_file=f)
    assert arm.engine == "llama.cpp" and arm.name == "llama.cpp:lookup4"
    f.write_text('[arms.x]\nengine = "tgi"\n')
    with pytest.raises(ArmError, match="engine must be one of vllm, llama.cpp, sglang"):
        parse_arms("x", arms_file=f)


def _fake_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("OBSERVATORY_LLAMA_SERVER", str(binary))
    monkeypatch.setenv("OBSERVATORY_LLAMA_CACHE", str(tmp_path / "cache"))
    return binary


def test_server_argv_per_arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook in server.engine_argv: llama.cpp arms get llama-server's flags, never vLLM's."""
    binary = _fake_binary(tmp_path, monkeypatch)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    draft = tmp_path / "d.gguf"
    draft.write_bytes(b"GGUF")
    settings = EngineSettings(model=str(model), max_model_len=1024, seed=7, extra_args=["--enforce-eager"])
    base, ngram = parse_arms("llama.cpp:base,llama.cpp:ngram3")
    argv = engine_argv(base, settings, 8123)
    assert argv[:3] == [str(binary), "--model", str(model)]
    assert "--enforce-eager" not in argv and "--speculative-config" not in argv  # vLLM's flags stay vLLM's
    for flag, value in (("--port", "8123"), ("--seed", "7"), ("--ctx-size", "1024")):
        assert argv[argv.index(flag) + 1] == value
    assert "--metrics" in argv and "--spec-type" not in argv
    argv = engine_argv(ngram, settings, 8123)
    assert argv[argv.index("--spec-type") + 1] == "ngram-simple"
    assert argv[argv.index("--spec-ngram-simple-size-m") + 1] == "3"
    assert llamacpp.spec_args({"method": "draft-simple", "num_speculative_tokens": 2, "draft_model": str(draft)},
                              str(model)) == ["--spec-type", "draft-simple", "--spec-draft-model", str(draft),
                                              "--spec-draft-n-max", "2"]


def test_missing_binary_says_how_to_build_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OBSERVATORY_LLAMA_SERVER", str(tmp_path / "nothing"))
    with pytest.raises(ObservatoryError, match="scripts/build-llama.sh"):
        llamacpp.require_binary()


def test_a_folder_without_a_checkpoint_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ObservatoryError, match="a .gguf file or a local model folder"):
        llamacpp.gguf_for(str(tmp_path))


def _gguf_module() -> object | None:
    try:
        import gguf
    except ImportError:
        src = llamacpp.cache_root() / "src" / "gguf-py"
        if not src.is_dir():
            return None
        sys.path.insert(0, str(src))
        import gguf
    return gguf


def test_gguf_export_carries_our_vocabulary_and_the_trunk(tmp_path: Path) -> None:
    """Issue 17 item 2: the GGUF holds our tokens, merges and special ids; the MTP layer is left out."""
    gguf = _gguf_module()
    if gguf is None:
        pytest.skip("gguf-py is not installed and llama.cpp's source is not in the cache (scripts/build-llama.sh)")
    from observatory.engines.llamacpp_gguf import export

    out = export(tmp_path / "m.gguf")
    draft = export(tmp_path / "d.gguf", layers=2)
    reader = gguf.GGUFReader(str(out))  # type: ignore[attr-defined]
    tok = json.loads((DEFAULT_MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    fields = reader.fields
    tokens = [bytes(fields["tokenizer.ggml.tokens"].parts[i]).decode() for i in fields["tokenizer.ggml.tokens"].data]
    for text, i in tok["model"]["vocab"].items():
        assert tokens[i] == text
    assert tokens[1831] == "<tool_call>"
    assert len(fields["tokenizer.ggml.merges"].data) == len(tok["model"]["merges"])
    assert bytes(fields["tokenizer.ggml.pre"].parts[-1]).decode() == "qwen2"
    assert int(fields["tokenizer.ggml.eos_token_id"].parts[-1][0]) == 2
    names = {t.name for t in reader.tensors}
    assert "blk.3.attn_q.bias" in names and not any("mtp" in n for n in names)
    draft_names = {t.name for t in gguf.GGUFReader(str(draft)).tensors}  # type: ignore[attr-defined]
    assert "blk.1.ffn_down.weight" in draft_names and "blk.2.ffn_down.weight" not in draft_names


def test_gguf_export_refuses_a_foreign_pre_tokenizer() -> None:
    from observatory.engines.llamacpp_gguf import check_pre_tokenizer

    tok = json.loads((DEFAULT_MODEL / "tokenizer.json").read_text(encoding="utf-8"))
    check_pre_tokenizer(tok)
    tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\s+|\S+"
    with pytest.raises(ValueError, match="not Qwen2's"):
        check_pre_tokenizer(tok)


def _logprob_fixture() -> dict[str, Any]:
    return dict(json.loads((REPO / "tests/fixtures/engines/llamacpp_logprobs_reconstructed.json").read_text()))


def test_token_ids_read_from_llamacpp_ids() -> None:
    """Issue 17: ids parsed only in vLLM's token_id:N form; llama.cpp gives an integer id per entry."""
    from observatory.client.answer import Response, _take_chat_logprobs, _take_completion_logprobs

    fx = _logprob_fixture()
    out = Response()
    assert _take_chat_logprobs(out, fx["chat_chunk"]["choices"][0]["logprobs"]) == 1
    assert out.token_ids == [412] and out.token_texts == [" apple"]
    assert out.top_logprobs == [[[412, -0.0123], [97, -4.75]]]
    out = Response()
    assert _take_completion_logprobs(out, fx["completion_chunk"]["choices"][0]["logprobs"]) == 2
    assert out.token_ids == [230, 11] and out.token_texts == ["17", ","]
    assert out.top_logprobs[1] == [[11, -0.02], [13, -5.5]]


def test_a_bad_llamacpp_id_is_malformed_not_a_number() -> None:
    from observatory.client.answer import item_token_id

    assert item_token_id({"token": "token_id:7"}) == 7  # vLLM's form still reads
    for bad in (-1, "12", 1.5, True):
        with pytest.raises(ObservatoryError, match=r"token id in 0\.\."):
            item_token_id({"id": bad, "token": "x"})


def test_llama_spec_flags_are_speculation_not_a_confound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft arm differs from llama.cpp base only in --spec-* flags: not CONFOUNDED; other flags are."""
    from types import SimpleNamespace

    from observatory.judge.figures import launch_differences

    _fake_binary(tmp_path, monkeypatch)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    settings = EngineSettings(model=str(model), max_model_len=1024)
    base, ngram = parse_arms("llama.cpp:base,llama.cpp:ngram4")
    row = lambda arm, port: SimpleNamespace(engine=arm.engine,  # noqa: E731
                                            launch={"argv": engine_argv(arm, settings, port), "env": {}})
    assert launch_differences(row(ngram, 9001), row(base, 9000)) == []
    ngram.engine_args = ["--threads", "1"]
    assert launch_differences(row(ngram, 9001), row(base, 9000)) == ["--threads: absent on base, '1' here"]


def test_gguf_chat_template_has_no_sort_keys_and_renders_as_ours() -> None:
    """Issue 17 item 2: llama.cpp's jinja answered 400 "tojson sort_keys=true not implemented" on every tool
    probe; the GGUF's template sorts keys with a macro instead and renders the default probes as ours.

    Rendered here by transformers (Python's jinja); the engine test checks llama.cpp's own rendering
    (/apply-template) and ids (/tokenize) on the same probes.
    """
    from transformers import AutoTokenizer

    from observatory.engines.llamacpp_gguf import llama_chat_template
    from observatory.model.probes import load_probe_file, resolve_suite

    tok = AutoTokenizer.from_pretrained(str(DEFAULT_MODEL))
    ours = tok.chat_template
    theirs = llama_chat_template(ours)
    assert "sort_keys" in ours and "sort_keys" not in theirs
    tool_probes = [p for p in load_probe_file(resolve_suite("default")) if p.tools]
    assert tool_probes
    for p in tool_probes:
        reordered = [{**t, "function": {**t["function"], "parameters": dict(reversed(
            list(t["function"]["parameters"].items())))}} for t in p.tools or []]
        want = tok.apply_chat_template(p.messages, tools=p.tools, tokenize=False, add_generation_prompt=True)
        got = tok.apply_chat_template(p.messages, tools=reordered, tokenize=False, add_generation_prompt=True,
                                      chat_template=theirs)
        assert got == want, p.name


def test_gguf_chat_template_refuses_a_sort_keys_it_cannot_rewrite() -> None:
    """A template without sort_keys is kept as is; one using sort_keys another way is refused, not shipped."""
    from observatory.engines.llamacpp_gguf import llama_chat_template

    plain = "{{ messages[0].content | tojson }}"
    assert llama_chat_template(plain) == plain
    with pytest.raises(ValueError, match="cannot rewrite"):
        llama_chat_template("{{ tools | tojson(sort_keys=true, indent=2) }}")


def _flags(level: str) -> list[str]:
    return [f"-DCMAKE_C_FLAGS_RELEASE={level} -DNDEBUG", f"-DCMAKE_CXX_FLAGS_RELEASE={level} -DNDEBUG"]


def _stand_in_build(tmp_path: Path, cmake_script: str) -> tuple[Path, Path, dict[str, str]]:
    """A llama.cpp cache with a source tree and a stand-in cmake (CMAKE_SCRIPT) first on PATH, for
    build-llama.sh: (the version's cache root, the cmake log, the environment)."""
    import os

    root = tmp_path / "cache" / "11434.0.0"
    (root / "src").mkdir(parents=True)
    (root / "src" / "CMakeLists.txt").write_text("")
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "cmake").write_text("#!/usr/bin/env bash\n" + cmake_script)
    (fake / "cmake").chmod(0o755)
    log = tmp_path / "cmake.log"
    env = {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "CMAKE_LOG": str(log),
           "OBSERVATORY_LLAMA_CACHE": str(tmp_path / "cache")}
    env.pop("LLAMA_OPT", None)
    return root, log, env


@pytest.mark.parametrize("opt, expected", [(None, _flags("-O1")), ("", []), ("-O3", _flags("-O3"))],
                         ids=["O1-default", "release-flags", "LLAMA_OPT"])
def test_build_script_passes_the_optimisation_level(tmp_path: Path, opt: str | None, expected: list[str]) -> None:
    """Issue 17 item 1 (the build): build-llama.sh builds at -O1 unless LLAMA_OPT names another level (empty:
    CMake's Release flags), the knob measured in docs/engines.md; a stand-in cmake on PATH records its arguments."""
    import subprocess

    root, log, env = _stand_in_build(
        tmp_path, "printf '%s\\n' \"$@\" >> \"$CMAKE_LOG\"\necho --- >> \"$CMAKE_LOG\"\n"
        "if [ \"$1\" = --build ]; then mkdir -p \"$2/bin\"; touch \"$2/bin/llama-server\"; fi\n")
    if opt is not None:
        env["LLAMA_OPT"] = opt
    r = subprocess.run(["bash", str(REPO / "scripts" / "build-llama.sh"), sys.executable], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    configure = log.read_text().split("---\n")[0].splitlines()
    assert [a for a in configure if a.startswith("-DCMAKE_C_FLAGS_RELEASE") or
            a.startswith("-DCMAKE_CXX_FLAGS_RELEASE")] == expected
    assert "-DCMAKE_BUILD_TYPE=Release" in configure and (root / "bin" / "llama-server").is_file()


def test_two_builds_at_once_build_once(tmp_path: Path) -> None:
    """Issue 17 item 1: setup.sh builds llama-server in the background, so a second setup (or a user's
    build-llama.sh) may start while one runs; the second waits on the cache's lock and finds the binary,
    rather than building over the first. A stand-in cmake records its builds and takes a second per build."""
    import subprocess

    root, log, env = _stand_in_build(
        tmp_path, "if [ \"$1\" = --build ]; then echo build >> \"$CMAKE_LOG\"; sleep 1; "
        "mkdir -p \"$2/bin\"; touch \"$2/bin/llama-server\"; chmod +x \"$2/bin/llama-server\"; fi\n")
    argv = ["bash", str(REPO / "scripts" / "build-llama.sh"), sys.executable]
    runs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = [r.communicate(timeout=60) for r in runs]
    assert [r.returncode for r in runs] == [0, 0], outs
    assert log.read_text() == "build\n"
    assert {o[0].strip() for o in outs} == {str(root / "bin" / "llama-server")}
