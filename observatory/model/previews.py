"""One-line renderings of an output, for tables and gate details: the preview and the tool calls.

One place for the preview length (the matrix in the terminal and the report,
the content gate's stored preview) and for the one-line form of parsed tool
calls, which the matrix shows for an output that is only a tool call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PREVIEW_CHARS = 80


def preview(text: str | None, n: int = PREVIEW_CHARS) -> str:
    """The first N characters, one line (control characters made visible)."""
    t = (text or "")[:n]
    return "".join(c if c.isprintable() else ("⏎" if c == "\n" else "·") for c in t)


def tool_calls_text(calls: Sequence[Any]) -> str:
    """Parsed tool calls as one line: ``→ name(arguments)`` each, space-separated (malformed entries too)."""
    parts = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        fn = fn if isinstance(fn, dict) else {}
        parts.append(f"→ {fn.get('name')}({fn.get('arguments')})")
    return " ".join(parts)
