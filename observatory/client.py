"""The client side of one arm: OpenAI-compatible requests, timed, with token ids.

`make_openai_client` is the one place an `openai.OpenAI` is built. Every
probe request is greedy (temperature 0, fixed seed), asks for top-k logprobs
with tokens returned as ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``),
and is normally streamed so TTFT and the chunk timeline are measured.
API keys are passed through to the server only: never stored or logged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai

from observatory.errors import ObservatoryError, RequestTimeout
from observatory.metrics import SpecCounters, not_reported
from observatory.probes import Probe

TOP_LOGPROBS = 10
SEED = 0
MAX_BODY_BYTES = 64 * 1024 * 1024


def make_openai_client(
    base_url: str,
    api_key: str | None = None,
    timeout: float = 300.0,
    http_client: Any = None,
) -> openai.OpenAI:
    """The one factory for OpenAI clients (dummy key when the server needs none).

    `http_client` is injectable (tests); it must be the HTTP client class the
    installed openai package expects, so by default openai builds its own.
    """
    return openai.OpenAI(
        base_url=f"{base_url}/v1",
        api_key=api_key or "observatory-no-key",
        timeout=timeout,
        max_retries=0,
        http_client=http_client,
    )


@dataclass
class Response:
    """What one request returned, parsed and timed."""

    text: str = ""
    content: str | None = None
    token_ids: list[int] = field(default_factory=list)
    token_texts: list[str] = field(default_factory=list)
    top_logprobs: list[list[list[float]]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    ttft_ms: float | None = None
    duration_ms: float | None = None
    chunks: list[list[float]] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether the request completed without a transport or server error."""
        return self.error is None


def parse_token_id(token: str) -> int:
    """``token_id:123`` -> 123 (vLLM's return_tokens_as_token_ids form)."""
    prefix, sep, num = token.partition(":")
    if prefix != "token_id" or not sep or not num.isdigit():
        raise ObservatoryError(
            f"Expected a token like 'token_id:123' from the engine, got {token!r}; "
            "is this a vLLM server (return_tokens_as_token_ids)?"
        )
    return int(num)


def _bytes_text(b: list[int] | None, fallback: str) -> str:
    if b is None:
        return fallback
    return bytes(b).decode("utf-8", errors="replace")


def request_params(probe: Probe) -> dict[str, Any]:
    """The exact sampling parameters sent for PROBE (stored with the probe)."""
    params: dict[str, Any] = {
        "temperature": 0.0,
        "seed": SEED,
        "max_tokens": probe.max_tokens,
        "logprobs": True if probe.kind == "chat" else TOP_LOGPROBS,
        "extra_body": {"return_tokens_as_token_ids": True},
    }
    if probe.kind == "chat":
        params["top_logprobs"] = TOP_LOGPROBS
        if probe.tools is not None:
            params["tools"] = probe.tools
        if probe.tool_choice is not None:
            params["tool_choice"] = probe.tool_choice
    return params


