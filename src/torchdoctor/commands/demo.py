"""``torchdoctor demo``'s report: the analysis of the demo's trace, and what the machine was
doing while the demo ran.

The demo's loop waits on a dataset that sleeps per item, beside a model whose operators need the
CPU. Other processes holding the cores slow the operators and not the sleep, so on a busy machine
the same loop reads as a smaller data-loading share (77% critical on an idle 2-core machine, 24%
warning beside two busy processes). The CPU's counters over the profiled steps, read as ``check``
reads them, say when that happened: the ``cpu-oversubscribed`` finding joins the findings, a note
gives the machine's load, and the demo prints a line above the report that says the machine was
busy and by how much (the verdict stays the trace's, so the README's example keeps its shape).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from torchdoctor.report.model import Report

if TYPE_CHECKING:
    from torchdoctor.capture.demo import DemoRun
    from torchdoctor.rules.finding import Finding

CONTENTION_ID = "cpu-oversubscribed"


def demo_report(run: DemoRun) -> tuple[Report, str | None]:
    """The trace's report with the machine's load over the profiled steps (when it was read),
    and the line that says the machine was busy (None when it was not)."""
    from torchdoctor.commands.analyze.trace import analyze_path

    return with_machine_load(analyze_path(run.trace), run.cpu)


def with_machine_load(report: Report, cpu: dict[str, Any] | None) -> tuple[Report, str | None]:
    """``report`` with what ``cpu`` (``cpu_usage.window_record`` over its steps) says: a note
    with the machine's load and, under contention, the ``cpu-oversubscribed`` finding; and the
    line that says the step times are those of a busy machine (None on a quiet one)."""
    if not isinstance(cpu, dict):
        return report, None
    from torchdoctor.rules.finding import rank_findings

    note = load_note(cpu)
    notes = [*report.notes, note] if note else report.notes
    found = _contention_findings(report, cpu)
    why = _why(cpu, found)
    if why is None:
        return replace(report, notes=notes), None
    busy = (
        f"Measured on a busy machine: {why}; the step times are inflated and the shares below "
        "are not an idle machine's (finding cpu-oversubscribed)."
    )
    return replace(report, findings=rank_findings([*report.findings, *found]), notes=notes), busy


def load_note(cpu: dict[str, Any]) -> str | None:
    """The machine during the profiled steps in one note (None when the counters lack it)."""
    try:
        wall = float(cpu["wall_s"])
        other = cpu.get("other_busy_cores")
        wait = cpu.get("main_thread_runqueue_wait_s")
        parts = []
        if other is not None:
            parts.append(
                f"other processes kept {float(other):.1f} of {int(cpu['cores'])} cores busy"
            )
        if wait is not None and wall > 0:
            parts.append(f"the main thread waited for a core {float(wait) / wall:.0%} of the time")
    except (KeyError, TypeError, ValueError):
        return None
    return f"during the profiled steps {', '.join(parts)}" if parts else None


def _contention_findings(report: Report, cpu: dict[str, Any]) -> list[Finding]:
    """``check``'s rule on the demo's counters (the step and its CPU operators from the trace)."""
    from torchdoctor.record.run import RunRecord
    from torchdoctor.rules.families.cpu_threads import RULES
    from torchdoctor.rules.run_common import family_findings

    a = report.analysis
    ops_ms = a.per_step_ms(a.total.idle_ms.get("cpu_operators", 0.0)) if not a.has_gpu else None
    record = RunRecord.from_dict(
        {
            "cpu": cpu,
            "steps": {"mean_step_ms": a.mean_step_ms},
            "ops": {"op_time_ms_per_step": ops_ms} if ops_ms else {},
        }
    )
    try:
        return [f for r in RULES for f in family_findings(r, record) if f.id == CONTENTION_ID]
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a malformed record
        return []


def _why(cpu: dict[str, Any], found: list[Finding]) -> str | None:
    """Why the steps ran on a busy machine, in words; None when they did not."""
    from torchdoctor.rules.cpu_rules import contention

    why = contention(cpu)
    if why is None and found:
        why = found[0].title
    return why
