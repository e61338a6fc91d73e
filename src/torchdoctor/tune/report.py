"""Presenting a search: live progress, the final ranked table, the JSON export.

Rendering only: every number comes from ``search.Summary``, ``measure`` and ``ab``; nothing here measures.
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape

from torchdoctor import ab, stats
from torchdoctor.json_arg import json_safe
from torchdoctor.tune import measure
from torchdoctor.tune.search import Record, Summary
from torchdoctor.tune.space import BASELINE


def describe(assignment: dict[str, Any]) -> str:
    """The knobs that differ from the baseline, as ``name=value`` (``baseline`` when none)."""
    parts = [f"{k}={v}" for k, v in assignment.items() if BASELINE.get(k) != v]
    return ", ".join(parts) or "baseline"


def _eager_twin(summary: Summary, rec: Record) -> Record | None:
    """The same assignment with compile off, if it was measured (for compile break-even)."""
    want = {**rec.trial.assignment, "compile": "off"}
    for r in summary.records:
        if r.trial.assignment == want and r.stats is not None and r.trial.repeat == 0:
            return r
    return None


def _interval(ri: stats.RatioInterval | None) -> dict[str, Any] | None:
    if ri is None:
        return None
    return {"ratio": ri.ratio, "low": ri.low, "high": ri.high, "confidence": ri.confidence}


def _timing(summary: Summary, rec: Record) -> dict[str, Any]:
    """Step time (s), spread, speed-up with its interval, samples/s, compile time, break-even."""
    assert rec.stats is not None
    warm_s = measure.warmup_overhead_s(rec.result.warmup_times_s, rec.stats)
    compiled = rec.trial.assignment.get("compile", "off") != "off"
    eager = (_eager_twin(summary, rec) if compiled else None) or summary.baseline
    median = rec.stats.median
    comp = rec.comparison
    return {
        "median_step_s": median,
        "iqr_step_s": rec.stats.iqr,
        "rounds": rec.stats.n,
        "window_steps": rec.result.window_steps,
        "speedup": rec.speedup,
        "speedup_interval": _interval(rec.vs_baseline),
        "compared_with": describe(rec.trial.reference) if rec.trial.reference else "baseline",
        "vs_compared": _interval(comp.interval) if comp else None,
        "decision": comp.decision if comp else None,
        "outlier_rounds": comp.outliers if comp else 0,
        "samples_per_s": rec.result.samples_per_step / median if median else None,
        "warmup_overhead_s": warm_s,
        "compile_s": warm_s if compiled else None,
        "break_even_steps": ab.break_even_steps(
            warm_s, (eager.stats or rec.stats).median - median, whole=True
        )
        if compiled
        else None,
    }


def row(summary: Summary, rec: Record) -> dict[str, Any]:
    """One trial as plain data: configuration, timing (s), speedup, memory (bytes), verdict."""
    out: dict[str, Any] = {
        "seq": rec.seq,
        "phase": rec.trial.phase,
        "config": describe(rec.trial.assignment),
        "assignment": rec.trial.assignment,
        "status": rec.result.status,
        "reason": rec.result.reason,
        "wall_s": rec.result.wall_s,
        "peak_bytes": rec.result.peak_bytes,
        "data_wait_share": rec.result.data_wait_share,
    }
    if rec.stats is not None:
        out.update(_timing(summary, rec))
        out["step_times_s"] = list(rec.result.step_times_s)  # raw samples: compare tests on them
    if rec.verdict is not None:
        v = rec.verdict
        out["fidelity"] = {
            "ok": v.ok,
            "max_rel_dev": v.max_rel_dev,  # inf for a non-finite loss: null in JSON (json_safe)
            "worst_step": v.worst_step,
            "tolerance": v.tolerance,
            "steps": v.steps,
            "reason": v.reason,
        }
    return out


def ranked(summary: Summary) -> list[Record]:
    """Usable trials by speed-up over the baseline, then rejected and failed ones as they ran."""
    first = [r for r in summary.records if r.trial.repeat == 0]
    good = sorted((r for r in first if r.usable), key=lambda r: -r.speedup)
    return good + [r for r in first if not r.usable]


def claim_text(summary: Summary) -> str:
    """The one claim, as the table, the headline and the TOML comment print it."""
    claim = summary.claim
    return "1.00x" if claim is None else claim.format()


def to_json(summary: Summary) -> str:
    """The whole search as JSON (non-finite numbers written as null)."""
    conf = summary.confirmation
    data = {
        "best": row(summary, summary.best),
        "baseline": row(summary, summary.baseline),
        "claim": _interval(summary.claim),
        "min_gain": summary.min_gain,
        "confirmed": summary.confirmed,
        "confirmation": row(summary, conf) if conf else None,
        "candidate": row(summary, summary.candidate) if summary.candidate else None,
        "drift": summary.drift,
        "stopped_by": summary.stopped_by,
        "trials": len(summary.records),
        "grid_size": summary.grid_size,
        "grid_fraction": len(summary.records) / summary.grid_size if summary.grid_size else None,
        "knob_order": summary.order,
        "finding_ids": summary.finding_ids,
        "pruned": summary.space.pruned,
        "ranked": [row(summary, r) for r in ranked(summary)],
    }
    return json.dumps(json_safe(data), indent=2, sort_keys=False)


def _fmt_ms(s: float | None) -> str:
    return "" if s is None else f"{s * 1e3:.1f}"


def _verdict_text(r: dict[str, Any]) -> str:
    f = r.get("fidelity")
    if r["status"] != "ok":
        return f"[red]{escape(r['status'])}[/]: {escape(r['reason'])}"
    if f is None:
        return ""
    if f["ok"]:
        return f"[green]ok[/] (dev {f['max_rel_dev']:.1e} ≤ {f['tolerance']:.0e})"
    return f"[red]rejected[/]: {escape(f['reason'])}"


COLUMNS: tuple[str, ...] = (
    "#",
    "configuration",
    "step ms (median ± IQR)",
    "vs baseline [95%]",
    "confirmation",
    "rounds",
    "samples/s",
    "peak MiB",
    "compile s / break-even",
    "fidelity",
)


_NUMBER_COLUMNS = frozenset({"#", "step ms (median ± IQR)", "rounds", "samples/s", "peak MiB"})


def _speed_text(rec: Record) -> str:
    if rec.vs_baseline is None:
        return "1.00x" if rec.stats else ""
    text = rec.vs_baseline.format()
    comp = rec.comparison
    if comp is not None and rec.trial.reference is not None:
        text += f"\n({comp.interval.format()} vs {describe(rec.trial.reference)})"
    return text


def _confirmation_text(summary: Summary, rec: Record) -> str:
    conf = summary.confirmation
    if conf is None or rec is not summary.candidate:
        return ""
    if conf.comparison is None:
        return escape(conf.result.status)
    mark = "" if summary.confirmed else " [red]✗[/]"
    return conf.comparison.interval.format() + mark


def _cells(summary: Summary, rec: Record, rank: int) -> list[str]:
    r = row(summary, rec)
    timing = ""
    if rec.stats:
        timing = f"{_fmt_ms(r.get('median_step_s'))} ± {_fmt_ms(r.get('iqr_step_s'))}"
    compile_txt = ""
    if r.get("compile_s") is not None:
        be = r.get("break_even_steps")
        compile_txt = f"{r['compile_s']:.1f} / {'never' if be is None else f'{be:.0f} steps'}"
    mark = " [bold]◀ best[/]" if rec is summary.best else ""
    return [
        str(rank),
        escape(r["config"]) + mark,
        timing,
        escape(_speed_text(rec)),
        _confirmation_text(summary, rec),
        str(r.get("rounds", "")),
        f"{r['samples_per_s']:.0f}" if r.get("samples_per_s") else "",
        f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") else "",
        compile_txt,
        _verdict_text(r),
    ]


def render_table(summary: Summary, console: Any) -> None:
    """Print the ranked table and the headline to a rich console. Where the console is too narrow
    for the boxed table, the table is laid out to its width instead (every number whole, text
    wrapped at its spaces; rich would fold ``[1.24-1.26]`` across two lines)."""
    from rich.measure import Measurement
    from rich.table import Table
    from rich.text import Text

    from torchdoctor.report.layout import Column, TableText, print_table

    title = "torchdoctor tune: configurations, fastest first"
    cells = [_cells(summary, rec, rank) for rank, rec in enumerate(ranked(summary), 1)]
    table = Table(title=title, show_lines=False)
    for col in COLUMNS:
        table.add_column(escape(col), no_wrap=True)
    for row in cells:
        table.add_row(*row)
    natural = Measurement.get(console, console.options.update_width(100_000), table).maximum
    if natural <= console.size.width:
        console.print(table)
    else:
        columns = tuple(
            Column(
                col,
                right=col in _NUMBER_COLUMNS,
                flex="wrap" if col == "configuration" else None,
            )
            for col in COLUMNS
        )
        plain = tuple(tuple(Text.from_markup(c).plain for c in row) for row in cells)
        print_table(console, TableText(columns, plain, title=title))
    console.print(escape(headline(summary)))


def headline(summary: Summary) -> str:
    """Plain text: the pick and its claim, the confirmation, trials versus the grid, knob order."""
    best, cand, conf = summary.best, summary.candidate, summary.confirmation
    n, g = len(summary.records), summary.grid_size
    lines = [f"best: {describe(best.trial.assignment)} — {claim_text(summary)}"]
    if best is not summary.baseline:
        lines[0] += " the baseline's speed (95% interval over interleaved rounds)"
    else:
        lines[0] += f" (no configuration's whole interval cleared {1 + summary.min_gain:.2f}x)"
    if conf is not None and conf.comparison is not None:
        lines.append(
            f"confirmation in a fresh process: {conf.comparison.interval.format()}"
            f" ({conf.stats.n if conf.stats else 0} rounds)"
        )
    if not summary.confirmed and cand is not None:
        lines.append(
            f"the confirmation disagrees with the search's {cand.vs_baseline or '?'} for "
            f"{describe(cand.trial.assignment)} (it must clear {1 + summary.min_gain:.2f}x and "
            "not fall below the search's interval): keeping the baseline"
        )
    lines.append(
        f"trials: {n} (the full grid has {g} configurations: {n / g:.0%} of it)"
        if g
        else f"trials: {n}"
    )
    lines.append(
        f"knob order: {', '.join(summary.order) or '(none applies)'}"
        + (
            f" (from findings: {', '.join(summary.finding_ids)})"
            if summary.finding_ids
            else " (default order)"
        )
    )
    d = summary.drift
    if d is not None:
        lines.append(
            f"baseline drift over the search: {d:.1%} (comparisons are interleaved, so drift "
            "moves both arms of a round alike)"
        )
    if summary.stopped_by != "done":
        lines.append(f"stopped early: {summary.stopped_by} reached")
    return "\n".join(lines)


def progress_line(rec: Record, total_hint: int, best: Record | None, elapsed_s: float) -> str:
    """One line per finished trial (rich markup, every free text escaped): i of N, phase, what
    ran, its interval and decision, the current best, elapsed."""
    r = rec.result
    if r.status != "ok":
        what = f"[red]{escape(r.status)}[/]: {escape(r.reason[:80])}"
    elif rec.verdict is not None and not rec.verdict.ok:
        what = "[red](rejected: loss diverged)[/]"
    elif rec.comparison is not None:
        c = rec.comparison
        against = describe(rec.trial.reference) if rec.trial.reference else "baseline"
        what = escape(f"{c.interval.format()} vs {against}: {c.decision} ({c.interval.n} rounds)")
    else:
        what = f"{rec.stats.median * 1e3:.1f} ms" if rec.stats else escape(r.status)
    best_txt = escape(f"{best.speedup:.2f}x") if best else "baseline"
    tag = " (resumed)" if r.resumed else ""
    head = escape(f"trial {rec.seq + 1} of ~{total_hint} [{rec.trial.phase}] ")
    return (
        f"{head}{escape(describe(rec.trial.assignment))}: {what}{tag} | best {best_txt} | "
        f"{elapsed_s:.0f} s"
    )
