"""History across sessions: acceptance, speedup and verdicts per session and arm, with regression alerts.

Each (session, arm) becomes one `Point`, read from `report_data.build()`.
A point is compared with the previous *comparable* point: same model, same
arm name, same suite content (the hash of its probes' content hashes), and
trusted (the arm ran ok and has no INVALID/CONFOUNDED/CRASHED/HUNG validity).
A figure that moves beyond its tolerance raises an alert:

- acceptance (alpha, tau): a relative move beyond ``acceptance_tolerance``
  (default 5%, the relative tolerance vLLM's own acceptance-length test uses);
- speedup S: a relative move beyond the A/A noise floor learned in the two
  sessions (``noise_floor.throughput_spread``, the larger of the two); with no
  A/A control in either session the speed is not judged, and the point says so;
- verdicts: a probe that newly FAILs (and one that no longer does).

S is a same-session ratio, so comparing it across sessions is legitimate;
absolute tok/s is never compared across sessions (DESIGN.md mistake 6).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from observatory import charts
from observatory.report import environment
from observatory.report_data import build
from observatory.store import Store
from observatory.verdict import INVALID_CODES

DEFAULT_ACCEPTANCE_TOLERANCE = 0.05


@dataclass
class Point:
    """One arm of one session, with the figures history tracks."""

    session: int
    started_at: str | None
    model: str | None
    host: str | None
    suite_hash: str
    arm: str
    status: str | None
    validity: list[str]
    trusted: bool
    alpha: float | None
    tau: float | None
    S: float | None
    S_ci: list[float] | None
    spread: float | None
    verdicts: dict[str, int]
    failing: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass
class Alert:
    """A figure that moved beyond its tolerance since the previous comparable session."""

    session: int
    previous: int
    model: str | None
    arm: str
    figure: str
    before: Any
    after: Any
    change: float | None
    tolerance: float | None
    regression: bool
    message: str


def suite_hash(data: dict[str, Any]) -> str:
    """A hash of the session's probe content hashes (same probes, same hash)."""
    joined = ",".join(sorted(p["hash"] for p in data["probes"]))
    return hashlib.sha256(joined.encode()).hexdigest()[:12]


def session_points(data: dict[str, Any], arm: str | None = None) -> list[Point]:
    """The points of one session (optionally only arm ARM)."""
    s = data["session"]
    spread = next((a["noise_floor"].get("throughput_spread") for a in data["arms"] if a.get("noise_floor")), None)
    out = []
    for a in data["arms"]:
        if arm is not None and a["name"] != arm:
            continue
        codes = [v.get("code", "?") for v in a.get("validity") or []]
        acc, vs = a.get("acceptance") or {}, a.get("vs_base") or {}
        cells = [r["verdict"] for r in a["results"] if r["verdict"]]
        out.append(Point(
            session=s["id"], started_at=s.get("started_at"), model=s.get("model"), host=s.get("host"),
            suite_hash=suite_hash(data), arm=a["name"], status=a.get("status"), validity=codes,
            trusted=a.get("status") == "ok" and not any(c in INVALID_CODES for c in codes),
            alpha=acc.get("alpha"), tau=acc.get("tau"), S=vs.get("S"), S_ci=vs.get("ci"), spread=spread,
            verdicts=dict(Counter(cells)), failing=sorted(r["probe"] for r in a["results"] if r["verdict"] == "FAIL"),
        ))
    return out


def load_points(store: Store, model: str | None = None, arm: str | None = None, limit: int = 100) -> list[Point]:
    """Points of the latest LIMIT sessions, oldest first; MODEL matches as a case-insensitive substring."""
    points: list[Point] = []
    for s in reversed(store.sessions(limit)):
        data = build(store, s.id)
        if model and model.lower() not in (data["session"]["model"] or "").lower():
            continue
        points += session_points(data, arm)
    return points


