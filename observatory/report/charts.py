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
- `intervals`: one point per arm with its 95% interval on a shared axis, the
  reference value (S = 1) and the A/A noise band shaded;
- `strip`: one coloured cell per item (the length sweep's verdict per prompt length);
- `sparkline`: a line for the history page with its axes (value range, first
  and last run), a noise band, and each point a link (None values leave gaps).

Colours of verdicts are `LEVEL_COLOURS` (the report's badge colours).
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from observatory.model.vocabulary import FAIL, INVALID, NOT_MEASURABLE, PASS, SKIP, UNJUDGED, WARN

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


def hbars(groups: Sequence[tuple[str, Sequence[float | str | None]]], series: Sequence[str], title: str,
          unit: str = "") -> Markup:
    """Horizontal bars: one group per label, one bar per series (None: no bar, "—"; a string: no bar, that text)."""
    label_w, plot_w, bar_h = 110, 330, 13
    group_h = bar_h * len(series) + 10
    top = 36
    height = top + group_h * len(groups) + 8
    width = label_w + plot_w + 70
    present = [float(v) for _, vs in groups for v in vs if v is not None and not isinstance(v, str)]
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
            if v is None or isinstance(v, str):
                body.append(_text(label_w + 4, y + bar_h - 3, v or "—", "start", 'fill="#666"'))
                continue
            w = plot_w * float(v) / vmax
            body.append(f'<rect x="{label_w}" y="{y:.1f}" width="{w:.1f}" height="{bar_h - 2}" '
                        f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)} {escape(series[j])}: '
                        f"{_fmt(float(v))} {escape(unit)}</title></rect>")
            body.append(_text(label_w + w + 4, y + bar_h - 3, f"{_fmt(float(v))} {unit}".strip(), "start"))
    return _svg(width, height, title, body)


def grouped_bars(levels: Sequence[str], arms: Sequence[str], values: Sequence[Sequence[float | None]],
                 title: str, unit: str = "", xlabel: str = "concurrency", vmax: float | None = None) -> Markup:
    """Vertical bars grouped by LEVELS, one bar per arm; VALUES[level][arm] (None: no bar)."""
    left, top, plot_h = 46, 40, 140
    bar_w = 18
    group_w = bar_w * len(arms) + 22
    width = max(left + group_w * len(levels) + 12, 120 + 110 * min(len(arms), 4), int(len(title) * 6.6) + 8)
    height = top + plot_h + 36
    present = [v for row in values for v in row if v is not None]
    if vmax is None:
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
    body.append(_text(left + group_w * len(levels) / 2, height - 6, xlabel, extra='fill="#666"'))
    return _svg(width, height, title, body)


LEVEL_COLOURS = {PASS: "#1a7f37", FAIL: "#cf222e", WARN: "#9a6700", INVALID: "#8250df",
                 UNJUDGED: "#8250df", NOT_MEASURABLE: "#8c959f", SKIP: "#8c959f"}


def intervals(rows: Sequence[tuple[str, float | None, Sequence[float] | None]], title: str, ref: float = 1.0,
              band: tuple[float, float] | None = None, unit: str = "×", band_label: str = "A/A noise") -> Markup:
    """One row per label: the value as a dot, its interval as a bar, a line at REF, BAND shaded (None: none,
    and BAND_LABEL says why).

    ROWS are (label, value, (low, high) or None); a None value is drawn as "not measured".
    """
    label_w, plot_w, row_h, top = 110, 320, 22, 40
    height = top + row_h * max(len(rows), 1) + 30
    width = label_w + plot_w + 80
    xs = [ref] + [float(x) for _, v, ci in rows for x in ([v] if v is not None else []) + list(ci or [])]
    if band:
        xs += list(band)
    lo, hi = min(xs), max(xs)
    pad = (hi - lo) * 0.08 or 0.1
    lo, hi = lo - pad, hi + pad

    def x(v: float) -> float:
        return label_w + plot_w * (v - lo) / (hi - lo)

    body = [_text(4, 13, title, "start", 'font-weight="600"')]
    y_end = top + row_h * max(len(rows), 1)
    if band:
        body.append(f'<rect x="{x(band[0]):.1f}" y="{top - 6}" width="{max(x(band[1]) - x(band[0]), 1):.1f}" '
                    f'height="{y_end - top + 6}" fill="#d0d7de" opacity="0.6"><title>{escape(band_label)}: '
                    f"{band[0]:.3f} to {band[1]:.3f}</title></rect>")
        body.append(f'<rect x="{label_w}" y="20" width="10" height="10" fill="#d0d7de"/>')
        body.append(_text(label_w + 14, 29, f"{band_label} {band[0]:.3f}–{band[1]:.3f}", "start"))
    elif band_label:
        body.append(_text(label_w, 29, band_label, "start", 'fill="#666"'))
    body.append(f'<line x1="{x(ref):.1f}" x2="{x(ref):.1f}" y1="{top - 6}" y2="{y_end}" stroke="#555" '
                'stroke-dasharray="3,3"/>')
    for tick in (lo + (hi - lo) * t for t in (0.0, 0.25, 0.5, 0.75, 1.0)):
        body.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{y_end}" y2="{y_end + 4}" stroke="#666"/>')
        body.append(_text(x(tick), y_end + 15, _fmt(tick), extra='fill="#666"'))
    body.append(_text(x(ref), y_end + 27, f"{_fmt(ref)}{unit}", extra='fill="#555"'))
    for i, (label, v, ci) in enumerate(rows):
        y = top + i * row_h + row_h / 2
        body.append(_text(label_w - 6, y + 4, label, "end"))
        if v is None:
            body.append(_text(label_w + 4, y + 4, "not measured", "start", 'fill="#666"'))
            continue
        if ci:
            body.append(f'<line x1="{x(float(ci[0])):.1f}" x2="{x(float(ci[1])):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                        f'stroke="{PALETTE[0]}" stroke-width="3"><title>{escape(label)}: 95% interval '
                        f"{float(ci[0]):.3f} to {float(ci[1]):.3f}</title></line>")
        body.append(f'<circle cx="{x(float(v)):.1f}" cy="{y:.1f}" r="4" fill="{PALETTE[3]}"><title>{escape(label)}: '
                    f"{float(v):.3f}{escape(unit)}</title></circle>")
        body.append(_text(label_w + plot_w + 6, y + 4, f"{float(v):.3f}{unit}", "start"))
    return _svg(width, height, title, body)


