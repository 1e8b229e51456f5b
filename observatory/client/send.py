"""The client side of one arm: OpenAI-compatible requests, timed, with token ids.

`EngineClient` is the one place requests to a serving engine are built. Two
kinds of request:

- `run(probe)`: a correctness pass. Greedy (temperature 0, fixed seed), top-k
  logprobs with tokens returned as ``token_id:N`` (vLLM's
  ``return_tokens_as_token_ids``; an engine may give an integer ``id`` per
  entry instead), normally streamed so TTFT and the chunk timeline are measured.
  An engine whose logprobs carry no ids is asked for them its own way and
  reads them itself (its adapter's ``ids_in_choices``, ``request_params`` and
  ``take_ids``, in `observatory.engines`); where its chat stream refuses that
  (``streams_chat_ids``) its chat probes go whole.
- `run_timed(probe)`: a timed pass. It asks for what ``vllm bench serve``
  asks for (no logprobs, ``stream_options.include_usage``) so the figures
  measure the server, not us: the Response carries no token ids, ``usage``
  holds ``completion_tokens`` and ``chunks`` entries are ``[ms, None]``.

A correctness pass's answer is read a second time by the openai SDK's own
types and stream helper once its duration is stamped (`observatory.client.openai_sdk`,
``Response.sdk``); a timed pass's never is.

The answer is read into a `Response` by `observatory.client.answer`. Both are
plain httpx requests read by the lean SSE reader of
`observatory.client.sse` (msgspec into dicts) over the socket reader of
`observatory.client.wire`; the openai SDK's typed objects cost 4-5x more CPU per
token than the stream they parse, and httpx's transport about as much again.
``--request-timeout`` is a deadline for the whole request: a server that
drips bytes is cut off at it and the Response's ``error_kind`` is "timeout"
(the runner marks the arm HUNG).
API keys are passed through to the server only: never stored or logged.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import msgspec

from observatory.client import openai_sdk
from observatory.client.answer import Response, Take, finish, read_stream, take_logprobs, take_whole
from observatory.client.sse import MalformedStream, ServerError, decode_json, events
from observatory.client.wire import BodyTooLarge, DeadlineExceeded, Pool, WireError
from observatory.engines.adapter import adapter_for, counters_from_chunks, version_from
from observatory.engines.metrics import MAX_METRICS_BYTES, CounterWatch, SpecCounters, not_reported
from observatory.engines.server_facts import fact_text
from observatory.model.arms import DEFAULT_ENGINE
from observatory.model.errors import NOT_REPORTED, NotReported, ObservatoryError
from observatory.model.probes import Probe

TOP_LOGPROBS = 10
SEED = 0
# Response.error_kind values
MAX_BODY_BYTES = 64 * 1024 * 1024
# A served model id longer than this is no model name (vLLM's is a path or an alias; paths stop at 4096).
MAX_MODEL_CHARS = 4096
ERROR_KINDS = ("timeout", "connect", "http", "malformed", "cancelled")
# how the error of a request the client cut on purpose starts (`EngineClient.run_cut`)
CANCELLED = "cancelled"
_encode = msgspec.json.Encoder().encode
# A rare one-byte text used to split one /detokenize answer into per-token texts.
_SEPARATOR = "\x1f"


def request_params(probe: Probe, engine: str = DEFAULT_ENGINE) -> dict[str, Any]:
    """The exact sampling parameters a correctness pass sends for PROBE to ENGINE (stored with the probe).

    vLLM's ``return_tokens_as_token_ids``, as ENGINE's adapter asks for the ids (``request_params``: an engine
    whose logprobs carry no ids is asked for them by its own flags).
    """
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
    extra = dict(probe.sampling)
    if extra:  # a channel's probe: its parameters over the greedy defaults (vLLM's own names in extra_body)
        for key in ("stop_token_ids", "ignore_eos", "min_tokens", "top_k"):
            if key in extra:
                params["extra_body"][key] = extra.pop(key)
        params.update(extra)
    return adapter_for(engine).request_params(params, probe.kind == "chat")


# What a correctness pass asks for only to read token ids (every built-in adapter's flags): never in a timed pass.
_ID_FLAGS = frozenset({"return_tokens_as_token_ids", "return_token_ids", "return_meta_info"})


def timed_params(probe: Probe) -> dict[str, Any]:
    """The parameters a timed pass sends: the correctness pass's minus logprobs and ids (as `vllm bench serve`).

    A probe's own sampling in ``extra_body`` (ignore_eos, min_tokens, stop_token_ids, top_k) stays: the
    timed pass must generate what the correctness pass generated.
    """
    full = request_params(probe)
    params = {k: v for k, v in full.items() if k not in ("logprobs", "top_logprobs", "extra_body")}
    extra = {k: v for k, v in (full.get("extra_body") or {}).items() if k not in _ID_FLAGS}
    if extra:
        params["extra_body"] = extra
    return params


def request_body(probe: Probe, model: str, params: dict[str, Any], stream: bool,
                 prompt: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON body for PROBE: PARAMS (``extra_body`` merged in), the prompt, and streaming with usage.

    PROMPT, for a completion: the fields that stand for the prompt instead of ``prompt`` (an engine's
    ``prompt_embeds``, its adapter's `prompt_embeds_body`)."""
    body: dict[str, Any] = {"model": model}
    body.update((k, v) for k, v in params.items() if k != "extra_body")
    body.update(params.get("extra_body") or {})
    if probe.kind == "chat":
        body["messages"] = probe.messages
    elif prompt is not None:
        body.update(prompt)
    else:
        body["prompt"] = probe.prompt or ""
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


