"""What a URL arm's server must expose, checked once before a session is stored (issue 30 item 6).

A server someone else started is asked one greedy chat request of one token,
with the logprobs and token ids a correctness pass asks for
(`observatory.client.send.request_params`). Only a definite sign of a
missing serving flag refuses the session, as a setup error (exit 3) whose
one line names the flag:

- HTTP 400 that names logprobs: the server's ``--max-logprobs`` is below the
  ``top_logprobs`` a pass asks for (`TOP_LOGPROBS`);
- answered logprobs whose tokens are text, not ``token_id:N``: the server
  ignores ``return_tokens_as_token_ids``;
- an answer with no logprobs at all although they were asked for, from
  every vLLM URL arm of the session: what answers is not vLLM's OpenAI server
  (which always returns them when asked) or a proxy in front of it drops them.
  Where another arm's server returns them, the arm that drops them is judged
  by the session (its text diffed, its ids UNJUDGED), not refused.

Before that, every URL arm (any engine) is asked ``GET /health`` over a bare
socket: a port whose first bytes back are not ``HTTP/`` is no HTTP server
(another service on that port), a setup error too. A port that accepts and
says nothing, or closes, proves nothing and is left to the session.

Anything else (a timeout, a refused key, a malformed answer, a hung server)
proves no missing flag: the session runs and records it as it always has.
The whole checklist is in docs/usage.md ("Your own model on your own GPU").
Only URL arms whose adapter says ``preflight_logprobs`` are asked (vLLM's; other engines carry ids
their own way).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import httpx

from observatory.client.send import TOP_LOGPROBS, EngineClient, RequestFailed, request_body, request_params
from observatory.client.sse import MalformedStream, decode_json
from observatory.engines.adapter import adapter_for
from observatory.model.arms import DEFAULT_ENGINE, Arm
from observatory.model.errors import ArmError
from observatory.model.probes import Probe

# Seconds the one preflight request may take: a slow or hung server is the session's to record.
PREFLIGHT_S = 10.0
_PROBE = Probe(name="preflight", category="preflight", messages=[{"role": "user", "content": "Say ok."}], max_tokens=1)


NO_LOGPROBS = "answers without logprobs although asked"


def _preflighted(engine: str) -> bool:
    """Whether URL arms of ENGINE get the one-token logprobs request (its adapter's ``preflight_logprobs``)."""
    return bool(getattr(adapter_for(engine), "preflight_logprobs", False))


def check_serves(arms: list[Arm], api_key: str | None, engine: str = DEFAULT_ENGINE) -> None:
    """Every URL arm's port speaks HTTP and every vLLM URL arm's server answers with the logprobs and token ids a
    pass needs, or ArmError names what is wrong (one line: a setup error, exit 3)."""
    for url, name in {a.url: a.name for a in reversed(arms) if a.url}.items():
        problem = not_http(url)
        if problem:
            raise ArmError(f"arm {name}: {url} {problem}")
    if not _preflighted(engine):
        return
    seen: set[str] = set()
    dropped: list[tuple[Arm, str]] = []
    for arm in arms:
        if not arm.url or not _preflighted(arm.engine) or arm.url in seen:
            continue
        seen.add(arm.url)
        problem = missing_flag(arm.url, api_key)
        if problem and problem.startswith(NO_LOGPROBS):
            dropped.append((arm, problem))
        elif problem:
            raise ArmError(f"arm {arm.name}: {arm.url} {problem}")
    # No server of the session returns logprobs: a setup error. Where another arm's server returns them, an arm
    # that drops them is a difference of that deployment (e.g. speculation switched on), the session's to judge.
    if dropped and len(dropped) == len(seen):
        arm, problem = dropped[0]
        raise ArmError(f"arm {arm.name}: {arm.url} {problem}")


def not_http(url: str) -> str | None:
    """Why the port at URL is no HTTP server ("answers ... not HTTP"), or None (HTTP, https, or nothing definite)."""
    u = urlsplit(url)
    if u.scheme != "http" or not u.hostname:
        return None  # https: the first bytes are TLS's; the session's client reports a wrong port there
    try:
        with socket.create_connection((u.hostname, u.port or 80), timeout=PREFLIGHT_S) as conn:
            conn.sendall(f"GET /health HTTP/1.1\r\nHost: {u.hostname}\r\nConnection: close\r\n\r\n".encode())
            head = conn.recv(16)
            drain(conn)
    except OSError:
        return None  # refused, reset or silent: check_listening's, or the session's to record
    if not head or head.startswith(b"HTTP/"):
        return None
    return (f"answers, but not with HTTP (first bytes {head[:16]!r}): another service is on that port; give the "
            "port the server listens on")


def drain(conn: socket.socket, limit: int = 1 << 16, wait_s: float = 1.0) -> None:
    """Read what the server still sends (at most LIMIT bytes, WAIT_S per read) before closing, so an HTTP server
    is not reset mid-answer."""
    conn.settimeout(wait_s)
    got = 0
    try:
        while got < limit:
            chunk = conn.recv(4096)
            if not chunk:
                return
            got += len(chunk)
    except OSError:
        return


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
        answer = decode_json(r.content)
        tokens = _tokens(answer)
        no_logprobs = answer["choices"][0].get("logprobs") is None
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, MalformedStream):
        return None  # a malformed answer: the session's to record
    if no_logprobs:
        return (f"{NO_LOGPROBS} (logprobs, top_logprobs "
                f"{TOP_LOGPROBS}): vLLM's OpenAI server returns them; serve the model with vLLM (`vllm serve`), "
                "not a proxy or server that drops them")
    if tokens and not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return ("answers logprobs without token ids (return_tokens_as_token_ids ignored): start vLLM with "
                "--return-tokens-as-token-ids, or use a vLLM that honours the request's flag")
    return None


def _tokens(answer: Any) -> list[Any]:
    logprobs = answer["choices"][0].get("logprobs") or {}
    return [entry.get("token") for entry in logprobs.get("content") or []]
