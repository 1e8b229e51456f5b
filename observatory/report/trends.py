"""History across sessions: acceptance, speedup and verdicts per session and arm, with regression alerts.

Each (session, arm) becomes one `Point`, read from the per-arm summaries
stored when the session was judged (`observatory.judge.summaries`).
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
absolute tok/s is never compared across sessions (docs/design.md mistake 6).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from observatory.judge.summaries import DEFAULT_ACCEPTANCE_TOLERANCE, arm_summaries
from observatory.model.read_model import SessionView
from observatory.model.vocabulary import FAIL, INVALID, NOT_DISCRIMINATING, PASS, SKIP, WARN, rank
from observatory.report import charts
from observatory.report.console import VERBOSE, make_console, verbosity
from observatory.report.html import environment
from observatory.report.summarize import read_summaries
from observatory.store.session_store import Store


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
    ttft_ms: float | None = None
    engine_version: str | None = None
    image: str | None = None
    # the session's verdict (the nightly gate's); None while the session still runs
    session_verdict: str | None = None


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


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") + "Z" if t else None


def _point(x: dict[str, Any], session: int, started_at: str | None, host: str | None,
           verdict: str | None) -> Point:
    ci = [x["S_lo"], x["S_hi"]] if x["S_lo"] is not None and x["S_hi"] is not None else None
    return Point(session=session, started_at=started_at, model=x["model"], host=host, suite_hash=x["suite_hash"],
                 arm=x["arm"], status=x["status"], validity=list(x["validity"] or []), trusted=bool(x["trusted"]),
                 alpha=x["alpha"], tau=x["tau"], S=x["S"], S_ci=ci, spread=x["spread"],
                 verdicts=dict(x["verdicts"] or {}), failing=list(x["failing"] or []), ttft_ms=x["ttft_ms"],
                 engine_version=x["engine_version"], image=x["image"], session_verdict=verdict)


def session_points(data: SessionView, arm: str | None = None) -> list[Point]:
    """The points of one `report_data.build` view (optionally only arm ARM)."""
    s = data.session
    return [_point(x, s.id, s.started_at, s.host, None)
            for x in arm_summaries(data) if arm is None or x["arm"] == arm]


def load_points(store: Store, model: str | None = None, arm: str | None = None, limit: int = 100) -> list[Point]:
    """Points of the latest LIMIT sessions whose model contains MODEL (case-insensitive), oldest first.

    Read from the stored summaries (`observatory.judge.summaries`), built once for
    sessions judged before summaries existed.
    """
    points = []
    for x in read_summaries(store, model, arm, limit):
        verdict = x["session_verdict"] if x["verdict_status"] == x["session_status"] else None
        points.append(_point(x, x["session_id"], _iso(x["started_at"]), x["host"], verdict))
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
    """Compare every point with the previous comparable one (POINTS oldest first); adds notes saying why not.

    One pass: the latest trusted point per (model, arm) and per (model, arm,
    suite) is kept in a dict as the points go by.
    """
    alerts: list[Alert] = []
    last: dict[tuple[str | None, str], Point] = {}
    last_same_suite: dict[tuple[str | None, str, str], Point] = {}
    for p in points:
        if not p.trusted:
            p.notes.append(f"not compared: {p.status}{' ' + ','.join(p.validity) if p.validity else ''}")
            continue
        key = (p.model, p.arm)
        earlier = last.get(key)
        same = last_same_suite.get((*key, p.suite_hash))
        last[key] = last_same_suite[(*key, p.suite_hash)] = p
        if same is None:
            p.notes.append(f"suite changed since session {earlier.session}: not compared" if earlier
                           else "first comparable session")
            continue
        alerts += compare(p, same, acceptance_tolerance)
    return alerts


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _verdict_text(counts: dict[str, int]) -> str:
    return " · ".join(f"{n} {v}" for v, n in sorted(counts.items())) or "—"


# Rows of the terminal table: rich lays out about 300 rows a second, and
# thousands of rows on a terminal help nobody (--json and --out have them all).
TABLE_ROWS = 200


def _short_verdicts(counts: dict[str, int]) -> str:
    """Verdict counts in a few characters, worst first: ``4F 1N 8P`` (F FAIL, I INVALID, W WARN, N NOT_DISCRIMINATING,
    P PASS, S SKIP; other levels by name)."""
    letters = {FAIL: "F", INVALID: "I", WARN: "W", NOT_DISCRIMINATING: "N", PASS: "P", SKIP: "S"}
    return " ".join(f"{n}{letters.get(v, ' ' + v)}" for v, n in sorted(counts.items(), key=lambda x: rank(x[0]))) or "—"


def print_history(points: list[Point], alerts: list[Alert], console: Console | None = None) -> None:
    """A table of the latest TABLE_ROWS points (one line each: no figure is ever cut), each point's notes under
    it, then every alert.

    Fits 80 columns: numbers never wrap or shrink to an ellipsis; the model goes in the title when the
    points share one; verdict counts are letters (``4F 8P``: the key is printed under the table)."""
    from rich import box

    console = console or make_console()
    shown = points[-TABLE_ROWS:]
    models = {Path(p.model or "—").name for p in shown}
    one_model = len(models) == 1
    days = sorted({(p.started_at or "")[:10] for p in shown if p.started_at})
    title = "History (oldest first" + (f", {days[0]}" + (f" to {days[-1]}" if days[-1] != days[0] else "") + " UTC"
                                       if days else "") + ")" + (f": model {next(iter(models))}" if one_model else "")
    if len(shown) != len(points):
        title += f"; the latest {len(shown)} of {len(points)} points (all of them with --json or --out DIR)"
    console.print(Text(title, style="italic"), soft_wrap=True)  # one line, however narrow the table
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    cols = ["id", "started", *([] if one_model else ["model"]), "arm", "status", "α", "τ",
            "S [95% CI]", "verdicts"]
    for col in cols:
        table.add_column(col, no_wrap=col != "verdicts", justify="right" if col in ("α", "τ") else "left")
    notes: list[str] = []
    for p in shown:
        ci = f" [{p.S_ci[0]:.2f}–{p.S_ci[1]:.2f}]" if p.S_ci else ""
        started = (p.started_at or "—")[5:16].replace("T", " ") if p.started_at else "—"  # the year is in the title
        status = (p.status or "—") if p.trusted or p.status != "ok" else ",".join(dict.fromkeys(p.validity)) or "untrusted"
        cells: list[str | Text] = [str(p.session), Text(started), *([] if one_model else [Text(Path(p.model or "—").name)]),
                 Text(p.arm), Text(status, style="" if p.trusted else "bold magenta"),
                 _fmt(p.alpha), _fmt(p.tau), Text(_fmt(p.S, 2) + ci), Text(_short_verdicts(p.verdicts))]
        table.add_row(*cells)
        if p.notes:
            notes.append(f"  {p.session} {p.arm}: {'; '.join(p.notes)}")
    console.print(table)
    console.print(Text("verdicts: F FAIL, I INVALID, W WARN, N NOT_DISCRIMINATING, P PASS, S SKIP", style="dim"))
    if notes:
        console.print(Text("notes:", style="dim"))
        for line in notes if verbosity() >= VERBOSE else notes[-20:]:
            console.print(Text(line, style="dim"), soft_wrap=True)
        if len(notes) > 20 and verbosity() < VERBOSE:
            console.print(Text(f"  ... {len(notes) - 20} earlier notes (-v shows them all)", style="dim"))
    if not alerts:
        console.print(Text("No figure moved beyond its tolerance.", style="green"))
    for a in alerts:
        style = "bold red" if a.regression else "green"
        console.print(Text(f"{'REGRESSION' if a.regression else 'moved'} (session {a.session}): {a.message}",
                           style=style), soft_wrap=True)


def history_json(points: list[Point], alerts: list[Alert]) -> dict[str, Any]:
    """{"points": [...], "alerts": [...]}: what `history --json` prints."""
    return {"points": [asdict(p) for p in points], "alerts": [asdict(a) for a in alerts]}


def _band(p: Point, figure: str, tolerance: float) -> tuple[float, float] | None:
    """The noise band a trend point is judged in: alpha and tau +- the relative acceptance tolerance, S its 95% CI."""
    if not p.trusted:
        return None
    if figure == "S":
        return (float(p.S_ci[0]), float(p.S_ci[1])) if p.S_ci and len(p.S_ci) == 2 else None
    v = getattr(p, figure)
    return None if v is None else (float(v) * (1 - tolerance), float(v) * (1 + tolerance))


def render_history(points: list[Point], alerts: list[Alert], out: Path | str,
                   tolerance: float = DEFAULT_ACCEPTANCE_TOLERANCE) -> Path:
    """Write OUT/history.html: a trend per model and arm (axes, noise band, each point linked to its run's row),
    the table and the alerts."""
    out = Path(out)
    series: dict[tuple[str | None, str], list[tuple[int, Point]]] = {}
    for i, p in enumerate(points):
        series.setdefault((p.model, p.arm), []).append((i, p))
    rows = [{"model": m, "arm": arm, "n": len(ps), "last": ps[-1][1],
             **{f"{f}_html": charts.sparkline([getattr(q, f) if q.trusted else None for _, q in ps], f"{arm} {f}",
                                              band=[_band(q, f, tolerance) for _, q in ps],
                                              hrefs=[f"#run-{i}" for i, _ in ps],
                                              xlabels=[f"s{q.session}" for _, q in ps])
                for f in ("alpha", "tau", "S")}} for (m, arm), ps in series.items()]
    page = environment().get_template("history.html").render(
        series=rows, points=points, alerts=alerts, verdict_text=_verdict_text, root="")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "history.html"
    path.write_text(page, encoding="utf-8")
    return path
