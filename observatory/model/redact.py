"""The one redaction function: credentials never reach the database, a report, JUnit or the terminal.

Two kinds of secret are known (issue 19 item 5): credentials written into a
URL (`http://user:sk-...@host`), which are masked wherever a URL appears, and
the key values the observatory was given (--api-key / OBSERVATORY_API_KEY,
and the user and password of every URL arm), which are masked wherever they
appear, e.g. in an error body where a server echoed the Authorization header.
`observatory.store.session_store` applies `redact` to everything it writes; the terminal
reporter applies it to what it prints.

Issue 32 item 1 adds: a secret split over several token texts is masked in
each piece it touches (`redact_pieces`, so joining the stored pieces gives
the masked text back, never the key); the Basic-auth form the client itself
sends for a URL's user name alone (base64 of ``user:``); and values given to
the engine: an arm's or the session's env values whose name says they are a
credential (`SECRET_NAME`), and the value of an engine argument such as
``--api-key VALUE`` / ``--api-key=VALUE`` (`remember_engine`); and an
engine's own log once it has stopped (`redact_file`: vLLM logs its arguments).

Round three (hostile testing of issue 32): a remembered value is masked in
any letter case (a server that echoes ``basic DXNL...`` upper- or
lower-cased), in its JSON-escaped and percent-encoded forms (an error body
kept as the server wrote it), and a URL's query parameters named like a
credential (``?api_key=...``, ``&password=...``) are masked like its
userinfo, wherever a URL appears.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

MASK = "***"
# Where a URL's userinfo ends: "@" ends it, the others end the authority without one.
_AUTHORITY_END = re.compile(r"[/?#@\s]")
# Shorter values would mask ordinary words; a real key is longer.
MIN_SECRET_CHARS = 6

# env names and engine flags whose value is a credential: API_KEY, HF_TOKEN, --api-key, --hf-token, ...
SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)

# Where a URL ends in running text (a query parameter's value ends at & ; # too).
_URL_END = re.compile(r"[\s\"'<>`]")
_PARAM_END = re.compile(r"[&;#\s\"'<>`]")

_known: set[str] = set()
_casefold: dict[str, re.Pattern[str]] = {}  # each non-ASCII secret's case-insensitive pattern


def remember(secret: str | None) -> None:
    """Mask SECRET (a key value) from now on, wherever it appears: in any letter case, JSON-escaped or
    percent-encoded too (the forms a server echoing it may write)."""
    if not secret or len(secret) < MIN_SECRET_CHARS:
        return
    escaped = json.dumps(secret)[1:-1]
    for form in {secret, escaped, json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret, safe=""),
                 quote(secret)}:
        _known.add(form.lower() if form.isascii() else form)
        if not form.isascii():
            _casefold[form] = re.compile(re.escape(form), re.IGNORECASE)


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
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if SECRET_NAME.search(name):
            remember(value)
    if parts.username is not None:
        # The client sends URL credentials as Basic auth (observatory.client.wire): base64("user:password"),
        # base64("user:") for a user name alone; some servers echo the header.
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        if parts.username or parts.password:
            remember(base64.b64encode(pair.encode()).decode())


def remember_engine(args: Iterable[str], env: Mapping[str, str]) -> None:
    """Mask the credentials given to an engine: ENV values named like one, and ARGS' ``--api-key`` values.

    An argument is a credential flag when its name matches `SECRET_NAME`
    (``--api-key``, ``--hf-token``); its value is the next argument or what
    follows ``=``.
    """
    for name, value in env.items():
        if SECRET_NAME.search(name):
            remember(value)
    args = [part for a in args for part in a.split()]  # "--api-key VALUE" given as one argument too
    for i, a in enumerate(args):
        if not a.startswith("-"):
            continue
        flag, eq, value = a.partition("=")
        if not SECRET_NAME.search(flag):
            continue
        if eq:
            remember(value)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            remember(args[i + 1])


def forget_all() -> None:
    """Drop every remembered secret (tests)."""
    _known.clear()
    _casefold.clear()


def _userinfo_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) of the userinfo of every `scheme://userinfo@host` in TEXT.

    A scan from each "://" to the end of its authority: linear in the text,
    which may be megabytes of untrusted model output (a backtracking regex
    over a long run of letters would not be).
    """
    if "://" not in text or "@" not in text:
        return []
    spans: list[tuple[int, int]] = []
    at = text.find("://")
    while at != -1:
        start = at + 3
        end = _AUTHORITY_END.search(text, start)
        if end is not None and text[end.start()] == "@" and end.start() > start:
            spans.append((start, end.start()))
        at = text.find("://", end.start() if end is not None else len(text))
    return spans


