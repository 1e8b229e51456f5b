"""Tokens as the report shows them: one boxed span each, invisible characters made visible, text escaped."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup


def visible(tok: Any) -> str:
    """A token as shown: an id as #N, spaces as ␣, control characters as visible marks."""
    if not isinstance(tok, str):
        return f"#{tok}"
    if tok and not tok.strip(" "):  # a token of spaces only would be an empty-looking box
        return "␣" * len(tok)
    return "".join(c if c.isprintable() else ("⏎" if c == "\n" else "⇥" if c == "\t" else "·")
                   for c in tok) or "∅"


def tokens_html(tokens: list[Any] | None, mark_first: bool = False) -> Markup:
    """Tokens as boxed spans (ids as #N); the first one marked (the divergent token)."""
    spans = []
    for i, t in enumerate(tokens or []):
        cls = "tok div" if mark_first and i == 0 else "tok"
        spans.append(Markup('<span class="{}">{}</span>').format(cls, visible(t)))
    return Markup("").join(spans) if spans else Markup('<span class="muted">(end of output)</span>')
