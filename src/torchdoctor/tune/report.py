"""Presenting a search: live progress, the final ranked table, the JSON export.

Rendering only: every number comes from ``search.Summary`` and ``measure``; nothing here measures.
"""

from __future__ import annotations

import json
import math
from typing import Any

from torchdoctor.tune import measure
from torchdoctor.tune.search import Record, Summary, least_disturbed
from torchdoctor.tune.space import BASELINE


def describe(assignment: dict[str, Any]) -> str:
    """The knobs that differ from the baseline, as ``name=value`` (``baseline`` when none)."""
    parts = [f"{k}={v}" for k, v in assignment.items() if BASELINE.get(k) != v]
    return ", ".join(parts) or "baseline"


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _eager_twin(summary: Summary, rec: Record) -> Record | None:
    """The same assignment with compile off, if it was measured (for compile break-even)."""
    want = {**rec.trial.assignment, "compile": "off"}
    for r in summary.records:
        if r.trial.assignment == want and r.stats is not None and r.trial.repeat == 0:
            return r
    return None


def _timing(summary: Summary, rec: Record) -> dict[str, Any]:
    """Step time (s), spread, speed-up, samples/s, warm-up and compile time (s), break-even."""
    assert rec.stats is not None
    base = summary.baseline.stats
    warm_s = measure.warmup_overhead_s(rec.result.warmup_times_s, rec.stats)
    compiled = rec.trial.assignment.get("compile", "off") != "off"
    eager = (_eager_twin(summary, rec) if compiled else None) or summary.baseline
    median = rec.stats.median_s
    return {
        "median_step_s": median,
        "iqr_step_s": rec.stats.iqr_s,
        "steps": len(rec.result.step_times_s),
        "blocks": rec.stats.n,
        "speedup": measure.speedup(base, rec.stats) if base else None,
        "samples_per_s": rec.result.samples_per_step / median if median else None,
        "warmup_overhead_s": warm_s,
        "compile_s": warm_s if compiled else None,
        "break_even_steps": measure.break_even_steps(warm_s, eager.stats or rec.stats, rec.stats)
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
            "max_rel_dev": _finite(v.max_rel_dev),
            "worst_step": v.worst_step,
            "tolerance": v.tolerance,
            "steps": v.steps,
            "reason": v.reason,
        }
    return out


def ranked(summary: Summary) -> list[Record]:
    """Usable trials fastest first, then rejected and failed ones in the order they ran."""
    first = [r for r in summary.records if r.trial.repeat == 0]
    good = sorted(
        (r for r in first if r.usable), key=lambda r: r.stats.median_s if r.stats else 0.0
    )
    return good + [r for r in first if not r.usable]


def to_json(summary: Summary) -> str:
    """The whole search as JSON (non-finite numbers written as null)."""
    data = {
        "best": row(summary, summary.best),
        "baseline": row(summary, summary.baseline),
        "baseline_again": row(summary, summary.baseline_again) if summary.baseline_again else None,
        "drift": summary.drift,
        "confirmed": summary.confirmed,
        "confirmed_speedup": confirmed_speedup(summary),
        "candidate": row(summary, summary.candidate) if summary.candidate else None,
        "best_again": row(summary, summary.best_again) if summary.best_again else None,
        "stopped_by": summary.stopped_by,
        "trials": len(summary.records),
        "grid_size": summary.grid_size,
        "grid_fraction": len(summary.records) / summary.grid_size if summary.grid_size else None,
        "knob_order": summary.order,
        "finding_ids": summary.finding_ids,
        "pruned": summary.space.pruned,
        "ranked": [row(summary, r) for r in ranked(summary)],
    }
    return json.dumps(_clean(data), indent=2, sort_keys=False)


def _clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    return x


def _fmt_ms(s: float | None) -> str:
    return "" if s is None else f"{s * 1e3:.1f}"


