"""Run every analysis on one trace and keep the results together for the rules and reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchdoctor.analysis.breakdown import StepBreakdown, step_breakdowns, total_breakdown
from torchdoctor.analysis.communication import CommStats, analyze_communication
from torchdoctor.analysis.gpu_activity import GpuActivity, gpu_activity
from torchdoctor.analysis.hta_compat import HtaBreakdown, hta_temporal_breakdown
from torchdoctor.analysis.waits import DependencyWaits, dependency_waits, idle_gaps
from torchdoctor.trace import server_steps
from torchdoctor.trace.steps import Steps, find_steps
from torchdoctor.trace.table import TraceTable

if TYPE_CHECKING:  # imported when an analysis runs (graphs and serving only for their traces)
    from torchdoctor.analysis.graphs import GraphStats
    from torchdoctor.analysis.kernels import KernelContext, KernelStats
    from torchdoctor.analysis.launch import LaunchStats
    from torchdoctor.analysis.memory import MemoryStats
    from torchdoctor.analysis.operators import OperatorStats
    from torchdoctor.analysis.serving import ServingStats


@dataclass(frozen=True, eq=False)  # arrays: no field-wise ==
class TraceAnalysis:
    """Everything torchdoctor computed about one trace (one rank)."""

    table: TraceTable
    steps: Steps
    activity: GpuActivity
    per_step: list[StepBreakdown]
    total: StepBreakdown
    comm: CommStats
    hta: HtaBreakdown | None
    kernels: KernelStats
    launch: LaunchStats
    operators: OperatorStats
    memory: MemoryStats
    waits: DependencyWaits | None = None
    """Idle gaps where queued work did not start, with evidence (None for CPU-only traces)."""
    graphs: GraphStats | None = None
    """CUDA/HIP graph capture and replay (``analysis/graphs.py``); None without graph events."""
    serving: ServingStats | None = None
    """An inference engine's iterations (``analysis/serving.py``); None for other traces."""

    @property
    def n_steps(self) -> int:
        return len(self.per_step)

    @property
    def not_recorded_ms(self) -> float:
        """Step time in which the device ran work the trace does not hold (summed over steps)."""
        return self.total.idle_ms.get("not_recorded", 0.0)

    @property
    def accounted_ms(self) -> float:
        """The steps' time the trace accounts for: their windows less ``not_recorded_ms``."""
        return self.total.step_ms - self.not_recorded_ms

    @property
    def mean_step_ms(self) -> float:
        """Mean step time the trace accounts for (the window where nothing is unrecorded)."""
        return self.accounted_ms / max(self.n_steps, 1)

    @property
    def gpu_busy_share(self) -> float:
        """Device busy time over the time the trace accounts for (0 for an empty window)."""
        return self.total.gpu_busy_ms / self.accounted_ms if self.accounted_ms > 0 else 0.0

    @property
    def has_gpu(self) -> bool:
        return len(self.activity.rows) > 0

    def per_step_ms(self, total_ms: float) -> float:
        """A total over the analysed steps, as milliseconds per step."""
        return total_ms / max(self.n_steps, 1)


def analyze_table(table: TraceTable, context: KernelContext | None = None) -> TraceAnalysis:
    """Run every analysis on a loaded trace (``context``: what the run recorded beside it, for
    kernels whose names leave tensor-core use or dtype open)."""
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
        kernels=analyze_kernels(table, steps, context=context),
        launch=analyze_launch(table, steps),
        operators=analyze_operators(table, steps),
        memory=analyze_memory(table, steps),
        waits=dependency_waits(table, act, idle_gaps(steps, act)) if len(act.rows) else None,
        graphs=_graphs(table, steps),
        serving=_serving(table, steps, act, per_step),
    )


def _graphs(table: TraceTable, steps: Steps) -> GraphStats | None:
    """Graph capture and replay; the module is imported only by traces that have graphs."""
    if not server_steps.has_graph_events(table):
        return None
    from torchdoctor.analysis.graphs import analyze_graphs

    return analyze_graphs(table, steps)


def _serving(
    table: TraceTable, steps: Steps, act: GpuActivity, per_step: list[StepBreakdown]
) -> ServingStats | None:
    """The engine's iterations; imported only for traces whose steps are an engine's."""
    if not server_steps.is_serving(table, steps.source):
        return None
    from torchdoctor.analysis.serving import analyze_serving

    return analyze_serving(table, steps, act, per_step)
