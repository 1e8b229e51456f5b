"""Stored sessions of llama.cpp and vLLM arms answering one counting probe as llama-server answered it.

The stream shapes are llama-server's own (11434.0.0, draft2 arm on the bundled model): the first streamed chunk
carries a logprobs entry, every token accepted from a draft arrives with ``logprobs: null``; the non-streamed
response lists every token with its ``id``.
"""

from __future__ import annotations

from typing import Any

from observatory.model.probes import Probe
from observatory.store.db import ArmRow, ProbeRow, ResultRow, SessionRow
from observatory.store.session_store import Store

PROBE = Probe("count", "counting", prompt="1, 2, 3, 4, 5,", max_tokens=12, gates=["content"])
IDS = [223, 24, 14, 223, 25, 14, 223, 26, 14, 223, 27, 14]  # " 6, 7, 8, 9," as llama-server answered
TEXTS = [" ", "6", ",", " ", "7", ",", " ", "8", ",", " ", "9", ","]


def launch_record(name: str, engine: str, spec: dict[str, Any] | None) -> dict[str, Any]:
    """The stored launch of arm NAME on ENGINE with speculative config SPEC."""
    argv = (["/cache/llama-server", "--model", "m.gguf"] if engine == "llama.cpp"
            else ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"])
    return {"speculative_config": spec, "argv": argv, "env": {}, "engine": engine}


def result_row(arm_id: int, pid: int, mode: str, ids: list[int], texts: list[str]) -> ResultRow:
    """One answer to PROBE in MODE, with IDS and TEXTS and base's top-k at a 5-nat margin."""
    return ResultRow(arm_id=arm_id, probe_id=pid, mode=mode, ok=True, text="".join(TEXTS), content="".join(TEXTS),
                     token_ids=ids, token_texts=texts, top_logprobs=[[[i, -0.01], [7, -5.0]] for i in ids],
                     finish_reason="length", usage={"completion_tokens": len(IDS)}, ttft_ms=5.0, duration_ms=20.0,
                     chunks=[], counters_delta={}, concurrency=1)


def session_of_arms(store: Store, arms: list[tuple[str, str, dict[str, Any] | None, bool]]) -> int:
    """Arms as (name, engine, speculative config, whether the stream carried every id)."""
    s = store.add(SessionRow(host="h", model="m", observatory_version="0", command=[], suite="t", options={}))
    pid = store.add(ProbeRow(session_id=s.id, position=0, name=PROBE.name, category=PROBE.category,
                             content_hash=PROBE.content_hash, definition=PROBE.to_dict(), params={})).id
    for pos, (name, engine, spec, complete) in enumerate(arms):
        a = store.add(ArmRow(session_id=s.id, position=pos, name=name, status="ok", launch=launch_record(name, engine, spec)))
        streamed = (IDS, TEXTS) if complete else (IDS[:1], TEXTS[:1])
        store.add(result_row(a.id, pid, "stream", *streamed))
        store.add(result_row(a.id, pid, "nonstream", IDS, TEXTS))
    return int(s.id)
