"""Hand-written SVG for the static charts (no plotting dependency): stacked bars, a line chart.

Every label passes through ``esc``; numbers are formatted here, so nothing from a trace reaches
the markup unescaped.
"""

from __future__ import annotations

import html

from torchdoctor.report.html_model import Bars, Series
from torchdoctor.units import fmt_bytes

COLORS = {
    # device busy parts and kernel categories (timeline)
    "busy:compute": "#3b7dd8",
    "busy:communication": "#8e44ad",
    "busy:memcpy_h2d": "#e67e22",
    "busy:memcpy_d2h": "#d35400",
    "busy:memcpy_d2d": "#f0a35e",
    "busy:memcpy_other": "#c98b4f",
    "busy:memset": "#b7950b",
    "gemm": "#2e6fd0",
    "convolution": "#1f9bb5",
    "attention": "#5b4fd6",
    "elementwise": "#6fa8dc",
    "reduction": "#45818e",
    "other": "#7f95b3",
    "communication": "#8e44ad",
    "memcpy": "#e67e22",
    "memset": "#b7950b",
    # idle causes
    "idle:data_loading": "#d62728",
    "idle:synchronization": "#ff7f0e",
    "idle:host_overhead": "#e7ba52",
    "idle:short_gaps": "#c7c7c7",
    "idle:collective_wait": "#9467bd",
    "idle:input_pipeline": "#f7b6d2",
    "idle:dependency_wait": "#8c564b",
    "idle:not_recorded": "#dbdbdb",
    "cpu:input_pipeline": "#f7b6d2",
    # CPU side
    "cpu:cpu_operators": "#3b7dd8",
    "cpu:communication": "#8e44ad",
    "cpu:data_loading": "#d62728",
    "cpu:other": "#c7c7c7",
    "cpu:data_wait": "#d62728",
    "cpu:sync": "#ff7f0e",
    "cpu:launch": "#2ca02c",
    "cpu:op": "#9ecae1",
}
"""Colour per key; the timeline script receives the same table."""


def esc(text: object) -> str:
    """HTML-escape any value (quotes included, so it is safe inside attributes too)."""
    return html.escape(str(text), quote=True)


def label(key: str) -> str:
    """A colour key as words: a breakdown part by its label in every command
    (``idle:host_overhead`` -> ``idle: host overhead (launched late)``), any other key with its
    underscores as spaces."""
    from torchdoctor.analysis.breakdown_terms import label as part_label

    return part_label(key)


def legend(keys: list[str]) -> str:
    items = "".join(
        f'<span class="key"><i style="background:{COLORS.get(k, "#999")}"></i>{esc(label(k))}</span>'
        for k in keys
    )
    return f'<div class="legend">{items}</div>'


def stacked_bars(bars: Bars, width: int = 900) -> str:
    """One horizontal bar per row, segments as filled paths, scaled to the longest bar."""
    row_h, gap, left, right = 22, 6, 90, 80
    longest = max((sum(v) for v in bars.values_ms), default=0.0) or 1.0
    scale = (width - left - right) / longest
    height = len(bars.labels) * (row_h + gap) + 24
    out = [
        f'<svg class="bars" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="step breakdown">'
    ]
    for i, (name, vals) in enumerate(zip(bars.labels, bars.values_ms, strict=True)):
        y = i * (row_h + gap) + 4
        out.append(f'<text x="{left - 8}" y="{y + 15}" text-anchor="end">{esc(name)}</text>')
        x = float(left)
        for part, ms in zip(bars.parts, vals, strict=True):
            w = ms * scale
            if w <= 0:
                continue
            out.append(
                f'<path d="M{x:.2f} {y}h{w:.2f}v{row_h}h{-w:.2f}Z" fill="{COLORS.get(part, "#999")}">'
                f"<title>{esc(name)}: {esc(label(part))} {ms:.3f} ms</title></path>"
            )
            x += w
        out.append(f'<text x="{x + 6:.2f}" y="{y + 15}">{sum(vals):.2f} ms</text>')
    out.append("</svg>")
    used = [p for j, p in enumerate(bars.parts) if any(v[j] > 0 for v in bars.values_ms)]
    return "".join(out) + legend(used)


def line_chart(series: Series, width: int = 900, height: int = 260) -> str:
    """Memory over time: one step-line path per series, axes with min/max labels."""
    left, bottom, top = 80, 30, 10
    xmax = max(series.x_ms[-1], 1e-9)
    ys = [v for line in series.lines.values() for v in line if v >= 0]
    ymax = max(ys, default=1.0) or 1.0
    sx = (width - left - 10) / xmax
    sy = (height - bottom - top) / ymax
    colors = {"allocated": "#3b7dd8", "reserved": "#e67e22"}
    out = [
        f'<svg class="memory" viewBox="0 0 {width} {height}" width="100%" role="img" '
        f'aria-label="memory over time">',
        f'<path class="axis" d="M{left} {top}V{height - bottom}H{width - 10}" fill="none"/>',
        f'<text x="{left - 6}" y="{top + 10}" text-anchor="end">{fmt_bytes(int(ymax))}</text>',
        f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end">0</text>',
        f'<text x="{width - 10}" y="{height - 8}" text-anchor="end">{xmax:.1f} ms</text>',
        f'<text x="{left}" y="{height - 8}">0 ms</text>',
    ]
    for name, line in series.lines.items():
        pts = [(x, y) for x, y in zip(series.x_ms, line, strict=True) if y >= 0]
        if not pts:
            continue
        d = "M" + " L".join(f"{left + x * sx:.1f} {height - bottom - y * sy:.1f}" for x, y in pts)
        out.append(
            f'<path class="line" d="{d}" fill="none" stroke="{colors.get(name, "#555")}" '
            f'stroke-width="1.5"><title>{esc(name)}</title></path>'
        )
    out.append("</svg>")
    keys = "".join(
        f'<span class="key"><i style="background:{colors.get(n, "#555")}"></i>{esc(n)}</span>'
        for n in series.lines
    )
    return "".join(out) + f'<div class="legend">{keys}</div>'
