"""The JSON Schema of a probe suite (the TOML of ``probes/*.toml``), generated from the code's constants.

`suite_schema` builds it from `CATEGORIES`, `MESSAGE_ROLES`, `PARAMS` (the
request fields a probe sends over the greedy defaults), `ORIGINAL_FIELDS`
(what a logged request may keep beside them) and the expectation fields, so
the committed docs/probes.schema.json cannot drift from the loader:
`observatory.model.probes` validates every suite with this very schema
(jsonschema, `observatory.model.schema_check`), and a probe imported from a
log (`observatory.model.suites`) passes the same check. Regenerate the file
with ``python -m observatory.model.probe_schema > docs/probes.schema.json``
(tests/model/test_suite_schemas.py fails when it is stale). docs/probes.md
describes the format.

What the schema cannot say stays in code (probes.py): exactly one of
``messages`` or ``prompt``, tools only on a chat probe, gate names that the
registry knows, a regex that compiles, names unique within the suite.
"""

from __future__ import annotations

import json
from typing import Any

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_PATH = "docs/probes.schema.json"

CATEGORIES = (
    "recitation",
    "counting",
    "sequence",
    "tool_call",
    "json",
    "code",
    "prose_en",
    "prose_zh",
)
# "developer" is OpenAI's newer name for system; the server's chat template decides what it means.
MESSAGE_ROLES = ("system", "developer", "user", "assistant", "tool")
# ProbeRow.name is String(255): stored whole or refused, never cut.
MAX_NAME = 255
MAX_TOKENS = 32768
# The most probes one suite may hold: the bundled ones hold 5 to 30, and each probe is a request per arm
# and pass; 100,000 took minutes just to load and hours to run (hostile round three), so it is refused.
MAX_PROBES = 10_000

_STRINGS = {"type": "array", "items": {"type": "string"}}
_NUMBER = {"type": "number"}

# The request fields a probe's ``params`` table may send over the greedy defaults: what shapes the output
# and stays deterministic when decoding greedily (vLLM's names; the client puts its own extensions in the
# request's extra body). Sampling fields are not among them: docs/probes.md, "Greedy is the reference".
PARAMS: dict[str, dict[str, Any]] = {
    "stop": {"anyOf": [{"type": "string"}, _STRINGS]},
    "stop_token_ids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    "min_tokens": {"type": "integer", "minimum": 0},
    "ignore_eos": {"type": "boolean"},
    "response_format": {"type": "object", "properties": {"type": {"type": "string"}}, "required": ["type"]},
    "logit_bias": {"type": "object", "additionalProperties": _NUMBER},
    "presence_penalty": _NUMBER,
    "frequency_penalty": _NUMBER,
    "repetition_penalty": {"type": "number", "exclusiveMinimum": 0},
    "include_stop_str_in_output": {"type": "boolean"},
    "skip_special_tokens": {"type": "boolean"},
    "spaces_between_special_tokens": {"type": "boolean"},
    "parallel_tool_calls": {"type": "boolean"},
    "chat_template_kwargs": {"type": "object"},
    "reasoning_effort": {"type": "string"},
    "structured_outputs": {"type": "object"},
    "guided_json": {"anyOf": [{"type": "object"}, {"type": "string"}]},
    "guided_regex": {"type": "string"},
    "guided_choice": _STRINGS,
    "guided_grammar": {"type": "string"},
    "bad_words": _STRINGS,
    "truncate_prompt_tokens": {"type": "integer", "minimum": 1},
    "add_generation_prompt": {"type": "boolean"},
    "continue_final_message": {"type": "boolean"},
}
# Fields a logged request carries that a greedy correctness pass does not send (it sets its own temperature,
# seed, logprobs and streaming); kept in ``original`` for a replay that samples (docs/probes.md).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "seed", "n", "best_of",
                   "use_beam_search", "length_penalty", "logprobs", "top_logprobs", "prompt_logprobs", "echo",
                   "stream", "stream_options", "max_tokens", "max_completion_tokens")
ORIGINAL_FIELDS = tuple(sorted({*SAMPLING_FIELDS, *PARAMS}))

EXPECT: dict[str, dict[str, Any]] = {
    "exact": {"type": "string", "x-error": "'expect.exact' must be a string; got {value!r}"},
    "regex": {"type": "string", "x-error": "'expect.regex' must be a string; got {value!r}"},
    "contains": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                 "x-error": "'expect.contains' must be a non-empty list of strings; got {value!r}"},
    "tool_names": {**_STRINGS, "x-error": "'expect.tool_names' must be a list of strings; got {value!r}"},
    "tool_count": {"type": "integer", "minimum": 0,
                   "x-error": "'expect.tool_count' must be a non-negative integer; got {value!r}"},
}

# The order a probe's keys are checked in (the first problem is reported): schema_check.first_problem.
ORDER = ("name", "category", "messages", "prompt", "max_tokens", "gates", "tools", "tool_choice", "params",
         "original", "expect", "role", "content", "type", "text", "tool_calls", "tool_call_id", "function")


