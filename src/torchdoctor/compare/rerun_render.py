"""Presenting an interleaved rerun: a progress line per process, text, JSON and the HTML page."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from torchdoctor.compare.render import (
    break_even_line,
    cost_rows,
    cost_table,
    evidence_line,
    long_steps_line,
    median_text,
    page_headline,
    verdict_dict,
)
from torchdoctor.compare.rerun import ChildRun, RerunResult


def progress(run: ChildRun, rounds: int) -> str:
    """One line on standard error as each process ends (``rounds``: the most rounds)."""
    head = f"round {run.round + 1}/{rounds} {run.side:<4}"
    if run.cost is None:
        return f"{head} failed: {run.reason}"
    c = run.cost
    return (
        f"{head} mean step {c.mean_ms:.2f} ms, one-time {c.one_time_s:.1f} s, "
        f"process {run.wall_s:.1f} s"
    )


def _script(word: str, path: str, args: tuple[str, ...]) -> str:
    return f"{word} {path}" + (f" {' '.join(args)}" if args else "")


def summary_lines(r: RerunResult, max_slower_pct: float | None) -> list[str]:
    """Evidence, costs, compile time, break-even, per-round ratios, gate."""
    v = r.verdict
    if v is None:
        return [f"no complete round: {r.failure}"]
    lines = [
        evidence_line(v, len(r.rounds), len(r.rounds), r.orders),
        *cost_rows(r.estimates, v.job_steps),
    ]
    costs = [(b.cost, n.cost) for b, n in r.rounds if b.cost and n.cost]
    parts = (("start-up", "startup_s"), ("exit", "exit_s"), ("compile", "compile_s"))
    for part, key in parts:  # compile only when a side compiled
        pairs = [(getattr(b, key), getattr(n, key)) for b, n in costs]
        if part != "compile" or any(b or n for b, n in pairs):
            base, new = (median_text([float(p[i]) for p in pairs if p[i]]) for i in (0, 1))
            lines.append(f"  {f'of which {part} (s)':<26} {base:>11} {new:>11}")
    long = long_steps_line([b for b, _ in costs], [n for _, n in costs])
    if long:
        lines.append(long)
    be = break_even_line(v, r.estimates)
    if be:
        lines.append(be)
    q = v.headline.quantity
    ratios = " ".join(f"{x:.2f}" for x in r.ratios(q))
    lines.append(f"per-round speed-ups ({v.headline.label}): {ratios}")
    if max_slower_pct is not None:
        lines.append(v.gate_line(max_slower_pct))
    return lines


def render_text(r: RerunResult, max_slower_pct: float | None = None) -> str:
    """The rerun as lines of text."""
    o = r.options
    what = "to the script's end" if o.full else f"{o.warmup} warm-up + {o.steps} steps"
    lines = [
        _script("BASE", r.base.path, r.base.args),
        _script("NEW ", r.new.path, r.new.args),
        f"each run: a fresh process, {what}, profiler off; stopped: {r.stopped}",
        "",
        r.verdict.text if r.verdict else f"no verdict: {r.failure}",
        *summary_lines(r, max_slower_pct),
    ]
    if r.failure and r.verdict is not None:
        lines.append(f"note: stopped early: {r.failure}")
    lines += [f"note: {n}" for n in r.notes]
    return "\n".join(lines) + "\n"


def to_dict(r: RerunResult, max_slower_pct: float | None = None) -> dict[str, Any]:
    """Plain JSON-able data: the plan, every process, the per-round ratios and the verdict."""
    out: dict[str, Any] = {
        "mode": "rerun",
        "base": {"script": r.base.path, "args": list(r.base.args)},
        "new": {"script": r.new.path, "args": list(r.new.args)},
        "warmup": r.options.warmup,
        "steps": r.options.steps,
        "full": r.options.full,
        "options": asdict(r.options),
        "orders": r.orders,
        "stopped": r.stopped,
        "failure": r.failure or None,
        "notes": r.notes,
        "runs": [
            {
                "side": c.side,
                "round": c.round,
                "status": c.status,
                "code": c.code,
                "reason": c.reason or None,
                "wall_s": c.wall_s,
                "mean_step_ms": c.cost.mean_ms if c.cost else None,
                "median_step_ms": c.cost.median_ms if c.cost else None,
                "one_time_s": c.cost.one_time_s if c.cost else None,
                "startup_s": c.cost.startup_s if c.cost else None,
                "exit_s": c.cost.exit_s if c.cost else None,
                "compile_s": c.cost.compile_s if c.cost else None,
                "step_ms": [float(x) for x in c.cost.step_ms] if c.cost else None,
            }
            for c in r.runs
        ],
    }
    if r.verdict is not None:
        out.update(verdict_dict(r.verdict, r.estimates, max_slower_pct))
        out["per_round_speedups"] = {q: r.ratios(q) for q in r.estimates}
    return out


def page(r: RerunResult, max_slower_pct: float | None = None) -> Any:
    """The HTML page's data: the verdict, the costs, and a table of every process."""
    from torchdoctor.report.html_model import Page, Table, command_line

    tables = [] if r.verdict is None else [cost_table(r.estimates, r.verdict.job_steps)]
    tables += [
        Table(
            "runs",
            "every process, in the order it ran",
            ["round", "side", "status", "mean step ms", "one-time s", "process s"],
            [
                [
                    c.round + 1,
                    c.side,
                    c.status,
                    c.cost.mean_ms if c.cost else "",
                    c.cost.one_time_s if c.cost else "",
                    c.wall_s,
                ]
                for c in r.runs
            ],
        )
    ]
    return Page(
        title="torchdoctor compare --rerun",
        verdict=r.verdict.text if r.verdict else f"no verdict: {r.failure}",
        metadata=[
            ("BASE", _script("", r.base.path, r.base.args).strip()),
            ("NEW", _script("", r.new.path, r.new.args).strip()),
            ("command", command_line()),
        ],
        findings=[],
        bars=None,
        tables=tables,
        headline=page_headline(summary_lines(r, max_slower_pct)),
        notes=list(r.notes),
        show_findings=False,
    )
