"""The field model's reasoning variant (observatory/field_reasoning_model,
issue 49 item 8): its template renders the field model's prompts byte for
byte unless asked to think, opens a think block when asked, its tokenizer has
<think>/</think> as single non-special ids, its config has vocab 4098 and
bfloat16, and its reasoning corpus holds no probe prompt. CPU only, no engine."""

from __future__ import annotations

import json
import random

import pytest

transformers = pytest.importorskip("transformers")

from tests.support.paths import REPO  # noqa: E402
from training.corpus import Example  # noqa: E402
from training.field import reasoning_corpus as rc  # noqa: E402
from training.field.corpus import TOOLS, Pools  # noqa: E402
from training.field.sources import DEFAULT_SRC  # noqa: E402

MODEL = REPO / "observatory" / "field_reasoning_model"
FIELD = REPO / "observatory" / "field_model"
PROBES = REPO / "probes" / "field.toml"


@pytest.fixture(scope="module")
def tok():  # type: ignore[no-untyped-def]
    return transformers.AutoTokenizer.from_pretrained(MODEL)


@pytest.fixture(scope="module")
def field_tok():  # type: ignore[no-untyped-def]
    return transformers.AutoTokenizer.from_pretrained(FIELD)


def _conversations() -> list[tuple[list[dict], list[dict] | None]]:
    """Many conversations: probe prompts (with their tools), system prompts,
    assistant turns with content and tool calls, tool results."""
    import tomllib

    probes = tomllib.loads(PROBES.read_text(encoding="utf-8"))["probe"]
    convs: list[tuple[list[dict], list[dict] | None]] = [(p["messages"], p.get("tools")) for p in probes]
    rng = random.Random(49)
    tools = list(TOOLS.values())
    for i in range(40):
        user = {"role": "user", "content": f"question {i}: {'Where is' if i % 2 else '打开'} x{i}?"}
        call = {"type": "function", "function": {"name": "search_docs", "arguments": {"query": f"q{i}"}}}
        msgs: list[dict] = [user]
        if i % 3 == 0:
            msgs.insert(0, {"role": "system", "content": f"You are helper {i}."})
        if i % 4 == 1:
            msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "content": f"result {i}"}]
        if i % 4 == 2:
            msgs += [{"role": "assistant", "content": f"answer {i}"}, {"role": "user", "content": "more"}]
        convs.append((msgs, rng.sample(tools, rng.randint(1, 3)) if i % 2 else None))
    return convs


def test_template_without_thinking_is_the_field_template(tok, field_tok) -> None:  # type: ignore[no-untyped-def]
    convs = _conversations()
    assert len(convs) >= 60
    for msgs, tools in convs:
        for gen in (True, False):
            ours = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)
            field = field_tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False)
            assert ours == field
            off = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=gen, tokenize=False,
                                          enable_thinking=False)
            assert off == field


def test_think_generation_prompt(tok, field_tok) -> None:  # type: ignore[no-untyped-def]
    for msgs, tools in _conversations()[:40]:
        field = field_tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
        think = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False,
                                        enable_thinking=True)
        assert field.endswith("<|im_start|>assistant\n")
        assert think == field + "<think>\n"


def test_reasoning_content_renders_a_think_block(tok) -> None:  # type: ignore[no-untyped-def]
    call = {"type": "function", "function": {"name": "search_docs", "arguments": {"query": "ls"}}}
    for key in ("reasoning_content", "reasoning"):
        msgs = [{"role": "user", "content": "Search the docs for: ls"},
                {"role": "assistant", "content": None, "tool_calls": [call], key: "I will call search_docs."}]
        text = tok.apply_chat_template(msgs, tools=[TOOLS["search_docs"]["function"]], tokenize=False)
        assert text.endswith("<|im_start|>assistant\n<think>\nI will call search_docs.\n</think>\n\n"
                             '<tool_call>{"name": "search_docs", "arguments": {"query": "ls"}}</tool_call><|im_end|>\n')