def _message() -> dict[str, Any]:
    text_part = {"type": "object", "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                 "required": ["type", "text"], "additionalProperties": False}
    content = {"anyOf": [{"type": "string"}, {"type": "array", "items": text_part, "minItems": 1}],
               "x-error": "each message needs a 'content': a string or a list of text parts ({ type = \"text\", "
                          "text = \"...\" }); only an assistant turn with tool_calls may leave it out"}
    call = {"type": "object", "required": ["function"],
            "properties": {"id": {"type": "string"}, "type": {"const": "function"},
                           "function": {"type": "object", "required": ["name", "arguments"],
                                        "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
                                        "additionalProperties": False}},
            "additionalProperties": False,
            "x-error": "each tool call needs function = { name = \"...\", arguments = \"<JSON text>\" }"}
    return {
        "type": "object",
        "properties": {
            "role": {"enum": list(MESSAGE_ROLES), "x-error": f"each message needs a 'role' in {sorted(MESSAGE_ROLES)}"},
            "content": content,
            "name": {"type": "string"},
            "tool_calls": {"type": "array", "items": call, "minItems": 1},
            "tool_call_id": {"type": "string"},
            "reasoning_content": {"type": "string"},
        },
        "required": ["role"],
        "additionalProperties": False,
        # an assistant turn that called tools may leave out its content; every other message has one
        "if": {"properties": {"role": {"const": "assistant"}}, "required": ["role", "tool_calls"]},
        "then": {},
        "else": {"required": ["content"]},
        "x-errors": {"type": "each message must be a table"},
    }


def _probe() -> dict[str, Any]:
    tool = {"type": "object", "required": ["function"],
            "properties": {"type": {"const": "function"},
                           "function": {"type": "object", "required": ["name"],
                                        "properties": {"name": {"type": "string"}, "description": {"type": "string"},
                                                       "parameters": {"type": "object"}, "strict": {"type": "boolean"}},
                                        "additionalProperties": False}},
            "additionalProperties": False}
    named = {"type": "object", "required": ["function"],
             "properties": {"type": {"const": "function"},
                            "function": {"type": "object", "required": ["name"],
                                         "properties": {"name": {"type": "string"}}, "additionalProperties": False}},
             "additionalProperties": False}
    return {
        "type": "object",
        "x-errors": {"type": "each [[probe]] must be a table"},
        "properties": {
            "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.\-]+$", "maxLength": MAX_NAME,
                     "x-error": "'name' is required: letters, digits, '.', '_' or '-'",
                     "x-errors": {"maxLength": "'name' has {length} characters; at most 255 are stored"}},
            "category": {"enum": list(CATEGORIES),
                         "x-error": f"'category' must be one of {', '.join(CATEGORIES)}; got {{value!r}}"},
            "messages": {"type": "array", "minItems": 1, "items": _message(),
                         "x-errors": {"type": "'messages' must be a non-empty list of tables",
                                      "minItems": "'messages' must be a non-empty list of tables"}},
            "prompt": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer", "minimum": 0},
                                                      "minItems": 1}],
                       "x-error": "'prompt' must be a string (or a list of token ids)"},
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS,
                           "x-error": f"'max_tokens' must be an integer from 1 to {MAX_TOKENS}"},
            "gates": {**_STRINGS, "x-error": "'gates' must be a list of gate names"},
            "tools": {"type": "array", "items": tool,
                      "x-error": "'tools' must be OpenAI tool definitions with function.name"},
            "tool_choice": {"anyOf": [{"enum": ["auto", "required", "none"]}, named],
                            "x-error": "'tool_choice' must be auto, required, none or a named-function table"},
            "params": {"type": "object", "properties": {k: {**v, "x-error": f"'params.{k}' does not have the type "
                                                                           f"vLLM reads; got {{value!r}}"}
                                                         for k, v in PARAMS.items()},
                       "additionalProperties": False, "x-errors": {"type": "'params' must be a table"}},
            "original": {"type": "object", "properties": {k: {} for k in ORIGINAL_FIELDS},
                         "additionalProperties": False, "x-errors": {"type": "'original' must be a table"}},
            "expect": {"type": "object", "properties": EXPECT, "additionalProperties": False,
                       "x-errors": {"type": "'expect' must be a table"}},
        },
        "required": ["name", "category"],
        "additionalProperties": False,
    }


def suite_schema() -> dict[str, Any]:
    """The JSON Schema of a probe-suite file (its TOML read as JSON)."""
    return {
        "$schema": DIALECT,
        "$id": "https://specdecode-observatory.invalid/probes.schema.json",
        "title": "observatory probe suite",
        "description": "A probe suite (probes/*.toml, --suite FILE.toml): prompts plus what to check about their "
                       "outputs. docs/probes.md describes every key. Annotations x-error and x-errors are the "
                       "loader's wording of a failure (ignored by other validators).",
        "type": "object",
        "properties": {
            "suite": {"type": "string", "x-error": "'suite' must be a string"},
            "description": {"type": "string", "x-error": "'description' must be a string"},
            "probe": {"type": "array", "minItems": 1, "maxItems": MAX_PROBES, "items": _probe(),
                      "x-errors": {"type": "no [[probe]] tables", "minItems": "no [[probe]] tables",
                                   "required": "no [[probe]] tables"}},
        },
        "required": ["probe"],
        "additionalProperties": False,
    }


def probe_schema() -> dict[str, Any]:
    """The schema of one probe (a [[probe]] table), with the dialect: what an imported probe is checked with."""
    return {"$schema": DIALECT, **_probe()}


def schema_text() -> str:
    """The committed file's text."""
    return json.dumps(suite_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(schema_text(), end="")