class EngineClient:
    """Talks to one running arm: probes, health, version, metrics."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 300.0,
                 engine: str = "vllm"):
        from observatory.engines import adapter_for

        self.adapter = adapter_for(engine)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0), headers=self._headers)
        self.openai = make_openai_client(self.base_url, api_key, timeout)
        self._model: str | None = None

    def close(self) -> None:
        """Release the connection pools."""
        self._http.close()
        self.openai.close()

    def _get(self, path: str, timeout_s: float) -> httpx.Response:
        """GET PATH bounded as a whole by TIMEOUT_S (at most the request timeout) and by MAX_BODY_BYTES.

        httpx's timeout restarts with every byte read: a server dripping a body
        would otherwise hold the observatory forever (issue 19: hostile servers).
        """
        timeout_s = min(timeout_s, self.timeout)
        deadline = time.monotonic() + timeout_s
        with self._http.stream("GET", f"{self.base_url}{path}", timeout=timeout_s) as r:
            body = bytearray()
            for part in r.iter_bytes():
                body += part
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"GET {path}: ReadTimeout, the body did not finish within {timeout_s} s")
                if len(body) > MAX_BODY_BYTES:
                    raise httpx.ReadError(f"GET {path}: the body is over {MAX_BODY_BYTES} bytes")
            return httpx.Response(r.status_code, headers=r.headers, content=bytes(body), request=r.request)

    def health(self) -> bool:
        """GET /health answered 200."""
        try:
            return self._get("/health", 5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def version(self) -> str | None:
        """The engine's version (vLLM: GET /version; see observatory.engines for others)."""
        from observatory.engines import version_from

        try:
            r = self._get(self.adapter.version_path(), 10.0)
            if r.status_code == 200:
                return version_from(self.adapter, r.json())
        except (httpx.HTTPError, ValueError):
            pass
        return None

    def model(self) -> str:
        """The served model id (first of GET /v1/models)."""
        if self._model is None:
            try:
                r = self._get("/v1/models", 30.0)
                r.raise_for_status()
                self._model = str(r.json()["data"][0]["id"])
            except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:
                raise ObservatoryError(f"{self.base_url}/v1/models did not name a model: {e}") from None
        return self._model

    def counters(self) -> SpecCounters:
        """Current cumulative spec-decode counters from GET /metrics (None fields: not reported)."""
        try:
            r = self._get("/metrics", 30.0)
            r.raise_for_status()
        except httpx.HTTPError as e:
            raise ObservatoryError(f"{self.base_url}/metrics failed: {e}") from None
        found = self.adapter.counters_from_metrics(r.text)
        return found.plain() if found is not None else not_reported()

    def detokenize(self, token_ids: list[int]) -> list[str]:
        """Each token's text, via the server's /detokenize."""
        out = []
        for t in token_ids:
            try:
                r = self._http.post(
                    f"{self.base_url}/detokenize", json={"model": self.model(), "tokens": [t]}, timeout=10.0
                )
                out.append(str(r.json().get("prompt", "")) if r.status_code == 200 else "")
            except (httpx.HTTPError, ValueError):
                out.append("")
        return out

    def run(self, probe: Probe, stream: bool = True) -> Response:
        """Send PROBE once; never raises for server/transport errors (stored instead)."""
        params = request_params(probe)
        t0 = time.perf_counter()
        try:
            if probe.kind == "chat":
                resp = self._chat(probe, params, stream, t0)
            else:
                resp = self._completion(probe, params, stream, t0)
        except (openai.APIError, httpx.HTTPError, ObservatoryError) as e:
            resp = Response(error=f"{type(e).__name__}: {e}")
        except (ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
            # a body that is not what the API promises (malformed JSON, missing fields)
            resp = Response(error=f"malformed response: {type(e).__name__}: {e}")
        if resp.error is None and resp.finish_reason is None:
            resp.error = "malformed response: the server ended without a finish_reason"
        resp.duration_ms = (time.perf_counter() - t0) * 1000.0
        return resp

    def _chat(self, probe: Probe, params: dict[str, Any], stream: bool, t0: float) -> Response:
        model = self.model()
        if not stream:
            r = self.openai.chat.completions.create(model=model, messages=probe.messages, **params)  # type: ignore[arg-type,call-overload]
            choice = r.choices[0]
            out = Response(content=choice.message.content, finish_reason=choice.finish_reason)
            out.text = choice.message.content or ""
            if choice.message.tool_calls:
                out.tool_calls = [tc.model_dump() for tc in choice.message.tool_calls]
            self._take_chat_logprobs(out, choice.logprobs)
            out.usage = r.usage.model_dump() if r.usage else {}
            return out
        out = Response()
        content_parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        s = self.openai.chat.completions.create(  # type: ignore[call-overload]
            model=model, messages=probe.messages, stream=True,
            stream_options={"include_usage": True}, **params,
        )
        for now, choice in _choices(s, t0, out, self.timeout):
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    content_parts.append(delta.content)
                for tc in delta.tool_calls or []:
                    slot = calls.setdefault(
                        tc.index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    if tc.id:
                        slot["id"] = tc.id
                    if tc.function is not None:
                        if tc.function.name:
                            slot["function"]["name"] += tc.function.name
                        if tc.function.arguments:
                            slot["function"]["arguments"] += tc.function.arguments
            _note_chunk(out, now, self._take_chat_logprobs(out, choice.logprobs), choice.finish_reason)
        out.content = "".join(content_parts) if content_parts or not calls else None
        out.text = out.content or ""
        if calls:
            out.tool_calls = [calls[i] for i in sorted(calls)]
        return out

    @staticmethod
    def _take_chat_logprobs(out: Response, logprobs: Any) -> int:
        if logprobs is None or not logprobs.content:
            return 0
        for item in logprobs.content:
            out.token_ids.append(parse_token_id(item.token))
            out.token_texts.append(_bytes_text(item.bytes, ""))
            out.top_logprobs.append(
                [[parse_token_id(t.token), float(t.logprob)] for t in (item.top_logprobs or [])]
            )
        return len(logprobs.content)

    def _completion(self, probe: Probe, params: dict[str, Any], stream: bool, t0: float) -> Response:
        model = self.model()
        out = Response()
        if not stream:
            r = self.openai.completions.create(model=model, prompt=probe.prompt or "", **params)
            choice = r.choices[0]
            out.text = choice.text
            out.finish_reason = choice.finish_reason
            self._take_completion_logprobs(out, choice.logprobs)
            out.usage = r.usage.model_dump() if r.usage else {}
        else:
            s = self.openai.completions.create(
                model=model, prompt=probe.prompt or "", stream=True,
                stream_options={"include_usage": True}, **params,
            )
            parts = []
            for now, choice in _choices(s, t0, out, self.timeout):
                parts.append(choice.text or "")
                _note_chunk(out, now, self._take_completion_logprobs(out, choice.logprobs), choice.finish_reason)
            out.text = "".join(parts)
        out.content = out.text
        out.token_texts = self.detokenize(out.token_ids)
        return out

    @staticmethod
    def _take_completion_logprobs(out: Response, logprobs: Any) -> int:
        if logprobs is None or not logprobs.tokens:
            return 0
        tops = logprobs.top_logprobs or [None] * len(logprobs.tokens)
        for tok, top in zip(logprobs.tokens, tops):
            out.token_ids.append(parse_token_id(tok))
            pairs = sorted(((parse_token_id(k), float(v)) for k, v in (top or {}).items()), key=lambda p: -p[1])
            out.top_logprobs.append([[t, lp] for t, lp in pairs])
        return len(logprobs.tokens)


def _note_chunk(out: Response, now: float, n_tokens: int, finish_reason: str | None) -> None:
    """Time a streamed chunk that carried N_TOKENS (the first one is the TTFT)."""
    if n_tokens:
        out.chunks.append([round(now, 3), n_tokens])
        if out.ttft_ms is None:
            out.ttft_ms = now
    if finish_reason:
        out.finish_reason = finish_reason


def _choices(stream: Any, t0: float, out: Response, deadline_s: float | None = None) -> Iterator[tuple[float, Any]]:
    """(ms since the request started, first choice) of each streamed chunk; usage goes to OUT.

    The read timeout restarts with every byte, so a server dripping chunks (or
    keep-alive comments) would hold a request forever: past DEADLINE_S from the
    start the stream is closed and RequestTimeout raised (issue 19: hostile servers).
    """
    expired = threading.Event()
    timer = None
    if deadline_s is not None:
        def expire() -> None:
            expired.set()
            stream.close()

        timer = threading.Timer(max(deadline_s - (time.perf_counter() - t0), 0.0), expire)
        timer.daemon = True
        timer.start()
    late = f"the stream did not finish within the request timeout ({deadline_s} s)"
    try:
        for chunk in stream:
            if expired.is_set():
                raise RequestTimeout(late)
            now = (time.perf_counter() - t0) * 1000.0
            if chunk.usage:
                out.usage = chunk.usage.model_dump()
            if chunk.choices:
                yield now, chunk.choices[0]
    except (openai.APIError, httpx.HTTPError, ValueError, RuntimeError):
        if expired.is_set():
            raise RequestTimeout(late) from None
        raise
    finally:
        if timer is not None:
            timer.cancel()
    if expired.is_set():
        raise RequestTimeout(late)
