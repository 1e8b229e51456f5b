"""The one redaction function: credentials never reach the database, a report, JUnit or the terminal.

Two kinds of secret are known (issue 19 item 5): credentials written into a
URL (`http://user:sk-...@host`), which are masked wherever a URL appears, and
the key values the observatory was given (--api-key / OBSERVATORY_API_KEY,
and the user and password of every URL arm), which are masked wherever they
appear, e.g. in an error body where a server echoed the Authorization header.
`observatory.store.session_store` applies `redact` to everything it writes; the terminal
reporter applies it to what it prints.
"""

from __future__ import annotations

import base64
import re
from typing import Any
from urllib.parse import unquote, urlsplit

MASK = "***"
# Where a URL's userinfo ends: "@" ends it, the others end the authority without one.
_AUTHORITY_END = re.compile(r"[/?#@\s]")
# Shorter values would mask ordinary words; a real key is longer.
MIN_SECRET_CHARS = 6

_known: set[str] = set()


def remember(secret: str | None) -> None:
    """Mask SECRET (a key value) from now on, wherever it appears."""
    if secret and len(secret) >= MIN_SECRET_CHARS:
        _known.add(secret)


def remember_url(url: str | None) -> None:
    """Mask the user and password written into URL, and any key they carry."""
    if not url:
        return
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    for value in (parts.username, parts.password):
        if value:
            remember(value)
            remember(unquote(value))
    if parts.password:
        # HTTP clients send URL credentials as Basic auth: base64("user:password"), echoed by some servers.
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password)}"
        remember(base64.b64encode(pair.encode()).decode())


def forget_all() -> None:
    """Drop every remembered secret (tests)."""
    _known.clear()


def _mask_url_userinfo(text: str) -> str:
    """TEXT with the userinfo of every `scheme://userinfo@host` replaced by ***.

    A scan from each "://" to the end of its authority: linear in the text,
    which may be megabytes of untrusted model output (a backtracking regex
    over a long run of letters would not be).
    """
    if "://" not in text or "@" not in text:
        return text
    parts: list[str] = []
    done = 0
    at = text.find("://")
    while at != -1:
        start = at + 3
        end = _AUTHORITY_END.search(text, start)
        if end is not None and text[end.start()] == "@" and end.start() > start:
            parts += [text[done:start], MASK]
            done = end.start()
        at = text.find("://", end.start() if end is not None else len(text))
    parts.append(text[done:])
    return "".join(parts)


def redact_text(text: str) -> str:
    """TEXT with URL credentials and every remembered key replaced by ***."""
    out = _mask_url_userinfo(text)
    for secret in sorted(_known, key=len, reverse=True):
        if secret in out:
            out = out.replace(secret, MASK)
    return out


def redact(value: Any) -> Any:
    """VALUE with `redact_text` applied to every string in it (dict keys, lists and tuples included)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        return [redact(v) for v in value]
    if isinstance(value, tuple):
        return tuple(redact(v) for v in value)
    if isinstance(value, dict):
        return {redact(k): redact(v) for k, v in value.items()}
    return value