def test_think_tags_are_single_non_special_tokens(tok) -> None:  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    assert len(tok) == 4098
    assert tok.encode("<think>", add_special_tokens=False) == [4096]
    assert tok.encode("</think>", add_special_tokens=False) == [4097]
    cfg = json.loads((MODEL / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert cfg["added_tokens_decoder"]["4096"]["special"] is False
    assert cfg["added_tokens_decoder"]["4097"]["special"] is False
    text = ("<|im_start|>assistant\n<think>\nThe user asks to search the docs for ls. I will call search_docs.\n"
            '</think>\n\n<tool_call>{"name": "search_docs", "arguments": {"query": "ls"}}</tool_call><|im_end|>')
    ids = tok.encode(text, add_special_tokens=False)
    assert ids == raw.encode(text).ids
    assert ids.count(4096) == 1 and ids.count(4097) == 1
    assert tok.decode(ids, skip_special_tokens=True).startswith("assistant\n<think>\n")
    field_vocab = json.loads((FIELD / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert json.loads((MODEL / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"] == field_vocab


def test_config_vocab_and_dtype() -> None:
    cfg = json.loads((MODEL / "config.json").read_text())
    assert cfg["vocab_size"] == 4098
    assert cfg["torch_dtype"] == "bfloat16"
    assert cfg["architectures"] == ["MiMoForCausalLM"]
    field = json.loads((FIELD / "config.json").read_text())
    assert {k: v for k, v in cfg.items() if k not in ("vocab_size", "torch_dtype")} == \
        {k: v for k, v in field.items() if k not in ("vocab_size", "torch_dtype")}


def test_weights_load_with_two_new_rows() -> None:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    ours = load_file(str(MODEL / "model.safetensors"))
    assert ours["model.embed_tokens.weight"].shape[0] == 4098
    assert ours["lm_head.weight"].shape[0] == 4098
    assert all(v.dtype == torch.bfloat16 for v in ours.values())
    assert (MODEL / "model.safetensors").stat().st_size < 8 * 1024 * 1024


def test_generate_skips_excluded_prompts() -> None:
    from training.field.sources import ManPage

    man = [ManPage(name=f"page{i}", section="1", lang="en", summary=f"summary {i}", paragraphs=[])
           for i in range(3)]
    pools = Pools(man_en=man, man_zh=[], fortunes_en=[], fortunes_zh=[], reference_zh=[], code=[],
                  functions=[("click", "echo", ["message"], "Print a message.")])
    counts = {"tool_call": 30, "json": 20}
    made = list(rc.generate(pools, 1, counts, exclude=set()))
    banned = {made[0].user_text, made[-1].user_text}
    kept = list(rc.generate(pools, 1, counts, exclude=banned))
    assert len(kept) == 50 and not banned & {ex.user_text for ex in kept}
    for ex in kept:
        assert isinstance(ex, Example) and ex.messages[1]["reasoning_content"].startswith("The user asks")
        prompt, completion = rc.split_thinking(ex)
        assert prompt.endswith("<|im_start|>assistant\n<think>\n")
        assert "\n</think>\n\n" in completion and completion.endswith("<|im_end|>")


@pytest.mark.skipif(not (DEFAULT_SRC / "deb").is_dir(), reason="field sources not downloaded (python -m training.field.sources)")
def test_reasoning_corpus_holds_no_probe_prompt() -> None:
    from training.field.corpus import pools
    from training.field.sources import documents

    docs = documents()
    probes = rc.probe_prompts(PROBES)
    assert len(probes) == 30
    corpus = list(rc.generate(pools(docs)))
    assert not probes & {ex.user_text for ex in corpus}
    cats = {ex.category for ex in corpus}
    assert cats == {"code", "recitation", "prose_en", "prose_zh", "tool_call", "json"}
    assert sum(ex.category == "tool_call" for ex in corpus) >= len(corpus) / 3


def test_reasoning_smoke_compare(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    """benchmarks/reasoning_smoke.py --compare: argument JSON compared as objects."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reasoning_smoke", REPO / "benchmarks" / "reasoning_smoke.py")
    assert spec and spec.loader
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    row = {"name": "t", "think": True, "stream": False, "reasoning_field": "reasoning", "reasoning": "r\n",
           "content": None, "finish_reason": "tool_calls",
           "tool_calls": [{"name": "search_docs", "arguments": '{"query": "ls"}'}]}
    other = {**row, "tool_calls": [{"name": "search_docs", "arguments": '{"query":"ls"}'}]}
    (tmp_path / "a.json").write_text(json.dumps([row, row]))
    (tmp_path / "b.json").write_text(json.dumps([other, {**row, "content": "x"}]))
    assert smoke.compare(tmp_path / "a.json", tmp_path / "b.json") == 1
    assert "1 of 2 responses agree" in capsys.readouterr().out
    assert len(smoke.requests_to_send()) == 9
