"""Run every analysis on one trace and keep the results together for the rules and reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchdoctor.analysis.breakdown import StepBreakdown, step_breakdowns, total_breakdown
from torchdoctor.analysis.communication import CommStats, analyze_communication
from torchdoctor.analysis.gpu_activity import GpuActivity, gpu_activity
from torchdoctor.analysis.hta_compat import HtaBreakdown, hta_temporal_breakdown
from torchdoctor.analysis.waits import DependencyWaits, dependency_waits, idle_gaps
from torchdoctor.trace.steps import Steps, find_steps
from torchdoctor.trace.table import TraceTable


@dataclass(frozen=True)
class TraceAnalysis:
    """Everything torchdoctor computed about one trace (one rank)."""

    table: TraceTable
    steps: Steps
    activity: GpuActivity
    per_step: list[StepBreakdown]
    total: StepBreakdown
    comm: CommStats
    hta: HtaBreakdown | None
    kernels: Any
    launch: Any
    operators: Any
    memory: Any
    waits: DependencyWaits | None = None
    """Idle gaps where queued work did not start, with evidence (None for CPU-only traces)."""

    @property
    def n_steps(self) -> int:
        return len(self.per_step)

    @property
    def mean_step_ms(self) -> float:
        return self.total.step_ms / max(self.n_steps, 1)

    @property
    def has_gpu(self) -> bool:
        return len(self.activity.rows) > 0

    def per_step_ms(self, total_ms: float) -> float:
        """A total over the analysed steps, as milliseconds per step."""
        return total_ms / max(self.n_steps, 1)


def analyze_table(table: TraceTable) -> TraceAnalysis:
    """Run every analysis on a loaded trace."""
    from torchdoctor.analysis.kernels import analyze_kernels
    from torchdoctor.analysis.launch import analyze_launch
    from torchdoctor.analysis.memory import analyze_memory
    from torchdoctor.analysis.operators import analyze_operators

    steps = find_steps(table)
    act = gpu_activity(table)
    per_step = step_breakdowns(table, steps, act)
    return TraceAnalysis(
        table=table,
        steps=steps,
        activity=act,
        per_step=per_step,
        total=total_breakdown(per_step),
        comm=analyze_communication(table, steps, act),
        hta=hta_temporal_breakdown(table),
        kernels=analyze_kernels(table, steps),
        launch=analyze_launch(table, steps),
        operators=analyze_operators(table, steps),
        memory=analyze_memory(table, steps),
        waits=dependency_waits(table, act, idle_gaps(steps, act)) if len(act.rows) else None,
    )
