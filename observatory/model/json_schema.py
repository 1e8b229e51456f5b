"""The JSON Schema of ``show --json`` / ``gate --json``, generated from the read model (issue 30 item 8).

`schema` walks the frozen dataclasses of `observatory.model.read_model` and
their type hints, so the schema cannot drift from the code: every field is a
required property of its object (`to_plain` always writes it) but an
`OPTIONAL` one (written only when set), a `SPREAD`
field's keys go into the parent (an arm's figures are optional properties,
since an arm writes only the figures it has; extra stored keys are allowed
where a spread field can carry them), and ``Mapping[str, Any]`` parts stay
free-form objects. The committed file is docs/show-json.schema.json;
regenerate it with ``python -m observatory.model.json_schema >
docs/show-json.schema.json`` (tests/model/test_show_json_schema.py checks it is
current).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping
from typing import Any

from observatory.model import read_model
from observatory.model.read_model import SCHEMA_VERSION, ArmFigures, SessionView

DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_PATH = "docs/show-json.schema.json"

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"}, int: {"type": "integer"}, float: {"type": "number"}, bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


def _type(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The schema of one type hint; a dataclass becomes a ``$ref`` into DEFS (added there once)."""
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        _object(hint, defs)
        return {"$ref": f"#/$defs/{hint.__name__}"}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type(a, defs) for a in args]}
    if origin in (list, tuple):
        item = args[0] if args else Any
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"fixed-length tuple {hint} has no JSON shape here")
        return {"type": "array", "items": _type(item, defs)} if item is not Any else {"type": "array"}
    if origin is Mapping or origin is dict:
        value = args[1] if args else Any
        return {"type": "object"} if value is Any else {"type": "object", "additionalProperties": _type(value, defs)}
    raise TypeError(f"no JSON Schema for type hint {hint!r}")


def _object(cls: type, defs: dict[str, Any]) -> None:
    """Add dataclass CLS's object schema to DEFS under its name."""
    name = cls.__name__
    if name in defs:
        return
    defs[name] = {}  # placeholder: a recursive reference stops here
    hints = typing.get_type_hints(cls, vars(read_model))
    props: dict[str, Any] = {}
    required: list[str] = []
    open_ended = False
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if f.metadata.get("json") == "omit":  # read by the renderers, never printed
            continue
        if f.metadata.get("json") == "const":
            props[f.name] = {**_type(hint, defs), "const": f.default}
            required.append(f.name)
        elif f.metadata.get("json") == "spread":
            if hint is ArmFigures:  # the figures the arm has, each optional; unknown stored figures allowed
                fig_hints = typing.get_type_hints(ArmFigures, vars(read_model))
                for key in read_model.FIGURE_KEYS:
                    props[key] = _type(fig_hints[key], defs)
            open_ended = True  # a spread field's own keys are free-form
        elif f.metadata.get("json") == "optional":
            props[f.name] = _type(hint, defs)  # written only when set: not required
        else:
            props[f.name] = _type(hint, defs)
            required.append(f.name)
    doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split())
    defs[name] = {"type": "object", "description": doc, "properties": props, "required": required,
                  "additionalProperties": open_ended}


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of what ``show --json`` prints."""
    defs: dict[str, Any] = {}
    _object(SessionView, defs)
    top = defs.pop("SessionView")
    return {"$schema": DIALECT, "$id": f"observatory:show-json/v{SCHEMA_VERSION}",
            "title": "observatory show --json / gate --json", **top, "$defs": dict(sorted(defs.items()))}


def schema_text() -> str:
    """`schema` as the committed file's text."""
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
