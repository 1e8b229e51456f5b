"""A judged session with realistic rows, made through the real store and judged by the real `evaluate`.

Text, token ids, top-k logprobs, chunks, counters and throughput for four probes (one of them hostile markup) on
base, its A/A copy and two spec arms; what the report, history and summary tests read.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click

from observatory.cli import ObservatoryGroup
from observatory.commands import report_cmd
from observatory.commands.evaluate import evaluate
from observatory.model.probes import Probe
from observatory.store.db import ArmRow, MeasurementRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store

HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"
HOSTILE_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
PROBES = [
    Probe("count", "counting", messages=[{"role": "user", "content": "Count from 1 to 5."}], max_tokens=16,
          gates=["content", "expect"], expect={"exact": "1, 2, 3, 4, 5"}),
    Probe("weather", "tool_call", messages=[{"role": "user", "content": "Weather in Paris?"}],
          gates=["content", "tool_calls", "expect"], tools=[WEATHER_TOOL],
          expect={"tool_names": ["get_weather"], "tool_count": 1}),
    Probe("poem-zh", "prose_zh", messages=[{"role": "user", "content": "背一首唐诗。"}],
          gates=["content", "expect", "degeneracy"]),
    Probe("echo", "prose_en", messages=[{"role": "user", "content": f"Repeat exactly: {HOSTILE}"}],
          gates=["content", "degeneracy"]),
]
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOKENS = {
    "count": ["1", ",", " 2", ",", " 3", ",", " 4", ",", " 5"],
    "weather": re.findall(r".{1,4}", CALL, re.DOTALL),
    "poem-zh": list("春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"),
    "echo": re.findall(r".{1,3}", HOSTILE, re.DOTALL),
}
# spec arm -> probe -> (position, replacement tokens from there on, base margin in nats)
DIVERGENCES = {"mtp2": {"count": (4, [" 5", ",", " 5", ",", " 5"], 3.0)},
               "mtp1": {"poem-zh": (6, list("到处闻啼鸟。"), 0.1)}}


def _vocab() -> dict[str, int]:
    words = sorted({t for ts in TOKENS.values() for t in ts}
                   | {t for d in DIVERGENCES.values() for _, ts, _ in d.values() for t in ts})
    return {w: 100 + i for i, w in enumerate(words)}


def _chunk_sizes(n: int, tau: float) -> list[int]:
    """N tokens in chunks of mean size TAU (one chunk per engine step, as a spec arm streams)."""
    sizes: list[int] = []
    i = 0
    while sum(sizes) < n:
        sizes.append(min(int((i + 1) * tau) - int(i * tau), n - sum(sizes)))
        i += 1
    return sizes


def _result(arm_id: int, probe_id: int, probe: str, tokens: list[str], mode: str, rate: float,
            ttft: float, margin_at: tuple[int, str, float] | None, counters: dict[str, Any]) -> ResultRow:
    vocab = _vocab()
    ids = [vocab[t] for t in tokens]
    top = [[[i, -0.05], [7, -4.0], [8, -5.0]] for i in ids]
    if margin_at is not None:  # base's top-k also lists the token the spec arm chose there
        pos, alt, margin = margin_at
        top[pos] = [[ids[pos], -0.05], [vocab[alt], -0.05 - margin], [8, -6.0]]
    text = "" if probe == "weather" else "".join(tokens)
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}] if probe == "weather" else None
    step = 1000.0 / rate
    tau = 1 + counters["accepted"] / counters["drafts"] if counters.get("drafts") else 1.0
    chunks, at = [], 0
    for size in _chunk_sizes(len(ids), tau):
        chunks.append([round(ttft + step * at, 3), size])
        at += size
    return ResultRow(arm_id=arm_id, probe_id=probe_id, mode=mode, ok=True, text=text,
                     content=None if calls else text, token_ids=ids, token_texts=tokens, top_logprobs=top,
                     tool_calls=calls, finish_reason="tool_calls" if calls else "stop",
                     usage={"completion_tokens": len(ids), "prompt_tokens": 20},
                     ttft_ms=ttft, duration_ms=ttft + step * (len(ids) - 1),
                     chunks=chunks, counters_delta=counters)


def make_session(store: Store, arms: tuple[str, ...] = ("base", "base#2", "mtp1", "mtp2"), accept: float = 0.7,
                 spec_rate: float = 70.0, base_rate: float = 50.0, spread: float = 0.02, model: str = "toy/mtp-model",
                 divergences: dict[str, dict[str, tuple[int, list[str], float]]] | None = None,
                 batch_divergence: str | None = None, probes: list[Probe] = PROBES) -> int:
    """A judged session with realistic rows: text, token ids, top-k logprobs, chunks, counters, throughput."""
    divergences = DIVERGENCES if divergences is None else divergences
    s = store.add(SessionRow(host="ci-runner", gpu="NVIDIA H200", model=model, observatory_version="0.1.0",
                             machine={"cpu": "Xeon", "cpus": 16, "memory_gib": 128, "gpus": ["NVIDIA H200"],
                                      "driver": "560.35", "python": "3.11.7", "platform": "Linux"},
                             command=["observatory", "compare", "--arms", ",".join(arms)], suite="default",
                             options={"concurrency": [1, 4]}))
    pids = {p.name: store.add(ProbeRow(session_id=s.id, position=i, name=p.name, category=p.category,
                                       content_hash=p.content_hash, definition=p.to_dict(),
                                       params={"temperature": 0.0, "max_tokens": p.max_tokens})).id
            for i, p in enumerate(probes)}
    for pos, name in enumerate(arms):
        k = int(name[3:]) if name.startswith("mtp") else None
        spec = {"method": "mtp", "num_speculative_tokens": k} if k else None
        argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--port", str(8000 + pos)]
        argv += ["--speculative-config", json.dumps(spec)] if spec else []
        a = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", engine_version="0.32.0",
                             model=model, launch={"speculative_config": spec, "argv": argv, "env": {},
                                                  "copy_of": "base" if name == "base#2" else None}))
        rate = spec_rate if k else base_rate * (1 + spread if name == "base#2" else 1)
        for p in probes:
            tokens = list(TOKENS[p.name])
            margin_at = None
            div = divergences.get(name, {}).get(p.name)
            if div is not None:
                at, repl, _ = div
                tokens = tokens[:at] + repl
            # base's top-k shows each spec arm's alternative; so does every arm's that emitted base's tokens
            # there (one model, one prefix: one top-k, as the answer_fields gate expects of a real engine)
            for other, d in divergences.items():
                if div is None and p.name in d and other in arms:
                    margin_at = (d[p.name][0], d[p.name][1][0], d[p.name][2])
            counters: dict[str, Any] = {}
            if k:  # 60 drafts per probe; P(accepted >= j) = accept ** j
                per_pos = [round(60 * accept ** (j + 1)) for j in range(k)]
                counters = {"drafts": 60, "draft_tokens": 60 * k, "accepted": sum(per_pos),
                            "accepted_per_pos": per_pos}
            store.add(_result(a.id, pids[p.name], p.name, tokens, "stream", rate, 40.0, margin_at, counters))
            store.add(_result(a.id, pids[p.name], p.name, tokens, "nonstream", rate, 40.0, None, {}))
            batch = tokens[:2] + [" 4"] + tokens[3:] if name == batch_divergence and p.name == "count" else tokens
            store.add(_result(a.id, pids[p.name], p.name, batch, "batch", rate, 40.0, None, {}))
            store.add(_result(a.id, pids[p.name], p.name, tokens, "timed", rate, 40.0, None, {}))
        for level in (1, 4):
            store.add(MeasurementRow(arm_id=a.id, concurrency=level, repeat=0, requests=4 * level,
                                     completion_tokens=400, wall_s=400 / (rate * (3 if level == 4 else 1))))
    evaluate(store, s.id)
    store.finish_session(s.id, "complete")
    return int(s.id)


def report_cli() -> click.Group:
    """The `report` and `history` commands alone, in a group as the CLI has them."""
    group = ObservatoryGroup(name="observatory")
    group.add_command(report_cmd.report)
    group.add_command(report_cmd.history)
    return group
