"""The report's field-channel tables (docs/channels.md): failures first, nothing but PASS rows ever capped.

Each channel verdict of each arm becomes one block with a stable anchor
(`channel_anchor`) that the banner and the failures section link to. Its
table's rows are sorted worst first (FAIL, INVALID, WARN, not measurable,
other, PASS; stable within a level, so the channel's own order stays); a cap
hides PASS rows only and says how many. A row's level is its ``verdict``
field, or read from its ``result`` field for channels that write one
(``finish``: "FAIL: ...", "WARN ...", "equal"; ``counters``: "ok"; ``history``:
"within noise").

Cells are escaped text; a list of token texts (a row's ``base`` / ``here``
continuation from its first divergence, observatory/channels/pairs.py
`continuations`) is drawn as token boxes with the first one marked, a list of
ids as ids.
"""

from __future__ import annotations

import json
import re
from typing import Any

from markupsafe import Markup, escape

from observatory.model.read_model import SessionView
from observatory.model.vocabulary import FAIL, INFO, INVALID, PASS, WARN, row_rank
from observatory.report.token_spans import tokens_html

PASS_ROWS_SHOWN = 40  # PASS rows shown per table; FAIL, WARN and every other row are always shown
# A differing row's evidence (observatory/channels/pairs.py `continuations`): drawn right after the row's first
# identifying columns, so both sides are in view without scrolling the table sideways (a 400 px screen)
EVIDENCE_COLS = ("base", "here", "from_token", "base_ids", "here_ids")
IDENTIFYING_COLS = 2
_PASS_RESULTS = ("equal", "ok", "within noise")


def row_level(row: dict[str, Any]) -> str:
    """A table row's level: its ``verdict`` field, else read from its ``result`` text; INFO when neither says."""
    v = row.get("verdict")
    if isinstance(v, str) and v:
        return v
    res = row.get("result")
    if isinstance(res, str):
        head = re.split(r"[\s:(]", res, maxsplit=1)[0]
        if head in (FAIL, WARN):
            return head
        if res in _PASS_RESULTS:
            return PASS
    return INFO


def channel_anchor(ai: int, gate: str) -> str:
    """The id of arm AI's block for channel verdict GATE (``mixed_batch``, ``counters:stream_tau``)."""
    return f"ch-{ai}-" + re.sub(r"[^A-Za-z0-9_-]", "-", gate)


def _tokens(values: list[Any], mark_first: bool) -> Markup:

    return tokens_html(values, mark_first=mark_first)


def cell_html(key: str, value: Any, row: dict[str, Any]) -> Markup:
    """One table cell's content, escaped."""
    if value is None:
        return Markup("—")
    if key == "here" and isinstance(value, str) and value == row.get("base") and "from_token" not in row:
        # a row stored by a judge that kept each text from its start (before observatory/channels/pairs.py
        # `continuations`): the difference is past what was kept; re-judging the session shows it
        return Markup('{} <span class="flag soft">same text as base from the start; the difference is in the '
                      "token ids (`observatory judge` stores both sides from the divergence)</span>").format(value)
    if isinstance(value, list) and key.endswith("_ids"):
        return Markup('<span class="mono">{}</span>').format(" ".join(map(str, value)) or "(none)")
    if isinstance(value, list) and all(isinstance(x, (str, int)) for x in value):
        return _tokens(value, mark_first=row.get("from_token") is not None and key in ("base", "here"))
    if isinstance(value, (dict, list)):
        return Markup('<span class="mono">{}</span>').format(json.dumps(value, ensure_ascii=False, default=str))
    return escape(str(value))


def table_view(rows: list[Any], pass_rows: int = PASS_ROWS_SHOWN) -> dict[str, Any]:
    """Columns (the union of the rows' keys; a differing row's continuations, `EVIDENCE_COLS`, right after the
    first `IDENTIFYING_COLS`), rows worst first, how many PASS rows the cap hid, and how many
    rows are FAIL, INVALID or WARN (``bad``: a table with none may be folded away, one with any never is)."""
    dict_rows = [r for r in rows if isinstance(r, dict)]
    cols: list[str] = []
    for r in dict_rows:
        cols += [k for k in r if k not in cols]
    evidence = [k for k in EVIDENCE_COLS if k in cols]
    rest = [k for k in cols if k not in evidence]
    cols = rest[:IDENTIFYING_COLS] + evidence + rest[IDENTIFYING_COLS:]
    ordered = sorted(enumerate(dict_rows), key=lambda ir: row_rank(row_level(ir[1])))
    shown, hidden, passes = [], 0, 0
    for i, r in ordered:
        level = row_level(r)
        if level == PASS:
            passes += 1
            if passes > pass_rows:
                hidden += 1
                continue
        shown.append({"i": i, "level": level, "bad": level in (FAIL, INVALID, WARN),
                      "cells": [cell_html(k, r.get(k), r) for k in cols]})
    return {"cols": cols, "rows": shown, "hidden_pass": hidden, "total": len(dict_rows),
            "bad": sum(r["bad"] for r in shown)}


def channel_views(data: SessionView, pass_rows: int = PASS_ROWS_SHOWN) -> list[dict[str, Any]]:
    """Every channel with its arms' verdict blocks, worst first; each block anchored (`channel_anchor`)."""
    aidx = {a.name: i for i, a in enumerate(data.arms)}
    out: list[dict[str, Any]] = []
    for ch in data.channels:
        blocks: list[dict[str, Any]] = []
        for a in ch.arms:
            ai = aidx.get(a.arm, -1)
            if not a.verdicts:
                blocks.append({"arm": a.arm, "role": a.role, "gate": None, "verdict": None, "status": a.status,
                               "reason": None, "anchor": None, "table": None, "strip_html": None, "rows_raw": []})
                continue
            for gate, v in a.verdicts.items():
                rows = (v.details or {}).get("table")
                blocks.append({"arm": a.arm, "role": a.role, "gate": gate, "verdict": v.verdict, "status": a.status,
                               "reason": v.reason, "anchor": channel_anchor(ai, gate), "strip_html": None,
                               "rows_raw": rows if isinstance(rows, list) else [],
                               "table": table_view(rows, pass_rows) if isinstance(rows, list) and rows else None})
        blocks.sort(key=lambda b: row_rank(b["verdict"]))
        worst = min((str(b["verdict"]) for b in blocks if b["verdict"]), key=row_rank, default=None)
        out.append({"name": ch.name, "title": ch.title, "catches": ch.catches, "probes": ch.probes,
                    "worst": worst, "blocks": blocks})
    out.sort(key=lambda c: row_rank(c["worst"]))
    return out
