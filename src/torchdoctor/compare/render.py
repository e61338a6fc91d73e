"""Presenting a comparison: plain text, JSON and the HTML page's data."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from torchdoctor.compare.cost import LONG_STEP_X, RunCost
from torchdoctor.compare.diff import Comparison, Delta
from torchdoctor.compare.estimates import MIN_RUNS_FOR_INTERVAL, Estimate, EvidenceKind, Quantity
from torchdoctor.compare.verdict import Verdict
from torchdoctor.report.layout import Column, TableText, lines
from torchdoctor.report.tables import kernel_signature

_ORDER: tuple[Quantity, ...] = ("mean_step", "median_step", "one_time", "time_to_n")


def _label(key: str) -> str:
    """A breakdown part in the words every command prints it with."""
    from torchdoctor.analysis.breakdown_terms import label

    return label(key)


def _delta_table(title: str, rows: list[Delta]) -> TableText:
    """A table of ms per step on each side: its name column gives up width, its numbers never."""
    columns = (
        Column("", right=False, flex="shorten"),
        Column("BASE"),
        Column("NEW"),
        Column("delta"),
    )
    name = kernel_signature if title.startswith("kernels") else str
    cells = tuple(
        (name(d.name), f"{d.base_ms:.3f}", f"{d.new_ms:.3f}", f"{d.delta_ms:+.3f}") for d in rows
    )
    return TableText(columns, cells, title=f"{title} (ms per step):")


def _plain(table: TableText, width: int) -> list[str]:
    return [line.plain for line in lines(table, width)]


def _side_line(word: str, runs: list[Any], first: Any) -> str:
    steps = sum(len(r.step_ms) for r in runs)
    if len(runs) == 1:
        warm = f", after {len(first.warmup_ms)} warm-up" if len(first.warmup_ms) else ""
        return f"{word} {first.path} ({first.kind}, {steps} steps{warm})"
    return f"{word} {len(runs)} runs ({first.kind}, {steps} steps in all): " + ", ".join(
        r.path for r in runs
    )


def render_text(
    c: Comparison, max_slower_pct: float | None = None, top: int = 10, width: int | None = None
) -> str:
    """The comparison as lines of text (ms per step in the tables), its tables laid out to
    ``width`` columns (default: the terminal's, or 100 when the output is not a terminal)."""
    if width is None:
        from torchdoctor.report.console import text_width

        width = text_width()
    out = [
        _side_line("BASE", c.base_runs or [c.base], c.base),
        _side_line("NEW ", c.new_runs or [c.new], c.new),
        *(f"warning: {w}" for w in c.warnings),
        "",
        c.verdict,
        *summary_lines(c, max_slower_pct),
    ]
    for title, rows in _sections(c, top):
        if rows:
            out += ["", *_plain(_delta_table(title, rows), width)]
    out += _finding_lines(c)
    for side in (c.base, c.new):
        out += [f"note ({'BASE' if side is c.base else 'NEW'}): {n}" for n in side.notes]
    return "\n".join(out) + "\n"


def evidence_line(v: Verdict, n_base: int, n_new: int, orders: Sequence[str] | None = None) -> str:
    """What the comparison rests on and what it can claim, in one line."""
    kind: EvidenceKind = v.evidence
    if kind == "one run a side":
        return (
            "evidence: one run a side. The steps of one run share that run's machine load, so "
            "their spread cannot show how a second run would differ (on a shared machine, by 2x "
            f"or more); the intervals add a +/-{v.run_noise_pct:g}% run-to-run allowance "
            "(--run-noise) and no test is made. To decide, interleave fresh runs: "
            "`torchdoctor compare --rerun BASE.py NEW.py`, or give several runs a side: "
            f"`compare A1 .. A{MIN_RUNS_FOR_INTERVAL} -- B1 .. B{MIN_RUNS_FOR_INTERVAL}`."
        )
    if kind == "runs":
        return (
            f"evidence: {n_base} and {n_new} runs, tested on runs (one value per run), not steps. "
            "Runs made one after the other still share slow drift: make them alternately "
            "(A B A B), or use `compare --rerun`."
        )
    orders = list(orders or [])
    shown = ", ".join(orders[:4]) + (", ..." if len(orders) > 4 else "")
    return (
        f"evidence: {n_base} interleaved rounds, each side in a fresh process, each side first "
        f"in half of them ({shown}); decided on per-round ratios (Wilcoxon signed-rank interval)."
    )


def cost_rows(est: dict[Quantity, Estimate], job_steps: int | None) -> list[str]:
    """The costs' table: BASE, NEW and the speed-up with its interval, one row per cost."""
    rows = [f"  {'what you pay':<26} {'BASE':>11} {'NEW':>11}   speed-up [95%] (>1: NEW better)"]
    for q in _ORDER:
        e = est.get(q)
        if e is None:
            continue
        name = f"{e.label} ({e.unit})"
        if q == "time_to_n":
            name = f"time to {job_steps} steps (s)"
        d = 2 if e.unit.startswith("ms") else 1
        rows.append(f"  {name:<26} {e.base:11.{d}f} {e.new:11.{d}f}   {e.speedup.format()}")
        if q == "mean_step":
            per = "samples/s" if e.unit == "ms/sample" else "steps/s"
            rows.append(
                f"  {per + ' over the window':<26} {1000 / e.base:11.1f} {1000 / e.new:11.1f}   "
                f"{e.speedup.format()}"
            )
    return rows


def long_steps_line(base: list[RunCost], new: list[RunCost]) -> str | None:
    """Rare long steps on each side (counted over every run), when either side has any."""
    got: list[tuple[int, int, float]] = []
    for runs in (base, new):
        count = sum(r.long_steps[0] for r in runs)
        total = sum(float(np.sum(r.step_ms)) for r in runs)
        long_ms = sum(r.long_steps[1] * float(np.sum(r.step_ms)) for r in runs)
        got.append((count, sum(len(r.step_ms) for r in runs), long_ms / total if total else 0.0))
    b, n = got
    if not b[0] and not n[0]:
        return None
    return (
        f"long steps (over {LONG_STEP_X:g}x the median: epoch starts, stalls): BASE {b[0]} of "
        f"{b[1]} ({b[2]:.0%} of its time), NEW {n[0]} of {n[1]} ({n[2]:.0%})"
    )


def break_even_line(v: Verdict, est: dict[Quantity, Estimate]) -> str | None:
    """Where the two sides' times to N cross, when they do."""
    one, step = est.get("one_time"), est["mean_step"]
    if one is None or v.break_even is None:
        return None
    cheap_start = "NEW" if one.new < one.base else "BASE"
    other = "BASE" if cheap_start == "NEW" else "NEW"
    return (
        f"break-even: {cheap_start} starts {abs(one.new - one.base):.1f} s sooner and {other} "
        f"saves {abs(step.base - step.new):.2f} ms a step: {cheap_start} is ahead for jobs "
        f"shorter than {v.break_even} steps, {other} for longer ones."
    )


def summary_lines(c: Comparison, max_slower_pct: float | None) -> list[str]:
    """Evidence, the costs, break-even, compile time and the gate's outcome."""
    v = c.decision
    n_b, n_n = len(c.base_runs or [c.base]), len(c.new_runs or [c.new])
    lines = [evidence_line(v, n_b, n_n), *cost_rows(c.estimates, v.job_steps)]
    from torchdoctor.compare.runs import run_cost

    long = long_steps_line(
        [run_cost(r) for r in c.base_runs or [c.base]], [run_cost(r) for r in c.new_runs or [c.new]]
    )
    if long:
        lines.append(long)
    compile_b = [r.compile_s for r in c.base_runs or [c.base] if r.compile_s]
    compile_n = [r.compile_s for r in c.new_runs or [c.new] if r.compile_s]
    if compile_b or compile_n:
        base, new = median_text(compile_b), median_text(compile_n)
        lines.append(f"  {'of which compile (s)':<26} {base:>11} {new:>11}")
    be = break_even_line(v, c.estimates)
    if be:
        lines.append(be)
    if max_slower_pct is not None:
        lines.append(v.gate_line(max_slower_pct))
    return lines


def cost_table(est: dict[Quantity, Estimate], job_steps: int | None) -> Any:
    """The costs as an HTML table (numbers stay numbers; no interval: empty)."""
    from torchdoctor.report.html_model import Num, Table

    rows = []
    for q in _ORDER:
        e = est.get(q)
        if e is None:
            continue
        name = f"time to {job_steps} steps" if q == "time_to_n" else e.label
        r = e.speedup
        text = r.format() if e.has_interval else f"{r.ratio:.2f}x"  # as the text prints it
        rows.append([name, e.unit, e.base, e.new, Num(r.ratio, text), e.test])
    return Table(
        "costs",
        "what you pay (speed-up: BASE over NEW, above 1 NEW is better)",
        ["cost", "unit", "BASE", "NEW", "speed-up [95% interval]", "test"],
        rows,
    )


def page_headline(lines: list[str]) -> list[str]:
    """The summary lines without the cost rows (the page shows those as a table)."""
    return [ln for ln in lines if not ln.startswith("  ")]


def median_text(xs: Sequence[float]) -> str:
    """The middle value (the upper of the two for an even count) to 0.1, or "-" for none."""
    return f"{sorted(xs)[len(xs) // 2]:.1f}" if xs else "-"


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


def estimate_dict(e: Estimate) -> dict[str, Any]:
    """One cost as plain data."""
    return {
        "base": e.base,
        "new": e.new,
        "unit": e.unit,
        "speedup": e.speedup.ratio,
        "interval": [e.speedup.low, e.speedup.high] if e.has_interval else None,
        "confidence": e.speedup.confidence,
        "change_pct": e.change_pct,
        "decided": e.decided,
        "evidence": e.evidence,
        "test": e.test,
        "p_value": e.p_value,
        "n_base": e.n_base,
        "n_new": e.n_new,
    }


def verdict_dict(
    v: Verdict, est: dict[Quantity, Estimate], max_slower_pct: float | None
) -> dict[str, Any]:
    """The verdict, the costs and the gate as plain data."""
    return {
        "verdict": v.text,
        "direction": v.direction,
        "decided": v.decided,
        "evidence": v.evidence,
        "headline": v.headline.quantity,
        "costs": {q: estimate_dict(e) for q, e in est.items()},
        "break_even_steps": v.break_even,
        "job_steps": v.job_steps,
        "run_noise_pct": v.run_noise_pct if v.evidence == "one run a side" else None,
        "explained_by": v.cause.to_dict() if v.cause is not None else None,
        "contention": [{"side": c.side, "path": c.path, "why": c.why} for c in v.contention],
        "gate": None
        if max_slower_pct is None
        else {
            "fail_if_slower_pct": max_slower_pct,
            "failed": v.gate(max_slower_pct),
            "judged": not (v.new_contended and v.slower_beyond(max_slower_pct)),
            "on": v.evidence,
            "line": v.gate_line(max_slower_pct),
        },
    }


def to_dict(c: Comparison, max_slower_pct: float | None = None, top: int = 10) -> dict[str, Any]:
    """Plain JSON-able data (the first ``top`` rows of each list)."""

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

    def side(first: Any, runs: list[Any]) -> dict[str, Any]:
        runs = runs or [first]
        return {
            "path": first.path,
            "kind": first.kind,
            "runs": [r.path for r in runs],
            "steps": sum(len(r.step_ms) for r in runs),
        }

    return {
        "base": side(c.base, c.base_runs),
        "new": side(c.new, c.new_runs),
        **verdict_dict(c.decision, c.estimates, max_slower_pct),
        "throughput_change": c.throughput_change,
        "breakdown": [{**d, "label": _label(d["name"])} for d in deltas(c.breakdown)],
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

    headline = page_headline(summary_lines(c, max_slower_pct))
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
    tables = [cost_table(c.estimates, c.decision.job_steps)] + [
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
        (
            "BASE",
            f"{_side_line('', c.base_runs or [c.base], c.base).strip()}, GPU {c.base.gpu or '?'}",
        ),
        ("NEW", f"{_side_line('', c.new_runs or [c.new], c.new).strip()}, GPU {c.new.gpu or '?'}"),
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