def strip(items: Sequence[tuple[str, str]], title: str, first_label: str = "", last_label: str = "") -> Markup:
    """One cell per (label, level), coloured by level (`LEVEL_COLOURS`), in the given order; each cell titled."""
    cell = max(2, min(12, 640 // max(len(items), 1)))
    width = max(cell * len(items) + 8, int(len(title) * 6.6) + 8)
    height = 58
    body = [_text(4, 13, title, "start", 'font-weight="600"')]
    for i, (label, level) in enumerate(items):
        colour = LEVEL_COLOURS.get(level, "#8c959f")
        body.append(f'<rect x="{4 + i * cell}" y="20" width="{cell}" height="18" fill="{colour}">'
                    f"<title>{escape(label)}: {escape(level)}</title></rect>")
    if items:
        body.append(_text(4, 52, first_label or items[0][0], "start", 'fill="#666"'))
        body.append(_text(4 + cell * len(items), 52, last_label or items[-1][0], "end", 'fill="#666"'))
    return _svg(width, height, title, body)


def sparkline(values: Sequence[float | None], title: str, width: int = 240, height: int = 74,
              band: Sequence[tuple[float, float] | None] | None = None, hrefs: Sequence[str | None] | None = None,
              xlabels: Sequence[str] | None = None) -> Markup:
    """A line over VALUES (oldest first) with a value axis and the first and last XLABELS under it.

    BAND: per point (low, high) drawn as a shaded band (the noise the history judges against);
    HREFS: per point a link (its session); None values leave gaps; the last point is marked.
    """
    present = [float(v) for v in values if v is not None]
    if not present:
        return Markup('<span class="muted">—</span>')
    bands = [b for b in (band or []) if b is not None]
    lo = min(present + [float(b[0]) for b in bands])
    hi = max(present + [float(b[1]) for b in bands])
    span = (hi - lo) or 1.0
    n = max(len(values) - 1, 1)
    left, top, bottom, right = 40, 6, 18, 6
    plot_w, plot_h = width - left - right, height - top - bottom

    def xy(i: int, v: float) -> tuple[float, float]:
        return left + plot_w * i / n, top + plot_h - plot_h * (v - lo) / span

    body = [f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#999"/>',
            f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#999"/>',
            _text(left - 3, top + 8, _fmt(hi), "end", 'fill="#666" font-size="9"'),
            _text(left - 3, top + plot_h, _fmt(lo), "end", 'fill="#666" font-size="9"')]
    if xlabels:
        body.append(_text(left, height - 4, xlabels[0], "start", 'fill="#666" font-size="9"'))
        if len(xlabels) > 1:
            body.append(_text(left + plot_w, height - 4, xlabels[-1], "end", 'fill="#666" font-size="9"'))
    if band:
        up = [xy(i, float(b[1])) for i, b in enumerate(band) if b is not None]
        down = [xy(i, float(b[0])) for i, b in enumerate(band) if b is not None]
        if len(up) > 1:
            pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in up + down[::-1])
            body.append(f'<polygon points="{pts}" fill="#d0d7de" opacity="0.7"><title>noise band</title></polygon>')
        for (x, y1), (_, y0) in zip(up, down):
            body.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0:.1f}" y2="{y1:.1f}" stroke="#afb8c1"/>')
    segments: list[list[str]] = [[]]
    for i, v in enumerate(values):
        if v is None:
            segments.append([])
            continue
        x, y = xy(i, float(v))
        segments[-1].append(f"{x:.1f},{y:.1f}")
    body += [f'<polyline points="{" ".join(s)}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5"/>'
             for s in segments if len(s) > 1]
    last = max(i for i, v in enumerate(values) if v is not None)
    for i, v in enumerate(values):
        if v is None:
            continue
        x, y = xy(i, float(v))
        tip = f"{xlabels[i] if xlabels and i < len(xlabels) else i}: {float(v):.3f}"
        dot = (f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{3.5 if i == last else 2.5}" '
               f'fill="{PALETTE[3] if i == last else PALETTE[0]}"><title>{escape(tip)}</title></circle>')
        href = hrefs[i] if hrefs and i < len(hrefs) else None
        body.append(f'<a href="{escape(href)}">{dot}</a>' if href else dot)
    label = f"{title}: " + ", ".join("—" if v is None else f"{float(v):.3f}" for v in values)
    return _svg(width, height, label, body)
