"""The JSON Schema of an arms file (``--arms-file arms.toml``), generated from the code's constants.

`arms_schema` builds it from the arm keys, the faults (`observatory.faults`)
and the parser-name rule, so the committed docs/arms.schema.json cannot drift
from the loader: `observatory.model.arms` validates every arms file with
this very schema (jsonschema, `observatory.model.schema_check`), and the
JSON of ``--speculative-config`` with its ``speculative_config`` part.
Regenerate the file with ``python -m observatory.model.arms_schema >
docs/arms.schema.json`` (tests/model/test_suite_schemas.py fails when it is stale).
docs/arms.md describes the format.

What the schema cannot say stays in code (arms.py): a URL's host and port,
an image reference beside a url, the engines (plugins add them at run
time) and what each engine takes.
"""

from __future__ import annotations

import json
from typing import Any

from observatory.faults import FAULTS
from observatory.model.probe_schema import DIALECT

SCHEMA_PATH = "docs/arms.schema.json"
NAME_PATTERN = r"^[A-Za-z0-9_.\-]+$"
PARSER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
# --suite-format's names (observatory.model.suites.FORMATS lists them with what each reads)
SUITE_FORMATS = ("toml", "openai", "sharegpt", "vllm-sharegpt", "vllm-custom", "spec-bench", "aiperf-single-turn",
                 "aiperf-multi-turn", "aiperf-mooncake")
# The order an arm's keys are checked in (the first problem is reported).
ORDER = ("speculative_config", "method", "num_speculative_tokens", "engine_args", "env", "fault", "url", "image",
         "engine", "tool_parser", "reasoning_parser", "deployed")
FAIL_ON = "fail_on must be a string like 'speedup<1.0,ttft_ratio>3,acceptance<0.5'"


def speculative_config_schema() -> dict[str, Any]:
    """A speculative config: vLLM's JSON object, of which the observatory reads method and K."""
    return {
        "type": "object",
        "properties": {
            "method": {"type": "string", "minLength": 1, "x-error": "needs a string \"method\" (e.g. \"mtp\", \"ngram\")"},
            "num_speculative_tokens": {"type": "integer", "minimum": 1,
                                       "x-error": "\"num_speculative_tokens\" must be a positive integer, got {value!r}"},
        },
        "required": ["method"],
        "x-errors": {"type": "must be a JSON object like {{\"method\": \"mtp\", \"num_speculative_tokens\": 2}}"},
    }


def _parser(key: str) -> dict[str, Any]:
    return {"type": "string", "pattern": PARSER_PATTERN,
            "x-error": f"{key}: {{value!r}} is not a parser name like hermes, qwen3_coder or none"}


def arm_schema() -> dict[str, Any]:
    """One [arms.NAME] table."""
    spec = speculative_config_schema()
    spec["properties"] = {k: {**v, "x-error": f"speculative_config: {v['x-error']}"}
                          for k, v in spec["properties"].items()}
    spec["x-errors"] = {"type": f"speculative_config: {spec['x-errors']['type']}"}
    return {
        "type": "object",
        "x-errors": {"type": "must be a table"},
        "properties": {
            "speculative_config": spec,
            "engine_args": {"type": "array", "items": {"type": "string"},
                            "x-error": "engine_args must be a list of strings"},
            "env": {"type": "object", "additionalProperties": {"type": "string"},
                    "x-error": "env must be a table of strings"},
            "fault": {"enum": list(FAULTS), "x-error": f"unknown fault {{value!r}} (known: {', '.join(FAULTS)})"},
            "url": {"type": "string", "x-error": "{value!r} is not an http(s) URL like http://127.0.0.1:8000"},
            "image": {"type": "string",
                      "x-error": "{value!r} is not a docker image reference like observatory/vllm-cpu:local"},
            "engine": {"type": "string", "x-error": "engine must be a string naming an engine, got {value!r}"},
            "tool_parser": _parser("tool_parser"),
            "reasoning_parser": _parser("reasoning_parser"),
            "deployed": {"type": "boolean", "x-error": "deployed must be true or false, got {value!r}",
                         "description": "this arm runs the deployment's production speculation config "
                                        "(observatory.session.depths; like --deployed-spec)"},
        },
        "additionalProperties": False,
    }


def arms_schema() -> dict[str, Any]:
    """The JSON Schema of an arms file (its TOML read as JSON)."""
    return {
        "$schema": DIALECT,
        "$id": "https://specdecode-observatory.invalid/arms.schema.json",
        "title": "observatory arms file",
        "description": "Named arms for --arms-file: each [arms.NAME] table is one server configuration. "
                       "docs/arms.md describes every key. Annotations x-error and x-errors are the loader's "
                       "wording of a failure (ignored by other validators).",
        "type": "object",
        "properties": {
            "arms": {"type": "object", "propertyNames": {"pattern": NAME_PATTERN, "maxLength": 255},
                     "additionalProperties": arm_schema(), "minProperties": 1,
                     "x-errors": {"type": "arms must be [arms.NAME] tables",
                                  "minProperties": "defines no arms; add [arms.NAME] tables"}},
            "fail_on": {"type": "string", "x-error": FAIL_ON},
            "suite": {"type": "string", "minLength": 1,
                      "x-error": "suite must be a probe suite's name or a path (relative to the arms file)"},
            "suite_format": {"enum": list(SUITE_FORMATS),
                             "x-error": f"suite_format must be one of {', '.join(SUITE_FORMATS)}; got {{value!r}}"},
            "known": {"anyOf": [{"type": "string", "minLength": 1},
                                {"type": "array", "items": {"type": "string", "minLength": 1}}],
                      "x-error": "known must be a ledger file's path or a list of paths (relative to the arms "
                                 "file; docs/known.md)"},
        },
        "additionalProperties": False,
    }


def schema_text() -> str:
    """The committed file's text."""
    return json.dumps(arms_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(schema_text(), end="")
