"""Presenting a comparison: plain text, JSON and the HTML page's data."""

from __future__ import annotations

from typing import Any

from torchdoctor.compare.diff import Comparison, Delta
from torchdoctor.compare.stats import ALPHA


def _label(key: str) -> str:
    return key.replace("_", " ").replace(":", ": ")


def _row(d: Delta, name_width: int = 60) -> str:
    name = d.name if len(d.name) <= name_width else d.name[: name_width - 1] + "…"
    return f"  {name:<{name_width}} {d.base_ms:9.3f} {d.new_ms:9.3f} {d.delta_ms:+9.3f}"


def render_text(c: Comparison, max_slower_pct: float | None = None, top: int = 10) -> str:
    """The comparison as lines of text (ms per step throughout)."""
    s = c.steps
    lines = [
        f"BASE {c.base.path} ({c.base.kind}, {s.n_base} steps)",
        f"NEW  {c.new.path} ({c.new.kind}, {s.n_new} steps)",
        *(f"warning: {w}" for w in c.warnings),
        "",
        c.verdict,
        *summary_lines(c, max_slower_pct),
    ]
    head = f"  {'':<60} {'BASE':>9} {'NEW':>9} {'delta':>9}"
    for title, rows in _sections(c, top):
        if rows:
            lines += ["", f"{title} (ms per step):", head, *(_row(d) for d in rows)]
    lines += _finding_lines(c)
    for side in (c.base, c.new):
        lines += [f"note ({'BASE' if side is c.base else 'NEW'}): {n}" for n in side.notes]
    return "\n".join(lines) + "\n"


def summary_lines(c: Comparison, max_slower_pct: float | None) -> list[str]:
    """The statistics, the throughput and the gate's outcome, one line each."""
    s = c.steps
    lines = [
        f"step time: median ratio {s.ratio:.3f} ({s.confidence:.0%} bootstrap interval "
        f"{s.ratio_low:.3f}-{s.ratio_high:.3f}); Mann-Whitney U p = {s.p_value:.3g} two-sided, "
        f"{s.test.p_new_slower:.3g} for NEW slower ({s.test.method})"
    ]
    if c.throughput_change is not None:
        lines.append(f"throughput: {c.throughput_change:+.1%}")
    if max_slower_pct is not None:
        lines.append(
            f"gate --fail-if-slower {max_slower_pct:g}%: "
            + ("FAILED" if c.gate(max_slower_pct) else "passed")
            + f" (change {s.change_pct:+.1f}% against {max_slower_pct:g}% allowed; the gate's "
            f"one-sided test that NEW is slower: p = {s.test.p_new_slower:.3g}, "
            f"{'beyond' if s.slower_beyond_noise else 'within'} the noise)"
        )
    return lines


def _sections(c: Comparison, top: int) -> list[tuple[str, list[Delta]]]:
    """Each table's title and its first ``top`` rows."""
    return [
        (
            "breakdown of the mean step",
            [Delta(_label(d.name), d.base_ms, d.new_ms) for d in c.breakdown],
        ),
        ("kernels that moved most", c.kernels_moved[:top]),
        ("kernels added", c.kernels_added[:top]),
        ("kernels removed", c.kernels_removed[:top]),
        ("operators that moved most (inclusive CPU time)", c.operators_moved[:top]),
    ]


def _finding_lines(c: Comparison) -> list[str]:
    out = []
    for word, items in (("appeared", c.findings_appeared), ("went away", c.findings_gone)):
        for f in items:
            out.append(f"finding {word}: {f.get('id')}: {f.get('title', '')}")
    return ["", *out] if out else ["", "findings: the same on both sides"]


def to_dict(c: Comparison, max_slower_pct: float | None = None, top: int = 10) -> dict[str, Any]:
    """Plain JSON-able data (the first ``top`` rows of each list)."""
    s = c.steps

    def deltas(ds: list[Delta]) -> list[dict[str, Any]]:
        return [
            {
                "name": d.name,
                "category": d.category,
                "base_ms": d.base_ms,
                "new_ms": d.new_ms,
                "delta_ms": d.delta_ms,
            }
            for d in ds
        ]

    return {
        "base": {"path": c.base.path, "kind": c.base.kind, "steps": s.n_base},
        "new": {"path": c.new.path, "kind": c.new.kind, "steps": s.n_new},
        "verdict": c.verdict,
        "step_time": {
            "base_median_ms": s.base_median_ms,
            "new_median_ms": s.new_median_ms,
            "ratio": s.ratio,
            "interval": [s.ratio_low, s.ratio_high],
            "confidence": s.confidence,
            "test": "mann-whitney-u",
            "p_value": s.p_value,
            "p_new_slower": s.test.p_new_slower,
            "method": s.test.method,
            "alpha": ALPHA,
            "beyond_noise": s.beyond_noise,
            "slower_beyond_noise": s.slower_beyond_noise,
            "change_pct": s.change_pct,
        },
        "throughput_change": c.throughput_change,
        "gate": None
        if max_slower_pct is None
        else {"fail_if_slower_pct": max_slower_pct, "failed": c.gate(max_slower_pct)},
        "breakdown": deltas(c.breakdown),
        "kernels_moved": deltas(c.kernels_moved[:top]),
        "kernels_added": deltas(c.kernels_added[:top]),
        "kernels_removed": deltas(c.kernels_removed[:top]),
        "operators_moved": deltas(c.operators_moved[:top]),
        "findings_appeared": c.findings_appeared,
        "findings_gone": c.findings_gone,
        "warnings": c.warnings,
    }


def page(c: Comparison, max_slower_pct: float | None = None, top: int = 10) -> Any:
    """The HTML page's data: verdict, stacked mean-step bars for both sides, delta tables."""
    from torchdoctor.report.html_model import Bars, Page, Table, command_line

    s = c.steps
    headline = summary_lines(c, max_slower_pct)
    parts = list(dict.fromkeys([*c.base.breakdown_ms, *c.new.breakdown_ms]))
    bars = (
        Bars(
            parts,
            ["BASE", "NEW"],
            [[side.breakdown_ms.get(p, 0.0) for p in parts] for side in (c.base, c.new)],
            caption="The mean step of each side: device busy time by kind, then idle time by cause.",
        )
        if parts
        else None
    )
    tables = [
        Table(
            f"t{i}",
            title,
            ["name", "BASE ms/step", "NEW ms/step", "delta ms/step"],
            [[d.name, d.base_ms, d.new_ms, d.delta_ms] for d in rows],
        )
        for i, (title, rows) in enumerate(_sections(c, top))
        if rows
    ]
    findings = [{**f, "title": f"appeared: {f.get('title', '')}"} for f in c.findings_appeared]
    findings += [{**f, "title": f"went away: {f.get('title', '')}"} for f in c.findings_gone]
    meta = [
        ("BASE", f"{c.base.path} ({c.base.kind}, {s.n_base} steps, GPU {c.base.gpu or '?'})"),
        ("NEW", f"{c.new.path} ({c.new.kind}, {s.n_new} steps, GPU {c.new.gpu or '?'})"),
        ("torch version", f"{c.base.torch_version or '?'} / {c.new.torch_version or '?'}"),
        ("command", command_line()),
    ]
    return Page(
        title="torchdoctor compare",
        verdict=c.verdict,
        metadata=meta,
        findings=findings,
        bars=bars,
        tables=tables,
        headline=headline,
        notes=[*(f"warning: {w}" for w in c.warnings)],
    )
