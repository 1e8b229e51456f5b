"""The field model's chat corpus, built from the real text of `sources`.

Every example is a conversation in the format of `training.corpus.Example`
(rendered by `training.render`), so the default model's chat template, tool
tags and training code apply unchanged. Categories, all from package text:

- code: continue a Python file of a pinned wheel (4-10 lines given, the next
  lines answered);
- recitation: repeat one real line (man page sentence, code line, fortune) exactly;
- prose_en: what an English man page describes (its summary and first
  paragraph), continue a man page paragraph, tell a fortune;
- prose_zh: the same for Chinese man pages, Chinese fortunes and poems,
  continue a paragraph of the Debian reference;
- tool_call: hermes tool calls whose arguments are real names (man pages,
  functions defined in the wheels, man page summaries as search queries);
- json: a man page's NAME line, or a function's name/arguments/docstring,
  as a JSON object.

Held out: every document whose id hashes into the held-out bucket
(`held_out`) is left out of the corpus; the probe suite `probes/field.toml`
is made from those documents only (`training.field.probes`).
"""

from __future__ import annotations

import ast
import json
import random
import re
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from training.corpus import Example
from training.field.sources import Documents, ManPage, PyFile

SEED = 2027
HELD_OUT_BUCKETS = 25  # one document in 25 is held out

COUNTS: dict[str, int] = {
    "code": 7000,
    "recitation": 5000,
    "prose_en": 4000,
    "prose_zh": 5000,
    "tool_call": 3000,
    "json": 3000,
}
MAX_ANSWER_CHARS = 480
MAX_ZH_CHARS = 220


def held_out(doc_id: str) -> bool:
    """Whether the document `doc_id` is reserved for the probes."""
    return zlib.crc32(doc_id.encode()) % HELD_OUT_BUCKETS == 0


def _chat(category: str, user: str, answer: str, source: str) -> Example:
    return Example(
        category,
        [{"role": "user", "content": user}, {"role": "assistant", "content": answer}],
        values=(category, source),
    )


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|(?<=[。！？；])", text) if s.strip()]


