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

Issue 48 adds imported traffic (`observatory.model.suites`): a team's logged
requests carry secrets nobody gave the observatory, so `redact_traffic`
masks, beyond what `redact` masks, every e-mail address and every string
shaped like a credential (`KEY_SHAPES`: OpenAI/Anthropic ``sk-...``, AWS
access key ids, GitHub, Hugging Face, Slack, Google, GitLab and Stripe keys,
JWTs, the token after ``Bearer``, and the value after a name such as
``api_key=`` or ``"password":`` when it holds a digit or 20 characters, so
``token = tokenizer.encode(x)`` in a code prompt stays). It scans the text once, word by word (runs
of key characters), so a megabyte of hostile text costs a linear scan, never
a backtracking regex. It is applied to an imported prompt before it is
written to a suite or sent, so the suite file, the requests and the store
hold the masked text; model output is not masked by it (an answer that
quotes an address stays as the model wrote it, for the gates to judge).
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


# -- imported traffic (issue 48) ------------------------------------------------------------------------

# Runs of the characters keys are written in (one scan finds every candidate word; "=" and ":" end a word,
# so "api_key=VALUE" is two words).
_WORD = re.compile(r"[A-Za-z0-9_.\-+/~]+")
# Whole-word credential shapes (matched against one word, a trailing "." or "-" of a sentence left out).
KEY_SHAPES = re.compile(
    r"(?:sk-[A-Za-z0-9_\-]{16,}"                      # OpenAI, Anthropic (sk-proj-, sk-ant-)
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"                      # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|hf_[A-Za-z0-9]{30,}"                            # Hugging Face
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"                 # Slack
    r"|AIza[0-9A-Za-z_\-]{30,}"                       # Google
    r"|glpat-[A-Za-z0-9_\-]{20,}"                     # GitLab
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}"           # Stripe
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,})"  # a JWT
)
# A word naming a credential, whose next word is its value ("api_key=...", '"password": "..."').
_NAMED = re.compile(r"(?:[A-Za-z0-9]+[_\-.])*(?:api[_\-]?key|apikey|access[_\-]?key|secret|token|password|passwd|"
                    r"pwd|credentials?|auth)", re.IGNORECASE)
_BETWEEN_NAME_AND_VALUE = re.compile(r"[\"']?\s{0,3}[:=]\s{0,3}[\"']?")
_LONGEST_WORD = 4096  # a longer run (a data URL, a base64 blob) is no key: not matched (linear either way)
_EMAIL_LOCAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-")
_EMAIL_DOMAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-")


def _email_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) of every e-mail address: from each "@", at most 64 local and 255 domain characters."""
    spans: list[tuple[int, int]] = []
    at = text.find("@")
    while at != -1:
        start = at
        while start > 0 and at - start < 64 and text[start - 1] in _EMAIL_LOCAL:
            start -= 1
        end = at + 1
        while end < len(text) and end - at <= 255 and text[end] in _EMAIL_DOMAIN:
            end += 1
        domain = text[at + 1:end].rstrip(".-")
        if start < at and "." in domain.strip(".") and domain.rsplit(".", 1)[1].isalpha():
            spans.append((start, at + 1 + len(domain)))
        at = text.find("@", at + 1)
    return spans


# Where a credential could start (lower case): none in the text, nothing to scan word by word (most prompts).
_KEY_HINTS = ("sk-", "akia", "asia", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "hf_", "xox", "aiza",
              "glpat-", "k_live_", "k_test_", "eyj", "bearer", "key", "secret", "token", "passw", "pwd", "credential",
              "auth")


def _key_spans(text: str) -> list[tuple[int, int]]:
    """The [start, end) of every credential-shaped word, and of the word after a credential's name."""
    spans: list[tuple[int, int]] = []
    lower = text.lower()
    if not any(hint in lower for hint in _KEY_HINTS):
        return spans
    previous: re.Match[str] | None = None
    for m in _WORD.finditer(text):
        word = m.group()
        if len(word) <= _LONGEST_WORD:
            core = word.rstrip(".-")
            if KEY_SHAPES.fullmatch(core):
                spans.append((m.start(), m.start() + len(core)))
            elif previous is not None and len(core) >= MIN_SECRET_CHARS:
                gap = text[previous.end():m.start()]
                # a value, not code ("token = tokenizer.encode"): a digit in it, or 20 characters
                valued = any(c.isdigit() for c in core) or len(core) >= 20
                named = valued and _NAMED.fullmatch(previous.group()) and _BETWEEN_NAME_AND_VALUE.fullmatch(gap)
                bearer = previous.group().lower() == "bearer" and gap.isspace() and len(core) >= 16
                if named or bearer:
                    spans.append((m.start(), m.start() + len(core)))
        previous = m
    return spans


def redact_traffic(value: Any) -> Any:
    """VALUE (an imported request) masked for storing: `redact`, then every e-mail address and credential-shaped
    string in each of its strings (dict keys included) replaced by ***."""
    if isinstance(value, str):
        text = redact_text(value)
        spans = sorted(_email_spans(text) + _key_spans(text)) if ("@" in text or len(text) >= 16) else []
        if not spans:
            return text
        parts: list[str] = []
        done = 0
        for start, end in spans:
            if end <= done:
                continue
            parts += [text[done:max(start, done)], MASK]
            done = end
        parts.append(text[done:])
        return "".join(parts)
    if isinstance(value, list):
        return [redact_traffic(v) for v in value]
    if isinstance(value, dict):
        return {redact_traffic(k): redact_traffic(v) for k, v in value.items()}
    return value
