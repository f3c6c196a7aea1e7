"""Small inline SVG charts, written by hand: no JavaScript, no network, readable in any browser.

Each function returns one `<svg>` element as a string. Every mark carries a CSS class and a
`<title>` (the browser's tooltip), so tests and readers can find it in the DOM.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

FONT = "font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif"
PALETTE = ("#2563eb", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#64748b")


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str = PALETTE[0]
    step: bool = False  # draw as a staircase (value holds until the next point)
    dash: str | None = None


@dataclass
class Marker:
    x: float
    y: float
    css: str  # e.g. "candidate accepted"
    title: str
    shape: str = "circle"  # circle | diamond
    fill: str = "#10b981"
    hollow: bool = False


@dataclass
class Frame:
    """Maps data coordinates into the plot area of a `width` x `height` chart."""

    width: int
    height: int
    x0: float
    x1: float
    y0: float
    y1: float
    left: int = 56
    right: int = 16
    top: int = 28
    bottom: int = 40
    ticks: list[float] = field(default_factory=list)

    def px(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return self.left + (x - self.x0) / span * (self.width - self.left - self.right)

    def py(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.height - self.bottom - (y - self.y0) / span * (self.height - self.top - self.bottom)


def _n(v: float) -> str:
    return f"{v:.1f}"


def nice_ticks(lo: float, hi: float, most: int = 5) -> list[float]:
    """Round ticks from `lo` to at least `hi`: a step of 1, 2, 2.5 or 5 times a power of ten, at
    most `most` + 1 of them (readable labels: 0, 0.005, 0.01, ... not 0.0063, 0.013)."""
    span = max(hi - lo, 1e-12)
    raw = span / max(1, most)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))
    n = math.ceil(span / step - 1e-9)
    return [round(lo + k * step, 12) for k in range(n + 1)]


def fmt_tick(v: float) -> str:
    if abs(v) >= 1000:
        return f"{v / 1000:g}k"
    return f"{v:g}" if v == int(v) else f"{v:.4g}"


def _axes(f: Frame, x_ticks: Sequence[float], y_ticks: Sequence[float], x_label: str, y_label: str,
          y_fmt=fmt_tick, x_fmt=fmt_tick) -> list[str]:
    out = ['<g class="axes" stroke="#cbd5e1" stroke-width="1">']
    for y in y_ticks:
        out.append(f'<line class="grid" x1="{_n(f.left)}" x2="{_n(f.width - f.right)}" y1="{_n(f.py(y))}" '
                   f'y2="{_n(f.py(y))}" stroke="#e2e8f0"/>')
    out.append(f'<line x1="{_n(f.left)}" x2="{_n(f.left)}" y1="{_n(f.top)}" y2="{_n(f.height - f.bottom)}"/>')
    out.append(f'<line x1="{_n(f.left)}" x2="{_n(f.width - f.right)}" y1="{_n(f.height - f.bottom)}" '
               f'y2="{_n(f.height - f.bottom)}"/></g>')
    out.append(f'<g class="labels" font-size="11" fill="#475569" style="{FONT}">')
    for y in y_ticks:
        out.append(f'<text x="{_n(f.left - 6)}" y="{_n(f.py(y) + 4)}" text-anchor="end">{escape(y_fmt(y))}</text>')
    for x in x_ticks:
        out.append(f'<text x="{_n(f.px(x))}" y="{_n(f.height - f.bottom + 15)}" text-anchor="middle">'
                   f'{escape(x_fmt(x))}</text>')
    out.append(f'<text x="{_n((f.left + f.width - f.right) / 2)}" y="{_n(f.height - 6)}" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text transform="translate(14 {_n((f.top + f.height - f.bottom) / 2)}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text></g>')
    return out


def _polyline(f: Frame, s: Series) -> str:
    pts = sorted(s.points)
    if s.step:
        stairs: list[tuple[float, float]] = []
        for i, (x, y) in enumerate(pts):
            if i:
                stairs.append((x, pts[i - 1][1]))
            stairs.append((x, y))
        pts = stairs
    coords = " ".join(f"{_n(f.px(x))},{_n(f.py(y))}" for x, y in pts)
    dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
    last = f"{pts[-1][1]:.6g}" if pts else ""
    return (f'<polyline class="series" data-series="{escape(s.name)}" data-last="{last}" points="{coords}" fill="none" '
            f'stroke="{s.color}" stroke-width="2"{dash}><title>{escape(s.name)}</title></polyline>')


def shape(x: float, y: float, kind: str, color: str, hollow: bool, css: str = "", inner: str = "") -> str:
    """One mark: a circle or a diamond, filled with `color` or hollow (white inside, `color` outline).
    Chart marks and their legend entries are drawn by this same function, so they always match."""
    fill = "#ffffff" if hollow else color
    cls = f' class="{css}"' if css else ""
    if kind == "diamond":
        r = 6.5
        pts = f"{_n(x)},{_n(y - r)} {_n(x + r)},{_n(y)} {_n(x)},{_n(y + r)} {_n(x - r)},{_n(y)}"
        return f'<polygon{cls} points="{pts}" fill="{fill}" stroke="{color}" stroke-width="2">{inner}</polygon>'
    return f'<circle{cls} cx="{_n(x)}" cy="{_n(y)}" r="5.5" fill="{fill}" stroke="{color}" stroke-width="2">{inner}</circle>'


def _marker(f: Frame, m: Marker) -> str:
    return shape(f.px(m.x), f.py(m.y), m.shape, m.fill, m.hollow, m.css, f"<title>{escape(m.title)}</title>")


@dataclass(frozen=True)
class LegendItem:
    """A legend entry: a line (`kind="line"`, optionally dashed) or a mark (circle / diamond, hollow)."""

    label: str
    color: str
    kind: str = "line"  # line | circle | diamond
    hollow: bool = False
    dash: str | None = None


def legend_for(markers: Sequence[Marker], label) -> list[LegendItem]:
    """One entry per distinct mark style present, in order of appearance, labelled by `label(marker)`."""
    seen: dict[tuple[str, str, bool], LegendItem] = {}
    for m in markers:
        key = (m.shape, m.fill, m.hollow)
        if key not in seen:
            seen[key] = LegendItem(label(m), m.fill, m.shape, m.hollow)
    return list(seen.values())


def _legend(items: Sequence[LegendItem], x: float, y: float, width: float) -> list[str]:
    """Entries left to right, wrapping to a new row before `width`."""
    out = [f'<g class="legend" font-size="11" fill="#334155" style="{FONT}">']
    x0 = x
    for it in items:
        w = 30 + 6.2 * len(it.label)
        if x + w > width and x > x0:
            x, y = x0, y + 16
        if it.kind == "line":
            dash = f' stroke-dasharray="{it.dash}"' if it.dash else ""
            out.append(f'<line class="legend-line" x1="{_n(x)}" x2="{_n(x + 16)}" y1="{_n(y - 4)}" y2="{_n(y - 4)}" '
                       f'stroke="{it.color}" stroke-width="2"{dash}/>')
        else:
            out.append(shape(x + 8, y - 4, it.kind, it.color, it.hollow, "legend-mark"))
        out.append(f'<text x="{_n(x + 21)}" y="{_n(y)}">{escape(it.label)}</text>')
        x += w
    out.append("</g>")
    return out


def line_chart(chart_id: str, title: str, series: Sequence[Series], markers: Sequence[Marker] = (),
               x_label: str = "step", y_label: str = "", y_range: tuple[float, float] | None = None,
               legend: Sequence[LegendItem] = (), width: int = 760, height: int = 280,
               vlines: Sequence[tuple[float, str]] = (), x_tick_labels: dict[float, str] | None = None) -> str:
    """Lines, marks, and `vlines` (x, label): dashed vertical lines such as epoch boundaries. X ticks
    are whole numbers (at most one per ~60 px); `x_tick_labels` names some of them ("end")."""
    xs = [p[0] for s in series for p in s.points] + [m.x for m in markers] + [x for x, _ in vlines]
    ys = [p[1] for s in series for p in s.points] + [m.y for m in markers]
    x0, x1 = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x1 - x0 < 1:
        x1 = x0 + 1
    y_ticks = nice_ticks(*y_range, 4) if y_range else nice_ticks(0.0, max(ys) if ys and max(ys) > 0 else 1.0, 4)
    y0, y1 = y_ticks[0], y_ticks[-1]
    rows = 1 + (len(legend) > 6)
    f = Frame(width, height, x0 - 0.3, x1 + 0.3, y0, y1, top=28 + 16 * (rows - 1))
    x_ticks = [float(x) for x in range(math.ceil(x0), math.floor(x1) + 1)]
    most = max(2, (width - f.left - f.right) // 60)
    if len(x_ticks) > most:
        stride = -(-len(x_ticks) // most)
        x_ticks = x_ticks[::stride]
    labels = x_tick_labels or {}
    parts = [f'<svg class="chart" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMidYMid meet" '
             f'style="max-width:{width}px">', f"<title>{escape(title)}</title>"]
    parts += _axes(f, x_ticks, y_ticks, x_label, y_label, x_fmt=lambda v: labels.get(v, fmt_tick(v)))
    for x, label in vlines:
        parts.append(f'<g class="vline"><line x1="{_n(f.px(x))}" x2="{_n(f.px(x))}" y1="{_n(f.top)}" '
                     f'y2="{_n(f.height - f.bottom)}" stroke="#94a3b8" stroke-width="1" stroke-dasharray="4 3"/>'
                     f'<text x="{_n(f.px(x) + 4)}" y="{_n(f.top + 11)}" font-size="11" fill="#64748b" '
                     f'style="{FONT}">{escape(label)}</text></g>')
    parts += [_polyline(f, s) for s in series if s.points]
    parts += [_marker(f, m) for m in markers]
    if legend:
        parts += _legend(legend, f.left + 4, 16, width - f.right)
    if not xs:
        parts.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#64748b" '
                     f'style="{FONT}">no data yet</text>')
    parts.append("</svg>")
    return "".join(parts)


def score_color(v: float) -> str:
    """0 -> red, 0.5 -> amber, 1 -> green (linear in RGB between the three)."""
    v = max(0.0, min(1.0, v))
    lo, mid, hi = (220, 38, 38), (245, 180, 40), (22, 163, 74)
    a, b, t = (lo, mid, v * 2) if v < 0.5 else (mid, hi, (v - 0.5) * 2)
    return "#" + "".join(f"{round(a[i] + (b[i] - a[i]) * t):02x}" for i in range(3))


def heatmap(chart_id: str, title: str, rows: Sequence[str], cols: Sequence[str],
            cells: dict[tuple[str, str], float], col_notes: dict[str, str] | None = None, cell: int = 22,
            links: dict[tuple[str, str], str] | None = None) -> str:
    """Rows x columns of scores in [0, 1]; a missing cell is drawn grey and marked `missing`. A cell
    in `links` is a link to that fragment of the page (the rollouts behind it)."""
    label_w = min(220, 12 + 7 * max((len(r) for r in rows), default=4))
    top = 64
    width = label_w + cell * len(cols) + 20
    height = top + cell * len(rows) + 12
    parts = [f'<svg class="chart heatmap" id="{escape(chart_id)}" xmlns="http://www.w3.org/2000/svg" role="img" '
             f'viewBox="0 0 {width} {height}" width="{width}" height="{height}">', f"<title>{escape(title)}</title>",
             f'<g font-size="11" fill="#334155" style="{FONT}">']
    for j, c in enumerate(cols):
        x = label_w + j * cell + cell / 2
        note = (col_notes or {}).get(c, "")
        parts.append(f'<text transform="translate({_n(x + 4)} {top - 6}) rotate(-60)">{escape(c)}'
                     f'<title>{escape(c + (": " + note if note else ""))}</title></text>')
    for i, r in enumerate(rows):
        y = top + i * cell
        short = r if len(r) <= 30 else r[:28] + "…"
        parts.append(f'<text x="{label_w - 6}" y="{_n(y + cell / 2 + 4)}" text-anchor="end">{escape(short)}'
                     f'<title>{escape(r)}</title></text>')
        for j, c in enumerate(cols):
            x = label_w + j * cell
            v = cells.get((r, c))
            if v is None:
                parts.append(f'<rect class="cell missing" x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" '
                             f'fill="#e2e8f0" stroke="#cbd5e1" stroke-dasharray="2 2"><title>{escape(r)} / {escape(c)}: not run</title></rect>')
            else:
                rect = (f'<rect class="cell" x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" rx="2" '
                        f'fill="{score_color(v)}"><title>{escape(r)} / {escape(c)}: {v:.2f}'
                        f'{" (open its rollouts)" if links and (r, c) in links else ""}</title></rect>')
                href = (links or {}).get((r, c))
                parts.append(f'<a class="cell-link" href="#{escape(href)}">{rect}</a>' if href else rect)
    parts.append("</g></svg>")
    return "".join(parts)
