"""What a URL arm's server must expose, checked once before a session is stored (issue 30 item 6).

A server someone else started is asked one greedy chat request of one token,
with the logprobs and token ids a correctness pass asks for
(`observatory.client.send.request_params`). Only a definite sign of a
missing serving flag refuses the session, as a setup error (exit 3) whose
one line names the flag:

- HTTP 400 that names logprobs: the server's ``--max-logprobs`` is below the
  ``top_logprobs`` a pass asks for (`TOP_LOGPROBS`);
- answered logprobs whose tokens are text, not ``token_id:N``: the server
  ignores ``return_tokens_as_token_ids``.

Anything else (a timeout, a refused key, a malformed answer, a hung server)
proves no missing flag: the session runs and records it as it always has.
The whole checklist is in README.md ("Your own model on your own GPU").
Only vLLM URL arms are asked (SGLang and llama.cpp carry ids their own way).
"""

from __future__ import annotations

from typing import Any

import httpx

from observatory.client.send import TOP_LOGPROBS, EngineClient, RequestFailed, request_body, request_params
from observatory.client.sse import MalformedStream, decode_json
from observatory.model.arms import Arm
from observatory.model.errors import ArmError
from observatory.model.probes import Probe

# Seconds the one preflight request may take: a slow or hung server is the session's to record.
PREFLIGHT_S = 10.0
_PROBE = Probe(name="preflight", category="preflight", messages=[{"role": "user", "content": "Say ok."}], max_tokens=1)


def check_serves(arms: list[Arm], api_key: str | None, engine: str = "vllm") -> None:
    """Every vLLM URL arm's server answers with the logprobs and token ids a pass needs, or ArmError names the flag."""
    if engine.lower() != "vllm":
        return
    seen: set[str] = set()
    for arm in arms:
        if not arm.url or arm.engine != "vllm" or arm.url in seen:
            continue
        seen.add(arm.url)
        problem = missing_flag(arm.url, api_key)
        if problem:
            raise ArmError(f"arm {arm.name}: {arm.url} {problem}")


def missing_flag(url: str, api_key: str | None) -> str | None:
    """What the server at URL lacks, as "…: start vLLM with FLAG"; None when nothing definite is missing."""
    client = EngineClient(url, api_key, timeout=PREFLIGHT_S)
    try:
        body = request_body(_PROBE, client.model(), request_params(_PROBE), stream=False)
        r = client.fetch("/v1/chat/completions", PREFLIGHT_S, body)
    except (RequestFailed, httpx.HTTPError):
        return None  # unreachable, hung or unnamed: the session records it
    finally:
        client.close()
    if r.status_code == 400 and "logprob" in r.text.lower():
        return (f"refuses top_logprobs {TOP_LOGPROBS} (HTTP 400): start vLLM with --max-logprobs {TOP_LOGPROBS} "
                "or more")
    if r.status_code != 200:
        return None
    try:
        tokens = _tokens(decode_json(r.content))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, MalformedStream):
        return None  # a malformed answer: the session's to record
    if tokens and not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return ("answers logprobs without token ids (return_tokens_as_token_ids ignored): start vLLM with "
                "--return-tokens-as-token-ids, or use a vLLM that honours the request's flag")
    return None


def _tokens(answer: Any) -> list[Any]:
    logprobs = answer["choices"][0].get("logprobs") or {}
    return [entry.get("token") for entry in logprobs.get("content") or []]
