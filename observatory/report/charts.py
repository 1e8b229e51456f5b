"""Inline SVG charts, rendered in Python: no JavaScript, no external resources.

Every chart is a `markupsafe.Markup` string that templates insert with
``|safe`` under a ``*_html`` name. All text that reaches the SVG (arm names,
probe categories, labels) passes through `markupsafe.escape`, so an arm or
category name can never inject markup; numbers are formatted here.

Charts:

- `bars`: vertical bars on a 0..1 axis (per-position acceptance p_j and the
  accepted-per-draft histogram P(n = j));
- `hbars`: horizontal bars, one group per arm (single-stream and decode tok/s);
- `grouped_bars`: vertical bars grouped by concurrency level, one bar per arm;
- `sparkline`: a small line for the history page (None values leave gaps).
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

PALETTE = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _svg(width: int, height: int, title: str, body: list[str]) -> Markup:
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" {FONT}>'
            f"<title>{escape(title)}</title>")
    return Markup(head + "".join(body) + "</svg>")


def _text(x: float, y: float, s: object, anchor: str = "middle", extra: str = "") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" {extra}>{escape(str(s))}</text>'


def _nice_max(v: float) -> float:
    """A round axis maximum at or above V."""
    if v <= 0:
        return 1.0
    mag = 10 ** len(str(int(v)))
    for step in (0.1, 0.2, 0.25, 0.5, 1.0):
        if v <= mag * step:
            return float(mag * step)
    return float(mag)


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def bars(values: Sequence[float], labels: Sequence[str], title: str, color: str = PALETTE[0],
         xlabel: str = "") -> Markup:
    """Vertical bars on a 0..1 axis with the value printed above each bar."""
    left, top, plot_h, slot = 34, 34, 120, max(34, min(70, 260 // max(len(values), 1)))
    width = max(left + slot * len(values) + 12, int(len(title) * 6.6) + left)
    height = top + plot_h + 38
    body = [_text(left, 13, title, "start", 'font-weight="600"')]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        y = top + plot_h * (1 - tick)
        body.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        body.append(_text(left - 4, y + 4, f"{tick:.2f}", "end", 'fill="#666"'))
    for i, (v, label) in enumerate(zip(values, labels)):
        v = min(max(float(v), 0.0), 1.0)
        h = plot_h * v
        x = left + i * slot + slot * 0.15
        body.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{slot * 0.7:.1f}" '
                    f'height="{h:.1f}" fill="{color}"><title>{escape(label)}: {v:.3f}</title></rect>')
        body.append(_text(x + slot * 0.35, top + plot_h - h - 3, f"{v:.2f}"))
        body.append(_text(x + slot * 0.35, top + plot_h + 14, label))
    if xlabel:
        body.append(_text(left + slot * len(values) / 2, height - 6, xlabel, extra='fill="#666"'))
    return _svg(width, height, title, body)


def hbars(groups: Sequence[tuple[str, Sequence[float | None]]], series: Sequence[str], title: str,
          unit: str = "") -> Markup:
    """Horizontal bars: one group per label, one bar per series (None: no bar, "—")."""
    label_w, plot_w, bar_h = 110, 330, 13
    group_h = bar_h * len(series) + 10
    top = 36
    height = top + group_h * len(groups) + 8
    width = label_w + plot_w + 70
    present = [v for _, vs in groups for v in vs if v is not None]
    vmax = _nice_max(max(present)) if present else 1.0
    body = [_text(4, 13, title, "start", 'font-weight="600"')]
    for j, name in enumerate(series):
        x = label_w + j * 130
        body.append(f'<rect x="{x}" y="20" width="10" height="10" fill="{PALETTE[j % len(PALETTE)]}"/>')
        body.append(_text(x + 14, 29, name, "start"))
    for i, (label, vs) in enumerate(groups):
        y0 = top + i * group_h
        body.append(_text(label_w - 6, y0 + group_h / 2, label, "end"))
        for j, v in enumerate(vs):
            y = y0 + j * bar_h
            if v is None:
                body.append(_text(label_w + 4, y + bar_h - 3, "—", "start", 'fill="#666"'))
                continue
            w = plot_w * float(v) / vmax
            body.append(f'<rect x="{label_w}" y="{y:.1f}" width="{w:.1f}" height="{bar_h - 2}" '
                        f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)} {escape(series[j])}: '
                        f"{_fmt(float(v))} {escape(unit)}</title></rect>")
            body.append(_text(label_w + w + 4, y + bar_h - 3, f"{_fmt(float(v))} {unit}".strip(), "start"))
    return _svg(width, height, title, body)


def grouped_bars(levels: Sequence[str], arms: Sequence[str], values: Sequence[Sequence[float | None]],
                 title: str, unit: str = "") -> Markup:
    """Vertical bars grouped by LEVELS, one bar per arm; VALUES[level][arm] (None: no bar)."""
    left, top, plot_h = 46, 40, 140
    bar_w = 18
    group_w = bar_w * len(arms) + 22
    width = max(left + group_w * len(levels) + 12, 120 + 110 * min(len(arms), 4))
    height = top + plot_h + 36
    present = [v for row in values for v in row if v is not None]
    vmax = _nice_max(max(present)) if present else 1.0
    body = [_text(4, 13, title, "start", 'font-weight="600"')]
    for j, name in enumerate(arms):
        x = 4 + j * 110
        body.append(f'<rect x="{x}" y="20" width="10" height="10" fill="{PALETTE[j % len(PALETTE)]}"/>')
        body.append(_text(x + 14, 29, name, "start"))
    for tick in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - tick)
        body.append(f'<line x1="{left}" x2="{width - 8}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        body.append(_text(left - 4, y + 4, _fmt(vmax * tick), "end", 'fill="#666"'))
    for i, level in enumerate(levels):
        x0 = left + i * group_w + 11
        for j, v in enumerate(values[i]):
            if v is None:
                continue
            h = plot_h * float(v) / vmax
            body.append(f'<rect x="{x0 + j * bar_w:.1f}" y="{top + plot_h - h:.1f}" width="{bar_w - 3}" '
                        f'height="{h:.1f}" fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(arms[j])} at '
                        f"{escape(level)}: {_fmt(float(v))} {escape(unit)}</title></rect>")
        body.append(_text(x0 + bar_w * len(arms) / 2, top + plot_h + 14, level))
    body.append(_text(left + group_w * len(levels) / 2, height - 6, "concurrency", extra='fill="#666"'))
    return _svg(width, height, title, body)


def sparkline(values: Sequence[float | None], title: str, width: int = 140, height: int = 28) -> Markup:
    """A small line over VALUES (oldest first); None leaves a gap; the last point is marked."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return Markup('<span class="muted">—</span>')
    lo, hi = min(present), max(present)
    span = (hi - lo) or 1.0
    n = max(len(values) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return 3 + (width - 6) * i / n, height - 4 - (height - 8) * (v - lo) / span

    segments: list[list[str]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            segments.append([])
            continue
        x, y = xy(i, float(v))
        segments[-1].append(f"{x:.1f},{y:.1f}")
    body = [f'<polyline points="{" ".join(s)}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5"/>'
            for s in segments if len(s) > 1]
    last = max(i for i, v in enumerate(values) if v is not None)
    x, y = xy(last, float(values[last]))  # type: ignore[arg-type]
    body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="{PALETTE[3]}"/>')
    label = f"{title}: " + ", ".join("—" if v is None else f"{float(v):.3f}" for v in values)
    return _svg(width, height, label, body)