def _clip(text: str, limit: int) -> str:
    """`text` cut at a sentence end at or before `limit` characters (or at a space)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    ends = [m.end() for m in re.finditer(r"[.!?。！？；]", cut)]
    if ends and ends[-1] > limit // 3:
        return cut[: ends[-1]].strip()
    return cut.rsplit(" ", 1)[0].strip() if " " in cut else cut


@dataclass
class Pools:
    """The documents split into what the corpus may use (or the probes: `held`)."""

    man_en: list[ManPage]
    man_zh: list[ManPage]
    fortunes_en: list[str]
    fortunes_zh: list[str]
    reference_zh: list[str]
    code: list[PyFile]
    functions: list[tuple[str, str, list[str], str]]  # package, qualified name, args, doc line


def _functions(files: list[PyFile]) -> list[tuple[str, str, list[str], str]]:
    out = []
    for f in files:
        try:
            tree = ast.parse(f.text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                members = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                pairs = [(f"{node.name}.{n.name}", n) for n in members]
            elif isinstance(node, ast.Module):
                pairs = [(n.name, n) for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
            else:
                continue
            for qual, fn in pairs:
                doc = (ast.get_docstring(fn) or "").strip().split("\n")[0].strip()
                args = [a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs]
                if fn.args.vararg:
                    args.append("*" + fn.args.vararg.arg)
                if fn.args.kwarg:
                    args.append("**" + fn.args.kwarg.arg)
                if doc and len(doc) < 120:
                    out.append((f.package, qual, args, doc))
    return out


def pools(docs: Documents, held: bool = False) -> Pools:
    """The training documents (held=False) or the held-out ones (held=True)."""

    def keep(doc_id: str) -> bool:
        return held_out(doc_id) == held

    man = [m for m in docs.man if keep(f"man:{m.name}.{m.section}")]  # both languages
    code = [f for f in docs.code if keep(f"py:{f.package}/{f.path}")]
    return Pools(
        man_en=[m for m in man if m.lang == "en"],
        man_zh=[m for m in man if m.lang == "zh"],
        fortunes_en=[t for i, t in enumerate(docs.fortunes_en) if keep(f"fortune:en:{i}")],
        fortunes_zh=[t for i, t in enumerate(docs.fortunes_zh) if keep(f"fortune:zh:{i}")],
        reference_zh=[t for i, t in enumerate(docs.reference_zh) if keep(f"ref:zh:{i}")],
        code=code,
        functions=_functions(code),
    )


def _first_para(m: ManPage, titles: tuple[str, ...]) -> str:
    for title, text in m.paragraphs:
        if title.upper() in titles and len(text) > 40:
            return text
    return ""


DESC_EN = ("DESCRIPTION",)
DESC_ZH = ("描述", "描叙", "说明", "DESCRIPTION", "详述", "描 述")


# ---------------------------------------------------------------- code
CODE_WORDINGS = (
    "Continue this Python code from {where}:\n{ctx}",
    "Here is the start of {where}. Write the next lines.\n{ctx}",
    "Complete the following code ({where}):\n{ctx}",
)


def code_example(p: Pools, rng: random.Random) -> Example | None:
    f = rng.choice(p.code)
    lines = f.text.split("\n")
    if len(lines) < 16:
        return None
    start = rng.randrange(0, len(lines) - 14)
    n_ctx = rng.randint(4, 10)
    ctx = "\n".join(lines[start : start + n_ctx])
    rest = lines[start + n_ctx : start + n_ctx + 12]
    answer = []
    for line in rest:
        if len("\n".join([*answer, line])) > MAX_ANSWER_CHARS:
            break
        answer.append(line)
    text = "\n".join(answer).rstrip()
    if not ctx.strip() or len(text.strip()) < 20:
        return None
    where = f"{f.package} {f.version}, {f.path}"
    return _chat("code", rng.choice(CODE_WORDINGS).format(where=where, ctx=ctx), text, f"py:{f.path}")


# ---------------------------------------------------------------- recitation
RECITE_WORDINGS = (
    "Repeat this line exactly:\n{line}",
    "Say the following back to me, word for word:\n{line}",
    "Copy this text: {line}",
)
RECITE_WORDINGS_ZH = ("请原样重复下面这句话：\n{line}", "把这句话抄写一遍：{line}")


def _line_pool(p: Pools, rng: random.Random) -> tuple[str, bool]:
    kind = rng.randrange(5)
    if kind == 0:
        f = rng.choice(p.code)
        lines = [s.strip() for s in f.text.split("\n") if 15 <= len(s.strip()) <= 100]
        return (rng.choice(lines) if lines else ""), False
    if kind == 1:
        return rng.choice(rng.choice(p.fortunes_en).split("\n")).strip(), False
    if kind == 2:
        s = rng.choice(rng.choice(p.fortunes_zh).split("\n")).strip()
        return s, True
    if kind == 3:
        m = rng.choice(p.man_zh)
        sents = _sentences(rng.choice(m.paragraphs)[1]) if m.paragraphs else []
        return (rng.choice(sents) if sents else ""), True
    m = rng.choice(p.man_en)
    sents = _sentences(rng.choice(m.paragraphs)[1]) if m.paragraphs else []
    return (rng.choice(sents) if sents else ""), False


def recitation_example(p: Pools, rng: random.Random) -> Example | None:
    line, zh = _line_pool(p, rng)
    if not 8 <= len(line) <= 160 or line.startswith("--"):
        return None
    wording = rng.choice(RECITE_WORDINGS_ZH if zh and rng.random() < 0.6 else RECITE_WORDINGS)
    return _chat("recitation", wording.format(line=line), line, "line")


# ---------------------------------------------------------------- prose
DESCRIBE_EN = (
    "What does the {name}({section}) manual page describe?",
    "Explain {name} in a few sentences.",
    "Tell me about {name}.",
)
CONTINUE_EN = "Continue this passage from the {name}({section}) manual page:\n{start}"
FORTUNE_EN = ("Tell me a fortune.", "Give me a saying.", "Say something wise.", "Tell me a joke.")


def prose_en_example(p: Pools, rng: random.Random) -> Example | None:
    kind = rng.randrange(3)
    if kind == 0:
        m = rng.choice(p.man_en)
        desc = _first_para(m, DESC_EN)
        if not desc:
            return None
        answer = _clip(f"{m.name} - {m.summary}. {desc}", MAX_ANSWER_CHARS)
        user = rng.choice(DESCRIBE_EN).format(name=m.name, section=m.section)
        return _chat("prose_en", user, answer, f"man:{m.name}")
    if kind == 1:
        m = rng.choice(p.man_en)
        if not m.paragraphs:
            return None
        sents = _sentences(rng.choice(m.paragraphs)[1])
        if len(sents) < 3:
            return None
        user = CONTINUE_EN.format(name=m.name, section=m.section, start=sents[0])
        return _chat("prose_en", user, _clip(" ".join(sents[1:]), MAX_ANSWER_CHARS), f"man:{m.name}")
    fortune = rng.choice(p.fortunes_en)
    if len(fortune) > MAX_ANSWER_CHARS:
        return None
    return _chat("prose_en", rng.choice(FORTUNE_EN), fortune, "fortune")


DESCRIBE_ZH = ("{name} 命令是做什么的？", "请简单介绍一下 {name}。", "{name} 的手册页讲了什么？")
FORTUNE_ZH = ("给我讲一句格言。", "说一段有道理的话。", "请写一首诗。", "背一首古诗吧。")
CONTINUE_ZH = "请接着写下去：{start}"


def prose_zh_example(p: Pools, rng: random.Random) -> Example | None:
    kind = rng.randrange(3)
    if kind == 0:
        m = rng.choice(p.man_zh)
        desc = _first_para(m, DESC_ZH)
        if not desc:
            return None
        answer = _clip(f"{m.name} - {m.summary}。{desc}", MAX_ZH_CHARS)
        return _chat("prose_zh", rng.choice(DESCRIBE_ZH).format(name=m.name), answer, f"man:{m.name}")
    if kind == 1:
        para = rng.choice(p.reference_zh)
        sents = _sentences(para)
        if len(sents) < 2:
            return None
        answer = _clip("".join(sents[1:]), MAX_ZH_CHARS)
        return _chat("prose_zh", CONTINUE_ZH.format(start=sents[0]), answer, "ref")
    fortune = rng.choice(p.fortunes_zh)
    if len(fortune) > MAX_ZH_CHARS:
        return None
    poem = "作者：" in fortune
    wording = rng.choice(FORTUNE_ZH[2:] if poem else FORTUNE_ZH[:2])
    return _chat("prose_zh", wording, fortune, "fortune")


# ---------------------------------------------------------------- tool calls
def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOLS: dict[str, dict[str, Any]] = {
    "read_manual": _tool(
        "read_manual", "Open a manual page.",
        {"page": {"type": "string"}, "section": {"type": "integer"}}, ["page", "section"],
    ),
    "find_symbol": _tool(
        "find_symbol", "Find where a Python function or method is defined.",
        {"package": {"type": "string"}, "symbol": {"type": "string"}}, ["package", "symbol"],
    ),
    "search_docs": _tool(
        "search_docs", "Search the documentation.", {"query": {"type": "string"}}, ["query"],
    ),
}
MANUAL_WORDINGS = (
    "Open the manual page for {page} in section {section}.",
    "Show me the {page}({section}) man page.",
    "打开 {page} 的第 {section} 节手册页。",
)
SYMBOL_WORDINGS = (
    "Where is {symbol} defined in {package}?",
    "Find the definition of {symbol} in the {package} package.",
)
SEARCH_WORDINGS = ("Search the docs for: {query}", "搜索文档：{query}")


def tool_request(p: Pools, rng: random.Random) -> tuple[str, str, dict[str, Any]] | None:
    """(user text, tool name, arguments) from a real man page or function."""
    kind = rng.randrange(3)
    if kind == 0:
        m = rng.choice(p.man_en + p.man_zh)
        if not m.section.isdigit():
            return None
        args: dict[str, Any] = {"page": m.name, "section": int(m.section)}
        return rng.choice(MANUAL_WORDINGS).format(**args), "read_manual", args
    if kind == 1:
        package, symbol, _, _ = rng.choice(p.functions)
        args = {"package": package, "symbol": symbol}
        return rng.choice(SYMBOL_WORDINGS).format(**args), "find_symbol", args
    m = rng.choice(p.man_en + p.man_zh)
    args = {"query": m.summary}
    if len(m.summary) > 80:
        return None
    wording = SEARCH_WORDINGS[1] if m.lang == "zh" else SEARCH_WORDINGS[0]
    return wording.format(**args), "search_docs", args


def tool_call_example(p: Pools, rng: random.Random) -> Example | None:
    req = tool_request(p, rng)
    if req is None:
        return None
    user, name, arguments = req
    others = [t for t in TOOLS if t != name]
    offered = [name, *rng.sample(others, rng.randint(0, 2))]
    rng.shuffle(offered)
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    return Example(
        "tool_call",
        [{"role": "user", "content": user}, {"role": "assistant", "content": None, "tool_calls": [call]}],
        tools=[TOOLS[t] for t in offered],
        values=("tool_call", name, json.dumps(arguments, ensure_ascii=False)),
    )


# ---------------------------------------------------------------- json
JSON_MAN = "Give the NAME line of the {name}({section}) manual page as JSON with keys name, section, summary."
JSON_FN = "Describe {symbol} from {package} as JSON with keys name, args, doc."


def json_example(p: Pools, rng: random.Random) -> Example | None:
    if rng.random() < 0.5:
        m = rng.choice(p.man_en + p.man_zh)
        obj: dict[str, Any] = {"name": m.name, "section": m.section, "summary": m.summary}
        user = JSON_MAN.format(name=m.name, section=m.section)
    else:
        package, symbol, args, doc = rng.choice(p.functions)
        obj = {"name": symbol, "args": args, "doc": doc}
        user = JSON_FN.format(symbol=symbol, package=package)
    return _chat("json", user, json.dumps(obj, ensure_ascii=False), "json")


MAKERS: dict[str, Callable[[Pools, random.Random], Example | None]] = {
    "code": code_example,
    "recitation": recitation_example,
    "prose_en": prose_en_example,
    "prose_zh": prose_zh_example,
    "tool_call": tool_call_example,
    "json": json_example,
}


def generate(p: Pools, seed: int = SEED, counts: dict[str, int] = COUNTS) -> Iterator[Example]:
    """`counts[c]` examples per category from the pools (deterministic for a seed)."""
    rng = random.Random(seed)
    for category, n in counts.items():
        made = 0
        while made < n:
            ex = MAKERS[category](p, rng)
            if ex is not None:
                made += 1
                yield ex
