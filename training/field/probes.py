"""Write probes/field.toml: the field model's suite, from held-out documents.

Every probe is made by the corpus's own example makers (`training.field.corpus`)
from the documents `held_out` reserves (man pages, Python files, fortunes,
reference paragraphs never in the training corpus), with a seed of its own;
fortune prompts are not used (their wordings carry no document, so they
could not be held out). `check` verifies that no probe prompt occurs in the
training corpus.

Expectations are only what the task fixes: a recitation's exact line, a tool
call's tool name and count, a JSON object on one line. Code and prose probes
carry none (the content and degeneracy gates apply by category).

Usage: python -m training.field.probes [OUT_TOML]
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from training.corpus import Example
from training.field.corpus import MAKERS, Pools, generate, pools
from training.field.sources import documents

PROBE_SEED = 99
PER_CATEGORY = 5
MAX_TOKENS = {"code": 96, "recitation": 64, "prose_en": 96, "prose_zh": 96, "tool_call": 64, "json": 64}
OUT = Path(__file__).resolve().parents[2] / "probes" / "field.toml"
_FORTUNE_PROMPTS = {"fortune"}


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def held_out_examples(p: Pools, corpus_prompts: set[str]) -> list[Example]:
    """PER_CATEGORY examples per category from the held-out pools (distinct
    prompts, none of `corpus_prompts`: a held-out line can also occur in
    another document)."""
    rng = random.Random(PROBE_SEED)
    out: list[Example] = []
    for maker in MAKERS.values():
        seen: set[str] = set()
        while len(seen) < PER_CATEGORY:
            ex = maker(p, rng)
            if ex is None or ex.values[-1] in _FORTUNE_PROMPTS or ex.user_text in corpus_prompts:
                continue
            key = str(ex.values) if ex.values[-1].startswith("man:") else ex.user_text
            if key in seen:
                continue
            seen.add(key)
            out.append(ex)
    return out


def expectation(ex: Example) -> dict[str, Any]:
    """What the task itself fixes (see the module docstring)."""
    if ex.category == "recitation":
        return {"exact": ex.answer}
    if ex.category == "tool_call":
        return {"tool_names": [ex.values[1]], "tool_count": 1}
    if ex.category == "json":
        return {"regex": r"\{.*\}"}
    return {}


def render(examples: list[Example]) -> str:
    """The suite as TOML."""
    lines = [
        'suite = "field"',
        'description = """',
        "The field model's suite (observatory/field_model): real-text prompts from",
        "documents held out of its corpus (training/field/probes.py): Python code",
        "continuation, exact recitation of real lines, English and Chinese prose",
        "about man pages and the Debian reference, hermes tool calls, JSON objects.",
        '"""',
    ]
    counters: dict[str, int] = {}
    for ex in examples:
        counters[ex.category] = counters.get(ex.category, 0) + 1
        lines += [
            "",
            "[[probe]]",
            f'name = "{ex.category.replace("_", "-")}-{counters[ex.category]}"',
            f'category = "{ex.category}"',
            f"messages = [{_toml({'role': 'user', 'content': ex.user_text})}]",
            f"max_tokens = {MAX_TOKENS[ex.category]}",
        ]
        if ex.tools:
            lines.append(f"tools = {_toml(ex.tools)}")
            lines.append('tool_choice = "auto"')
        expect = expectation(ex)
        if expect:
            lines.append("[probe.expect]")
            lines += [f"{k} = {_toml(v)}" for k, v in expect.items()]
    return "\n".join(lines) + "\n"


def check(examples: list[Example], corpus: list[Example]) -> list[str]:
    """Probe prompts that occur in the training corpus (should be none)."""
    prompts = {ex.user_text for ex in corpus}
    return [ex.user_text for ex in examples if ex.user_text in prompts]


def main(out: Path = OUT) -> None:
    docs = documents()
    corpus = list(generate(pools(docs)))
    examples = held_out_examples(pools(docs, held=True), {ex.user_text for ex in corpus})
    leaks = check(examples, corpus)
    if leaks:
        raise SystemExit(f"probe prompts in the corpus: {leaks}")
    out.write_text(render(examples), encoding="utf-8")
    print(f"{len(examples)} probes -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