def _verdict_text(r: dict[str, Any]) -> str:
    f = r.get("fidelity")
    if r["status"] != "ok":
        return f"[red]{r['status']}[/]: {r['reason']}"
    if f is None:
        return ""
    if f["ok"]:
        return f"[green]ok[/] (dev {f['max_rel_dev']:.1e} ≤ {f['tolerance']:.0e})"
    return f"[red]rejected[/]: {f['reason']}"


def render_table(summary: Summary, console: Any) -> None:
    """Print the ranked table and the headline to a rich console."""
    from rich.table import Table

    table = Table(title="torchdoctor tune: configurations, fastest first", show_lines=False)
    for col in (
        "#",
        "configuration",
        "step ms (median ± IQR)",
        "speedup",
        "samples/s",
        "peak MiB",
        "compile s / break-even",
        "fidelity",
    ):
        table.add_column(col, overflow="fold")
    for rank, rec in enumerate(ranked(summary), 1):
        r = row(summary, rec)
        timing = (
            f"{_fmt_ms(r.get('median_step_s'))} ± {_fmt_ms(r.get('iqr_step_s'))}"
            if rec.stats
            else ""
        )
        compile_txt = ""
        if r.get("compile_s") is not None:
            be = r.get("break_even_steps")
            compile_txt = f"{r['compile_s']:.1f} / {'never' if be is None else f'{be:.0f} steps'}"
        mark = " [bold]◀ best[/]" if rec is summary.best else ""
        table.add_row(
            str(rank),
            r["config"] + mark,
            timing,
            f"{r['speedup']:.2f}x" if r.get("speedup") else "",
            f"{r['samples_per_s']:.0f}" if r.get("samples_per_s") else "",
            f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") else "",
            compile_txt,
            _verdict_text(r),
        )
    console.print(table)
    console.print(headline(summary))


def confirmed_speedup(summary: Summary) -> float:
    """Baseline / best step time, each the least disturbed of its measurements (1.0: baseline)."""
    base = least_disturbed(summary.baseline, summary.baseline_again)
    best = least_disturbed(summary.best, summary.best_again if summary.confirmed else None)
    if summary.best is summary.baseline or base is None or best is None:
        return 1.0
    return measure.speedup(base, best)


def headline(summary: Summary) -> str:
    """One paragraph: winner, speedup, trials used versus the grid, drift, why it stopped."""
    best, cand = summary.best, summary.candidate
    n, g = len(summary.records), summary.grid_size
    lines = [
        f"best: {describe(best.trial.assignment)} — {confirmed_speedup(summary):.2f}x the baseline"
    ]
    if not summary.confirmed and cand is not None:
        lines.append(
            f"the search's pick ({describe(cand.trial.assignment)}) did not beat the baseline "
            "again when both were re-measured: keeping the baseline"
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
        noisy = d > measure.MIN_GAIN
        lines.append(
            f"baseline drift over the search: {d:.1%}"
            + (
                " — the machine was noisy; differences smaller than this are not reliable"
                if noisy
                else ""
            )
        )
    if summary.stopped_by != "done":
        lines.append(f"stopped early: {summary.stopped_by} reached")
    return "\n".join(lines)


def progress_line(rec: Record, total_hint: int, best: Record | None, elapsed_s: float) -> str:
    """One line per finished trial: i of N, what ran, how it went, the current best, elapsed."""
    r = rec.result
    what = f"{rec.stats.median_s * 1e3:.1f} ms" if rec.stats else r.status
    if rec.verdict is not None and not rec.verdict.ok:
        what += " [red](rejected)[/]"
    elif r.status != "ok":
        what = f"[red]{r.status}[/]: {r.reason[:80]}"
    best_txt = f"{best.stats.median_s * 1e3:.1f} ms" if best and best.stats else "-"
    tag = " (resumed)" if r.resumed else ""
    return (
        f"trial {rec.seq + 1} of ~{total_hint} [{rec.trial.phase}] {describe(rec.trial.assignment)}: "
        f"{what}{tag} | best {best_txt} | {elapsed_s:.0f} s"
    )