def _query_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) of every value of a query parameter named like a credential (SECRET_NAME) in
    every URL in TEXT (``?api_key=...``). Linear: each URL is scanned once, from its "://" to its end."""
    if "://" not in text or "=" not in text:
        return []
    spans: list[tuple[int, int]] = []
    at = text.find("://")
    while at != -1:
        m = _URL_END.search(text, at + 3)
        url_end = m.start() if m is not None else len(text)
        q = text.find("?", at + 3, url_end)
        while q != -1 and q < url_end:
            eq = text.find("=", q + 1, url_end)
            if eq == -1:
                break
            m = _PARAM_END.search(text, eq + 1, url_end)
            value_end = m.start() if m is not None else url_end
            if SECRET_NAME.search(text[q + 1:eq]) and value_end > eq + 1:
                spans.append((eq + 1, value_end))
            q = value_end if value_end < url_end and text[value_end] in "&;" else -1
        at = text.find("://", url_end)
    return spans


def _secret_spans(text: str) -> list[tuple[int, int]]:
    """The merged, sorted [start, end) spans of TEXT to mask: URL userinfo and every remembered key."""
    spans = _userinfo_spans(text) + _query_spans(text)
    if _known:
        # ASCII secrets are kept lower-cased: found in any case in the lower-cased text (the same length
        # as TEXT only where TEXT is ASCII; elsewhere a case-insensitive pattern per secret)
        lower = text.lower() if text.isascii() else None
        for secret in _known:
            if lower is not None:
                at = lower.find(secret) if secret.isascii() else -1
                while at != -1:
                    spans.append((at, at + len(secret)))
                    at = lower.find(secret, at + 1)
                continue
            pattern = _casefold.get(secret) or _casefold.setdefault(secret, re.compile(re.escape(secret),
                                                                                     re.IGNORECASE))
            m = pattern.search(text)
            while m is not None:
                spans.append((m.start(), m.end()))
                m = pattern.search(text, m.start() + 1)
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact_text(text: str) -> str:
    """TEXT with URL credentials and every remembered key replaced by ***."""
    spans = _secret_spans(text)
    if not spans:
        return text
    parts: list[str] = []
    done = 0
    for start, end in spans:
        parts += [text[done:start], MASK]
        done = end
    parts.append(text[done:])
    return "".join(parts)


def redact_pieces(pieces: list[str]) -> list[str]:
    """PIECES (e.g. per-token texts) masked as their joined text is: a secret split over pieces never survives.

    Each piece keeps its characters outside any secret; the piece where a
    secret starts carries the ***, the others it spans lose their part of it.
    So ``"".join(redact_pieces(p)) == redact_text("".join(p))`` and the list
    keeps its length (one text per token).
    """
    joined = "".join(pieces)
    spans = _secret_spans(joined)
    if not spans:
        return list(pieces)
    out: list[str] = []
    pos = 0
    for piece in pieces:
        lo, hi = pos, pos + len(piece)
        pos = hi
        kept: list[str] = []
        cur = lo
        for start, end in spans:
            if end <= lo or start >= hi:
                continue
            kept.append(joined[cur:max(start, lo)])
            if start >= lo:
                kept.append(MASK)
            cur = max(cur, min(end, hi))
        kept.append(joined[cur:hi])
        out.append("".join(kept))
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


def redact_file(path: Path) -> None:
    """Rewrite the text file PATH masked line by line (an engine's log: the engine wrote it, e.g. its argv).

    Left as it is when nothing in it needs masking or it cannot be read.
    """
    tmp = path.with_name(path.name + ".masking")
    changed = False
    try:
        with open(path, "rb") as src, open(tmp, "wb") as dst:
            for line in src:
                text = line.decode("utf-8", errors="surrogateescape")
                masked = redact_text(text)
                changed = changed or masked != text
                dst.write(masked.encode("utf-8", errors="surrogateescape"))
        if changed:
            os.replace(tmp, path)
    except OSError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