class RequestFailed(ObservatoryError):
    """A GET the observatory needed (/v1/models, /metrics) failed; `kind` is one of ERROR_KINDS."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def _kind(e: httpx.HTTPError) -> str:
    """The Response.error_kind of an httpx failure."""
    if isinstance(e, httpx.TimeoutException):
        return "timeout"
    return "http" if isinstance(e, httpx.HTTPStatusError) else "connect"


class _Failed(Exception):
    """A request that failed, with its Response.error_kind."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def http_error(status: int, path: str, body: bytes) -> Exception:
    """The failure of a probe request answered with an error STATUS (its BODY's start in the message)."""
    text = body.decode("utf-8", errors="replace")
    return _Failed("http", f"HTTP {status} from {path}: {text[:500]}")


# What a probe request may raise that is stored as the Response's error (`EngineClient.failed`).
REQUEST_FAILURES = (_Failed, DeadlineExceeded, WireError, ServerError, ObservatoryError, MalformedStream,
                    ValueError, KeyError, TypeError, AttributeError, IndexError)


class TooLarge(httpx.ReadError):
    """An engine's answer over the bytes its reader takes (`EngineClient.fetch`'s LIMIT)."""


class EngineClient:
    """Talks to one running arm: probes, health, version, metrics."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 300.0,
                 engine: str = DEFAULT_ENGINE):
        self.adapter = adapter_for(engine)
        # where a correctness pass's ids are: logprobs entries, or choices[].token_ids (the adapter says)
        self.take: Take = self.adapter.take_ids if self.adapter.ids_in_choices else take_logprobs
        self.base_url = base_url.rstrip("/")
        self.timeout = float(timeout)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._wire = Pool(self.base_url, self._headers)
        # /health, /version, /metrics, /v1/models, /tokenize, /detokenize: their own connections (`fetch`)
        self._aux = Pool(self.base_url, self._headers)
        self._model: str | None = None
        self._watch = CounterWatch()  # restarts and new label sets across this server's reads (issue 32 item 2)
        self._separator: int | bool | None = False  # False: not looked up yet; None: the server has none
        # the deadline of the probe request being read: its /tokenize and /detokenize calls end by it too
        self._deadline: float | None = None

    def close(self) -> None:
        """Release the connection pools."""
        self._wire.close()
        self._aux.close()

    def fetch(self, path: str, timeout_s: float, body: dict[str, Any] | None = None,
              limit: int = MAX_BODY_BYTES) -> httpx.Response:
        """GET PATH (POST BODY as JSON) bounded as a whole by TIMEOUT_S (at most the request timeout)
        and by LIMIT bytes (over it: `TooLarge`).

        Over `observatory.client.wire`, whose deadline holds for the whole request,
        head included: httpx's timeout restarts with every byte read, so a
        server dripping a byte every 3 s held the observatory forever
        (issues 19 and 32). Failures raise as httpx's (ReadTimeout,
        ConnectError, ReadError) so callers catch one family.
        """
        timeout_s = min(timeout_s, self.timeout)
        url = f"{self.base_url}{path}"
        method = "GET" if body is None else "POST"
        try:
            resp = self._aux.request(method, path, None if body is None else _encode(body),
                                      time.perf_counter() + timeout_s)
            try:
                content = resp.read(limit)
            finally:
                resp.close()
        except DeadlineExceeded:
            raise httpx.ReadTimeout(f"{method} {path}: ReadTimeout, the answer did not finish within {timeout_s:g} s") from None
        except BodyTooLarge as e:
            raise TooLarge(f"{method} {path}: {e}") from None
        except WireError as e:
            if e.kind == "timeout":
                raise httpx.ConnectTimeout(f"{method} {path}: {e}") from None
            raise httpx.ReadError(f"{method} {path}: {e}") from None
        return httpx.Response(resp.status, headers=resp.headers, content=content,
                              request=httpx.Request(method, url))

    def health(self) -> bool:
        """GET /health (the adapter's `health_path`) answered 200."""
        try:
            return self.fetch(getattr(self.adapter, "health_path", "/health"), 5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def version(self) -> str | None:
        """The engine's version (vLLM: GET /version; see observatory.engines.adapter for others)."""
        try:
            r = self.fetch(self.adapter.version_path(), 10.0)
            if r.status_code == 200:
                return fact_text(version_from(self.adapter, r.json()))
        except (httpx.HTTPError, ValueError):
            pass
        return None

    def model(self) -> str:
        """The served model id (first of GET /v1/models), read once."""
        if self._model is None:
            self._model = self._read_model()
        return self._model

    def _read_model(self) -> str:
        """GET /v1/models' first id: a non-empty string of at most MAX_MODEL_CHARS (issue 32 item 3)."""
        try:
            r = self.fetch("/v1/models", 30.0)
            r.raise_for_status()
            model = r.json()["data"][0]["id"]
        except httpx.HTTPError as e:
            raise RequestFailed(f"{self.base_url}/v1/models did not name a model: {e}", _kind(e)) from None
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise RequestFailed(f"{self.base_url}/v1/models did not name a model: {e}", "malformed") from None
        if not isinstance(model, str) or not model.strip() or len(model) > MAX_MODEL_CHARS:
            raise RequestFailed(f"{self.base_url}/v1/models did not name a model: id {fact_text(repr(model), 80)} "
                                f"is not a model name (a non-empty string of at most {MAX_MODEL_CHARS} characters)",
                                "malformed")
        return model

    def model_change(self) -> str | None:
        """Why the served model is no longer the one this arm started with (read again now); None if it is."""
        if self._model is None:
            return None
        try:
            now = self._read_model()
        except RequestFailed as e:
            return f"the served model could not be read again at the arm's end: {e}"
        if now != self._model:
            return f"the served model changed mid-arm: {fact_text(self._model, 80)!r} -> {fact_text(now, 80)!r}"
        return None

    def _request_counters(self, kept: list[Any]) -> SpecCounters | None:
        """The request's own counters in its answer (KEPT: the whole answer, or every chunk); None if none."""
        try:
            found = counters_from_chunks(self.adapter, [o for o in kept if isinstance(o, dict)])
        except ObservatoryError:
            return None  # counters the answer states badly are left to /metrics (the counters channel reads both)
        return found.plain() if found is not None else None

    def counters(self) -> SpecCounters:
        """Current cumulative spec-decode counters from GET /metrics (None fields: not reported)."""
        try:
            r = self.fetch("/metrics", 30.0, limit=MAX_METRICS_BYTES)
            r.raise_for_status()
        except TooLarge as e:  # a server that answers, with megabytes no engine writes: unusable, not gone
            return self._watch.check(SpecCounters(None, None, None, None, f"{self.base_url}/metrics: {e}"), "",
                                     self._model)
        except httpx.HTTPError as e:
            raise RequestFailed(f"{self.base_url}/metrics failed: {e}", _kind(e)) from None
        found = self.adapter.counters_from_metrics(r.text, self._model)
        return self._watch.check(found.plain() if found is not None else not_reported(), r.text, self._model)

    # -- detokenising ----------------------------------------------------
    def _post_json(self, path: str, body: dict[str, Any]) -> Any:
        r = self.fetch(path, self._left(10.0), body)
        return r.json() if r.status_code == 200 else None

    def _left(self, at_most: float) -> float:
        """Seconds left to the running request's deadline, at most AT_MOST (DeadlineExceeded when none)."""
        if self._deadline is None:
            return at_most
        left = self._deadline - time.perf_counter()
        if left <= 0:
            raise DeadlineExceeded()
        return min(at_most, left)

    def tokenize(self, text: str) -> list[int] | None:
        """TEXT's token ids as the server tokenizes it (no special tokens); None when it cannot say."""
        try:
            ids = self.adapter.text_ids(self._post_json, self.model(), text)
        except (httpx.HTTPError, ValueError, ObservatoryError):
            return None
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            return None
        return ids

    def _separator_id(self) -> int | None:
        """The token id of a one-byte separator text, looked up once (None: the server has none)."""
        if self._separator is False:
            self._separator = None
            try:
                ids = self.adapter.text_ids(self._post_json, self.model(), _SEPARATOR) or []
                if len(ids) == 1 and isinstance(ids[0], int):
                    self._separator = ids[0]
                elif ids and isinstance(ids[-1], int) and self._detokenize_one(ids[-1]) == _SEPARATOR:
                    self._separator = ids[-1]  # SentencePiece puts a space token first
            except (httpx.HTTPError, ValueError, ObservatoryError, AttributeError):
                pass
        return self._separator

    def detokenize(self, token_ids: list[int]) -> list[str]:
        """Each token's text, in one /detokenize request for the whole output.

        The ids go out interleaved with a separator token (a one-byte text
        looked up once with /tokenize) and the answer is split on it. Where the
        server's tokenizer has no such token, or a token's text contains the
        separator, each token is detokenised alone (one request per token).
        """
        if not token_ids:
            return []
        sep = self._separator_id()
        if sep is not None:
            spaced: list[int] = []
            for t in token_ids:
                spaced += (t, sep)
            try:
                got = self.adapter.ids_text(self._post_json, self.model(), spaced)
                parts = (got or "").split(_SEPARATOR)
                if got is not None and len(parts) == len(token_ids) + 1 and parts[-1] == "":
                    return parts[:-1]
            except (httpx.HTTPError, ValueError):
                pass
        return [self._detokenize_one(t) for t in token_ids]

    def _detokenize_one(self, token_id: int) -> str:
        try:
            return self.adapter.ids_text(self._post_json, self.model(), [token_id]) or ""
        except (httpx.HTTPError, ValueError):
            return ""

    # -- probes ------------------------------------------------------------
    def run(self, probe: Probe, stream: bool = True, prompt: dict[str, Any] | None = None,
            request_id: str | None = None) -> Response:
        """Send PROBE once with full logprobs; never raises for server/transport errors (stored instead).

        PROMPT: for a completion probe, the fields sent instead of its ``prompt`` (`request_body`).
        REQUEST_ID: the client's own id for the request, where the engine takes one (its adapter's
        ``request_id_field``; ignored where it takes none)."""
        return self._run(probe, self._params(probe, request_id), stream, timed=False, prompt=prompt)

    def _params(self, probe: Probe, request_id: str | None) -> dict[str, Any]:
        params = request_params(probe, self.adapter.name)
        field = getattr(self.adapter, "request_id_field", None)
        if request_id is not None and field:
            params["extra_body"] = {**(params.get("extra_body") or {}), field: request_id}
        return params

    def run_cut(self, probe: Probe, tokens: int | None = None, within_s: float | None = None,
                request_id: str | None = None) -> Response:
        """Send PROBE and hang up mid-answer on purpose: streamed, once TOKENS generated tokens came (a client
        that disconnects); whole, WITHIN_S seconds after sending (a client that times out). The
        Response holds what came before the cut, with error_kind "cancelled"; an answer that ended before the
        cut is returned as it is (ok: nothing was cut)."""
        t0 = time.perf_counter()
        out = Response()
        stream = tokens is not None
        deadline = t0 + (self.timeout if within_s is None else min(within_s, self.timeout))
        chat = probe.kind == "chat"
        cut = False
        try:
            body = request_body(probe, self.served_model(), self._params(probe, request_id), stream)
            resp = self._wire.post("/v1/chat/completions" if chat else "/v1/completions", _encode(body), deadline)
            try:
                if resp.status >= 400:
                    raise http_error(resp.status, "a cut request", resp.read())
                if stream:
                    state = {"seen": 0}
                    read_stream(out, _until(events(resp.body(), t0), int(tokens or 0), state), chat, False, self.take)
                    cut = state["seen"] >= int(tokens or 0) and out.finish_reason is None
                else:
                    take_whole(out, decode_json(resp.read()), chat, self.take)
            finally:
                resp.close()  # before its end: the connection is closed, the server sees the client gone
        except DeadlineExceeded:
            cut = within_s is not None
            if not cut:
                out = self.failed(DeadlineExceeded())
        except REQUEST_FAILURES as e:
            out = self.failed(e)
        if cut:
            how = f"after {tokens} streamed tokens" if stream else f"after {within_s:g} s without an answer"
            out.error, out.error_kind = f"{CANCELLED}: the client hung up {how}, on purpose", "cancelled"
        return finish(out, t0)

    def run_timed(self, probe: Probe) -> Response:
        """Send PROBE once as a timed pass: streamed, no logprobs, usage counted by the server."""
        return self._run(probe, timed_params(probe), True, timed=True)

    def _run(self, probe: Probe, params: dict[str, Any], stream: bool, timed: bool,
             prompt: dict[str, Any] | None = None) -> Response:
        t0 = time.perf_counter()
        deadline = t0 + self.timeout
        out = Response()
        if stream and probe.tools is not None and "logprobs" in params and not self.adapter.streams_tool_logprobs:
            # an engine that refuses logprobs with tools + stream (its adapter says why): such probes are sent
            # whole (no TTFT, no chunk timeline)
            stream = False
        if stream and not timed and probe.kind == "chat" and not self.adapter.streams_chat_ids:
            stream = False  # its chat stream refuses the flags that ask for ids (its adapter says why)
        kept: list[Any] | None = None if timed else []  # the decoded answer, for the SDK's reading
        try:
            body = request_body(probe, self.served_model(), params, stream, prompt)
            path = "/v1/chat/completions" if probe.kind == "chat" else "/v1/completions"
            self._request(path, body, stream, t0, deadline, out, timed, kept)
            if not timed and len(out.token_texts) != len(out.token_ids):
                if self.adapter.ids_in_choices:
                    out.token_texts = []  # some texts did not count as their ids: unknown, never guessed
                elif probe.kind != "chat":
                    self._deadline = deadline
                    out.token_texts = self.detokenize(out.token_ids)
                    if time.perf_counter() >= deadline:
                        raise DeadlineExceeded()  # a /detokenize that dripped: the request's deadline passed
        except REQUEST_FAILURES as e:
            out = self.failed(e)
        finally:
            self._deadline = None
        out = finish(out, t0)
        if kept and out.error_kind in (None, "malformed"):
            out.sdk = sdk_verdict(kept, stream, probe.kind == "chat", out)
        if kept and out.error_kind is None:
            out.request_counters = self._request_counters(kept)
        return out

    def failed(self, e: BaseException) -> Response:
        """The stored Response of a request that raised E (one of REQUEST_FAILURES)."""
        if isinstance(e, _Failed):
            return Response(error=str(e), error_kind=e.kind)
        if isinstance(e, DeadlineExceeded):
            return Response(error=self._timeout_text(), error_kind="timeout")
        if isinstance(e, WireError):
            return Response(error=f"{type(e).__name__}: {e}", error_kind=e.kind)
        if isinstance(e, ServerError):
            return Response(error=str(e), error_kind="http")
        if isinstance(e, NotReported):  # the engine answered, without what this request needs
            return Response(error=f"{NOT_REPORTED}: {e}", error_kind="not_reported")
        if isinstance(e, ObservatoryError):
            return Response(error=f"{type(e).__name__}: {e}", error_kind="malformed")
        # a body that is not what the API promises (malformed JSON, missing fields)
        return Response(error=f"malformed response: {type(e).__name__}: {e}", error_kind="malformed")

    def served_model(self) -> str:
        """The served model id for a request body (a failure to name it is the request's failure)."""
        try:
            return self.model()
        except RequestFailed as e:
            # named as before this error had its own type (stored error texts stay comparable)
            raise _Failed(e.kind, f"ObservatoryError: {e}") from None

    def _timeout_text(self) -> str:
        return (f"Timeout: no complete response within the {self.timeout:g} s request timeout "
                "(--request-timeout)")

    def _request(self, path: str, body: dict[str, Any], stream: bool, t0: float, deadline: float,
                 out: Response, timed: bool, kept: list[Any] | None = None) -> None:
        """Send BODY and read the answer into OUT; KEPT (when given) gets the decoded answer: the whole
        object, or every streamed event, once the stream ended with [DONE]."""
        chat = "messages" in body
        resp = self._wire.post(path, _encode(body), deadline)
        try:
            if resp.status >= 400:
                raise http_error(resp.status, path, resp.read())
            if not stream:
                obj = decode_json(resp.read())
                if kept is not None:
                    kept.append(obj)
                take_whole(out, obj, chat, self.take)
                return
            pieces = resp.body()
            seen: list[Any] = []
            stamped = events(pieces, t0)
            read_stream(out, stamped if kept is None else _keeping(stamped, seen), chat, timed, self.take)
            resp.finish(pieces)
            if kept is not None:
                kept.extend(seen)
        finally:
            resp.close()


def tokens_in(obj: Any) -> int:
    """How many generated tokens a streamed event carries: its logprob entries, else 1 for text or content
    without them; 0 for a role, usage or finish alone."""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return 0
    choice = choices[0]
    lp = choice.get("logprobs")
    entries = (lp.get("content") or lp.get("tokens")) if isinstance(lp, dict) else None
    if isinstance(entries, list) and entries:
        return len(entries)
    delta = choice.get("delta") or {}
    return int(bool(choice.get("text") or (isinstance(delta, dict) and (delta.get("content")
                                                                        or delta.get("tool_calls")))))


def _until(stream: Any, tokens: int, state: dict[str, int]) -> Any:
    """STREAM's (ms, event) pairs until TOKENS generated tokens came (STATE["seen"]: how many). Tokens, not
    chunks: an API server that falls behind its engine merges steps into one chunk (vLLM's output collector
    does), and on the loaded 2-core host a base arm's 256 tokens came in fewer than 16 chunks, ending before
    a cut after the 16th chunk."""
    for ms, obj in stream:
        yield ms, obj
        state["seen"] += tokens_in(obj)
        if state["seen"] >= tokens:
            return


def _keeping(stream: Any, seen: list[Any]) -> Any:
    """STREAM's (ms, event) pairs, each event appended to SEEN as it passes (references, no copy)."""
    for ms, obj in stream:
        seen.append(obj)
        yield ms, obj


def sdk_verdict(kept: list[Any], stream: bool, chat: bool, out: Response) -> dict[str, Any] | None:
    """The openai SDK's verdict on one answer (`observatory.client.openai_sdk`): None where the SDK is not installed."""
    t0 = time.perf_counter()
    lean = openai_sdk.lean_reading(out.content, out.text, out.tool_calls, out.finish_reason, chat)
    verdict = (openai_sdk.judge_stream(kept, chat, lean) if stream
               else openai_sdk.judge_whole(kept[0], chat, lean))
    verdict["ms"] = round((time.perf_counter() - t0) * 1000.0, 2)  # the SDK's reading's own cost
    return verdict
