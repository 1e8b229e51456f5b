"""The verdict as GitHub-flavoured markdown (``--summary-md FILE``: e.g. ``"$GITHUB_STEP_SUMMARY"``).

A CI job's summary page: the verdict and why, the reasons that count (FAIL,
INVALID, WARN, then the KNOWN and NOTE levels apart), one row per arm
(token identity, alpha, tau, S with its interval, TTFT, its verdict) and
where the report is. GitHub renders HTML inside markdown, so every stored
string (arm names, reasons that quote model output) is escaped: HTML
entities for ``& < >``, a backslash before markdown's own characters, line
breaks and control characters flattened (`md`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from observatory.judge.verdict import arm_role
from observatory.model.read_model import SessionView
from observatory.model.vocabulary import (
    COUNTED_LEVELS,
    EXIT,
    FAIL,
    INVALID,
    JUDGED_AGAINST_BASE,
    PASS,
    REASON_LEVELS,
    TOKEN_DIFF,
    UNJUDGED,
    WARN,
)
from observatory.report.openmetrics import arm_verdicts, model_name

REASONS_SHOWN = 20
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
ICON = {PASS: "✅", WARN: "⚠️", FAIL: "❌", INVALID: "⛔"}


def md(text: Any, limit: int = 300) -> str:
    """TEXT safe in a markdown table cell or list item: one line, no HTML, markdown characters escaped."""
    s = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    if len(s) > limit:
        s = s[:limit] + "…"
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MD_SPECIAL.sub(r"\\\1", s)


def _num(v: Any, fmt: str = "{:.3f}") -> str:
    return "—" if not isinstance(v, (int, float)) or isinstance(v, bool) else fmt.format(v)


def _identity(results: Any) -> str:
    made = [r.verdicts.get(TOKEN_DIFF) for r in results if r.ok]
    made = [d for d in made if d is not None and d.verdict != UNJUDGED]
    same = sum(1 for d in made if (d.details or {}).get("kind") == "identical")
    return f"{same}/{len(made)}" if made else "—"


def summary_markdown(data: SessionView, report: str | None = None, exit_code: int | None = None) -> str:
    """The session's verdict, counted reasons and per-arm figures as markdown (REPORT: where the HTML went)."""
    v = data.verdict
    code = EXIT[v.verdict] if exit_code is None else exit_code
    s = data.session
    lines = [f"## {ICON.get(v.verdict, '')} observatory: {v.verdict} (exit {code})".replace("  ", " "), "",
             f"**Why:** {md(v.why, 500)}", "",
             f"Session {s.id} · model {md(model_name(s.model), 120)} · started {md(s.started_at or '—')}"
             f" · {len(data.arms)} arms", ""]
    for level in REASON_LEVELS:
        reasons = [r for r in v.reasons if r.level == level]
        if not reasons:
            continue
        title = f"{level} ({len(reasons)})" + ("" if level in COUNTED_LEVELS else ": shown, not counted")
        lines += [f"### {title}", ""]
        lines += [f"- {md(r.text)}" for r in reasons[:REASONS_SHOWN]]
        if len(reasons) > REASONS_SHOWN:
            lines.append(f"- … and {len(reasons) - REASONS_SHOWN} more (see the report)")
        lines.append("")
    verdicts = arm_verdicts(data)
    lines += ["### Arms", "", "| arm | role | token-identical | α | τ | S [95% CI] | TTFT p50 ms | verdict |",
              "| --- | --- | ---: | ---: | ---: | --- | ---: | --- |"]
    for a in data.arms:
        acc: Mapping[str, Any] = a.figures.acceptance or {}
        vs: Mapping[str, Any] = a.figures.vs_base or {}
        ci = vs.get("ci")
        s_text = _num(vs.get("S")) + (f" [{_num(ci[0], '{:.2f}')}–{_num(ci[1], '{:.2f}')}]" if ci else "")
        judged = arm_role(a) in JUDGED_AGAINST_BASE
        ttft = ((a.figures.speed or {}).get("ttft_ms") or {}).get("median")
        lines.append(" | ".join(["", md(a.name, 80), md(a.role or "—", 40), _identity(a.results) if judged else "—",
                                 _num(acc.get("alpha")) if a.is_spec else "—", _num(acc.get("tau")) if a.is_spec else "—",
                                 s_text if a.is_spec else "—", _num(ttft, "{:.1f}"), verdicts.get(a.name, "—"), ""]).strip())
    lines.append("")
    if report:
        lines += [f"Report: {md(report, 300)} (the job's artifact)", ""]
    return "\n".join(lines)


def failure_markdown(exit_code: int, what: str, message: str) -> str:
    """A run that ended before anything was measured (setup error 3, internal error 4, storage 5)."""
    return "\n".join([f"## ⛔ observatory: {md(what)} (exit {exit_code})", "", md(message, 2000),
                      "", "Nothing was measured this run; the dashboards show this exit code, not last night's figures.",
                      ""])
