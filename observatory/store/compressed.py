"""Large columns stored zlib-compressed on SQLite: the same values, fewer bytes.

PostgreSQL compresses every value over about 2 kB by itself (TOAST); SQLite
stores what it is given. So on SQLite, and only there, a JSON or text value
whose zlib form is smaller is stored as that BLOB; the others stay plain
JSON text, as before. Reading tells the two apart by SQLite's storage class
(bytes: compressed; text: as written before), so rows written before read
unchanged and no migration is needed: SQLite keeps a BLOB in a column
declared JSON or TEXT as it is. Nothing is lost: zlib is lossless and the
JSON text is the one the engine writes (`compact_json`).

Used for the columns a session fills most and no query filters on: token ids
and texts, top logprobs and chunk timelines (`observatory.store.packed`), verdict
details, arm figures and log tails.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from sqlalchemy import JSON, Text
from sqlalchemy.types import TypeDecorator

# Below this many bytes zlib rarely wins and a value stays readable text.
MIN_BYTES = 128


def compact_json(value: Any) -> str:
    """VALUE as JSON without the optional spaces and with text as UTF-8, not escapes (the same value, fewer bytes).

    SQLAlchemy's default (`json.dumps`) writes ``", "`` and ``": "`` and
    ``\\uXXXX`` for every non-ASCII character: about 7% of a session's JSON,
    and twice the bytes for Chinese text. A string that cannot be UTF-8 (a lone
    surrogate) keeps the escapes, as before.
    """
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":"))
    return text


def squeeze(text: str) -> str | bytes:
    """TEXT as zlib-compressed UTF-8 when that is smaller, else TEXT itself."""
    if len(text) < MIN_BYTES:
        return text
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not UTF-8, kept as text
        return text
    packed = zlib.compress(data)
    return packed if len(packed) < len(data) else text


def unsqueeze(value: str | bytes) -> str:
    """The text `squeeze` was given."""
    return zlib.decompress(value).decode("utf-8") if isinstance(value, bytes) else value


class CompressedJSON(TypeDecorator):  # type: ignore[type-arg]
    """A JSON column stored zlib-compressed on SQLite when that is smaller (see the module docstring).

    Subclasses transform values on the way in and out with `encode` and `decode`.
    """

    impl = JSON
    cache_ok = True

    def encode(self, value: Any) -> Any:
        """VALUE as it is serialised (subclasses pack it)."""
        return value

    def decode(self, value: Any) -> Any:
        """The value `encode` was given."""
        return value

    def load_dialect_impl(self, dialect: Any) -> Any:
        """SQLite: the driver's own text and bytes; elsewhere the JSON type."""
        return dialect.type_descriptor(Text() if dialect.name == "sqlite" else JSON())

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        """Encode; on SQLite serialise and compress."""
        value = self.encode(value)
        return squeeze(compact_json(value)) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        """On SQLite decompress and parse; decode."""
        # (a bare JSON number may come back as one: SQLite's NUMERIC affinity of a JSON column)
        if dialect.name == "sqlite" and isinstance(value, (str, bytes)):
            value = json.loads(unsqueeze(value))
        return self.decode(value)


class CompressedText(TypeDecorator):  # type: ignore[type-arg]
    """A text column stored zlib-compressed on SQLite when that is smaller (see the module docstring)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> Any:
        """On SQLite compress."""
        return squeeze(value) if dialect.name == "sqlite" and isinstance(value, str) else value

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        """On SQLite decompress."""
        return unsqueeze(value) if dialect.name == "sqlite" and value is not None else value
