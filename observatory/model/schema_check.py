"""Validate a parsed file against its JSON Schema (jsonschema) and say the first problem in one line.

The probe-suite and arms-file schemas (`observatory.model.probe_schema`,
`observatory.model.arms_schema`) are generated from the code's own constants
and committed under docs/; the loaders validate with them through here, so
the shape rules live in one place and the published schema is the one the
loader applies. A schema carries the project's wording of its errors in two
annotation keywords that JSON Schema ignores:

- ``x-error``: the message for any failure at or under this subschema (the
  nearest one to the failure wins);
- ``x-errors``: ``{keyword: message}``, for a failure of that keyword here.

A message may use ``{value!r}`` (the value at the subschema carrying the
message) and ``{length}`` (its length). Unknown keys (``additionalProperties``)
are worded by the caller's ``unknown`` function, which knows the dotted name
a user reads. The schemas are written without ``$ref``, so a failure's schema
path can be walked from the root to find the nearest message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jsonschema

Path = tuple[str | int, ...]


class SchemaProblem:
    """The first failure of a document: where (instance path), and its message."""

    def __init__(self, path: Path, message: str):
        self.path = path
        self.message = message

    def __repr__(self) -> str:
        return f"SchemaProblem({self.path!r}, {self.message!r})"


def validator(schema: dict[str, Any]) -> Any:
    """A checked validator for SCHEMA (its draft from ``$schema``)."""
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def first_problem(check: Any, document: Any, order: Sequence[str],
                  unknown: Callable[[Path, list[str], list[str]], str], base: int = 0) -> SchemaProblem | None:
    """The first failure of DOCUMENT under validator CHECK, None when it is valid.

    Failures are ranked by where they are: earlier list items first, then
    the keys of an object in ORDER (the order the checks read best in:
    name before category before ...), an object's unknown keys before its
    values. UNKNOWN(path, unknown keys, allowed keys) words an
    ``additionalProperties`` failure. A failure no message covers is
    jsonschema's own words after the dotted name of where it is, BASE
    leading path parts left out (those that name the record: a probe, an arm).
    """
    errors = list(check.iter_errors(document))
    if not errors:
        return None
    rank = {k: i for i, k in enumerate(order)}
    best = min(errors, key=lambda e: _rank(e, rank))
    path: Path = tuple(best.absolute_path)
    if best.validator == "additionalProperties":
        allowed = sorted(best.schema.get("properties", {}))
        extra = sorted(str(k) for k in best.instance if k not in best.schema.get("properties", {}))
        return SchemaProblem(path, unknown(path, extra, allowed))
    if best.validator == "required":
        missing = next(k for k in best.validator_value if k not in best.instance)
        chain = _walk(check.schema, best.absolute_schema_path)
        owners = [node for node, _ in chain if missing in node.get("properties", {})]
        sub = owners[-1]["properties"][missing] if owners else {}
        around = [node["x-error"] for node, _ in chain if "x-error" in node]  # e.g. the tool's, for its function
        message = sub.get("x-error") or (sub.get("x-errors") or {}).get("required") or (around[-1] if around else
                                                                                        None)
        if message is None:
            return SchemaProblem((*path, missing), f"{dotted((*path, missing)[base:])!r} is required")
        return SchemaProblem((*path, missing), _format(message, None))
    return SchemaProblem(path, _message(check.schema, best, document)
                         or f"{dotted(path[base:])!r}: {best.message[:300]}")


def dotted(path: Path) -> str:
    """PATH as a user reads it: ``messages[0].content``."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _rank(e: Any, rank: dict[str, int]) -> tuple[Any, ...]:
    key: list[tuple[int, int, str]] = []
    for part in e.absolute_path:
        key.append((0, part, "") if isinstance(part, int) else (1, rank.get(part, len(rank)), str(part)))
    if e.validator == "additionalProperties":
        key.append((-1, 0, ""))
    elif e.validator == "required":
        missing = [k for k in e.validator_value if isinstance(e.instance, dict) and k not in e.instance]
        name = missing[0] if missing else ""
        key.append((1, rank.get(name, len(rank)), name))
    elif e.validator == "type" and not key:
        key.append((-2, 0, ""))
    return tuple(key)


def _walk(schema: dict[str, Any], schema_path: Sequence[Any]) -> list[tuple[dict[str, Any], int]]:
    """Every subschema on SCHEMA_PATH from the root, with how many instance-path steps lead to it."""
    out = [(schema, 0)]
    node: Any = schema
    depth = 0
    steps = list(schema_path)
    i = 0
    while i < len(steps):
        step = steps[i]
        if step in ("properties", "patternProperties") and i + 1 < len(steps):
            node, depth, i = node[step][steps[i + 1]], depth + 1, i + 2
        elif step in ("items", "additionalProperties") and isinstance(node.get(step), dict):
            node, depth, i = node[step], depth + 1, i + 1
        elif step in ("anyOf", "oneOf", "allOf", "prefixItems") and i + 1 < len(steps):
            node, i = node[step][steps[i + 1]], i + 2
            depth += step == "prefixItems"
        elif step in ("if", "then", "else", "not", "contains", "propertyNames") and isinstance(node.get(step), dict):
            node, i = node[step], i + 1
        else:
            break  # the failing keyword itself
        if isinstance(node, dict):
            out.append((node, depth))
    return out


def _message(root: dict[str, Any], e: Any, document: Any) -> str | None:
    """The nearest message for failure E, formatted with the value it applies to."""
    chain = _walk(root, e.absolute_schema_path)
    node, _ = chain[-1]
    own = (node.get("x-errors") or {}).get(e.validator)
    path = list(e.absolute_path)
    if own:
        return _format(own, e.instance)
    for node, depth in reversed(chain):
        if "x-error" in node:
            return _format(node["x-error"], _at(document, path, depth))
    return None


def _at(document: Any, path: list[Any], depth: int) -> Any:
    """The value DEPTH steps down PATH from the DOCUMENT's root."""
    value = document
    for step in path[:depth]:
        value = value[step]
    return value


def _format(message: str, value: Any) -> str:
    try:
        return message.format(value=value, length=len(value) if hasattr(value, "__len__") else 0)
    except (KeyError, IndexError, ValueError):
        return message
