"""The report's volume section (issue 48 items 2-3): each arm's rate with its power, and acceptance and speed per
request class as charts. Self-contained: built from the read model's channel verdicts, drawn by
``templates/_partials/volume.html``; model output never reaches it (class names are the observatory's own, and
escaped like every other value)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from markupsafe import Markup

from observatory.model.read_model import SessionView
from observatory.report import charts

CHANNEL = "volume"


def _verdicts(data: SessionView) -> list[tuple[str, str | None, Mapping[str, Any]]]:
    """(arm, role, {gate: VerdictView}) of the volume channel, in arm order."""
    ch = next((c for c in data.channels if c.name == CHANNEL), None)
    return [] if ch is None else [(a.arm, a.role, a.verdicts) for a in ch.arms]


def power_rows(data: SessionView) -> list[dict[str, Any]]:
    """Per arm and check: its verdict and the rate with its power ("n requests, k corrupted; ... p% ...")."""
    out = []
    for arm, role, verdicts in _verdicts(data):
        for gate, v in verdicts.items():
            power = (v.details or {}).get("power")
            if isinstance(power, Mapping) and power.get("text"):
                out.append({"arm": arm, "role": role, "gate": gate, "verdict": v.verdict, "text": power["text"],
                            "p": power.get("detectable_rate")})
    return out


def class_charts(data: SessionView) -> dict[str, Markup | None]:
    """Alpha and S (the arm's median decode rate over base's) per request class, one bar per spec arm."""
    tables: dict[str, dict[tuple[str, str], Mapping[str, Any]]] = {}
    for arm, _, verdicts in _verdicts(data):
        v = verdicts.get(f"{CHANNEL}:acceptance")
        rows = (v.details or {}).get("table") if v is not None else None
        if isinstance(rows, list) and rows:
            tables[arm] = {(str(r.get("attribute")), str(r.get("class"))): r for r in rows if isinstance(r, Mapping)}
    if not tables:
        return {"alpha": None, "speed": None}
    arms = list(tables)
    keys = list(dict.fromkeys(k for t in tables.values() for k in t))

    def series(field: str) -> list[tuple[str, list[float | None]]]:
        out = []
        for attr, cls in keys:
            vals = [tables[a].get((attr, cls), {}).get(field) for a in arms]
            out.append((f"{attr}={cls}", [float(x) if isinstance(x, (int, float)) else None for x in vals]))
        return out

    return {"alpha": charts.hbars(series("alpha"), arms, "Acceptance (alpha) per request class"),
            "speed": charts.hbars(series("S"), arms, "Decode rate per request class against base's (S)", "×")}


def volume_section(data: SessionView) -> dict[str, Any] | None:
    """What the volume partial reads; None when the session ran no volume replay."""
    if not _verdicts(data):
        return None
    return {"power": power_rows(data), **class_charts(data)}