def _relative(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before == 0:
        return None
    return after / before - 1.0


def _move(p: Point, prev: Point, figure: str, before: Any, after: Any, tol: float) -> Alert | None:
    change = _relative(before, after)
    if change is None or abs(change) <= tol:
        return None
    direction = "dropped" if change < 0 else "rose"
    return Alert(p.session, prev.session, p.model, p.arm, figure, before, after, change, tol, change < 0,
                 f"{p.arm}: {figure} {direction} {abs(change):.2%} ({before:.3f} -> {after:.3f}) "
                 f"since session {prev.session}, beyond the {tol:.2%} tolerance")


def compare(p: Point, prev: Point, acceptance_tolerance: float) -> list[Alert]:
    """Alerts for P against the previous comparable point PREV."""
    alerts = [x for x in (_move(p, prev, "alpha", prev.alpha, p.alpha, acceptance_tolerance),
                          _move(p, prev, "tau", prev.tau, p.tau, acceptance_tolerance)) if x]
    spreads = [x for x in (p.spread, prev.spread) if x is not None]
    if p.S is not None and prev.S is not None:
        if spreads:
            alert = _move(p, prev, "S", prev.S, p.S, max(spreads))
            if alert:
                alert.message += " (the A/A throughput spread)"
                alerts.append(alert)
        else:
            p.notes.append("speedup not judged: no A/A control in this or the previous session")
    new, fixed = set(p.failing) - set(prev.failing), set(prev.failing) - set(p.failing)
    if new:
        alerts.append(Alert(p.session, prev.session, p.model, p.arm, "verdicts", sorted(prev.failing),
                            sorted(p.failing), None, None, True,
                            f"{p.arm}: newly FAILs {', '.join(sorted(new))} (passed in session {prev.session})"))
    if fixed:
        alerts.append(Alert(p.session, prev.session, p.model, p.arm, "verdicts", sorted(prev.failing),
                            sorted(p.failing), None, None, False,
                            f"{p.arm}: no longer FAILs {', '.join(sorted(fixed))} (failed in session {prev.session})"))
    return alerts


def find_alerts(points: list[Point], acceptance_tolerance: float = DEFAULT_ACCEPTANCE_TOLERANCE) -> list[Alert]:
    """Compare every point with the previous comparable one (POINTS oldest first); adds notes saying why not."""
    alerts: list[Alert] = []
    for i, p in enumerate(points):
        if not p.trusted:
            p.notes.append(f"not compared: {p.status}{' ' + ','.join(p.validity) if p.validity else ''}")
            continue
        earlier = [q for q in points[:i] if q.model == p.model and q.arm == p.arm and q.trusted]
        same = [q for q in earlier if q.suite_hash == p.suite_hash]
        if not same:
            p.notes.append(f"suite changed since session {earlier[-1].session}: not compared" if earlier
                           else "first comparable session")
            continue
        alerts += compare(p, same[-1], acceptance_tolerance)
    return alerts


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _verdict_text(counts: dict[str, int]) -> str:
    return " · ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "—"


def print_history(points: list[Point], alerts: list[Alert], console: Console | None = None) -> None:
    """A rich table of the points, then the alerts."""
    console = console or Console()
    table = Table(title="History (oldest first)")
    for col in ("session", "started", "model", "arm", "status", "α", "τ", "S [95% CI]", "verdicts", "notes"):
        table.add_column(col, no_wrap=col in ("session", "started", "α", "τ"))
    for p in points:
        ci = f" [{p.S_ci[0]:.2f}–{p.S_ci[1]:.2f}]" if p.S_ci else ""
        started = (p.started_at or "—")[:16].replace("T", " ")
        table.add_row(str(p.session), Text(started), Text(Path(p.model or "—").name), Text(p.arm),
                      Text(p.status or "—", style="" if p.trusted else "bold magenta"),
                      _fmt(p.alpha), _fmt(p.tau), Text(_fmt(p.S) + ci), Text(_verdict_text(p.verdicts)),
                      Text("; ".join(p.notes)))
    console.print(table)
    if not alerts:
        console.print(Text("No figure moved beyond its tolerance.", style="green"))
    for a in alerts:
        style = "bold red" if a.regression else "green"
        console.print(Text(f"{'REGRESSION' if a.regression else 'moved'} (session {a.session}): {a.message}",
                           style=style))


def history_json(points: list[Point], alerts: list[Alert]) -> dict[str, Any]:
    """{"points": [...], "alerts": [...]}: what `history --json` prints."""
    return {"points": [asdict(p) for p in points], "alerts": [asdict(a) for a in alerts]}


def render_history(points: list[Point], alerts: list[Alert], out: Path | str) -> Path:
    """Write OUT/history.html: sparklines per model and arm, the table and the alerts."""
    out = Path(out)
    series: dict[tuple[str | None, str], list[Point]] = {}
    for p in points:
        series.setdefault((p.model, p.arm), []).append(p)
    rows = [{"model": m, "arm": arm, "n": len(ps), "last": ps[-1],
             **{f"{f}_html": charts.sparkline([getattr(q, f) if q.trusted else None for q in ps], f"{arm} {f}")
                for f in ("alpha", "tau", "S")}} for (m, arm), ps in series.items()]
    page = environment().get_template("history.html").render(
        series=rows, points=points, alerts=alerts, verdict_text=_verdict_text, root="")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "history.html"
    path.write_text(page, encoding="utf-8")
    return path
