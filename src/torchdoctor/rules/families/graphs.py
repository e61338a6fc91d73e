"""CUDA/HIP graphs in a trace: their capture (start-up, not a step), replays whose kernels the
trace did not record, and device work left outside the replayed graphs.

The measures read the trace's graph analysis (``analysis/graphs.py``); ``_engine.py`` (the
host's gaps before eager kernels, the engine's name) is imported only by a trace with graphs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchdoctor.rules import inference_fixes as ifx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.fixes import DOCS
from torchdoctor.rules.spec import FindingSpec, Measured, SeverityPolicy, TraceRule

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

GRAPHS_DOC = f"{DOCS}/notes/cuda.html#cuda-graphs"

CAPTURE = FindingSpec(
    id="graph-capture",
    label="graph capture (start-up)",
    title="CUDA-graph capture: the trace records the capture of {n} graphs{what}: a one-off "
    "start-up cost of {ms:.1f} ms, not a steady-state step",
    severity=SeverityPolicy(fixed="info"),
    fix=ifx.profile_replay_fix,
    explanation="While a stream captures, launches are recorded into the graph, not run: "
    "the GPU is idle by design and the CPU time is the capture's. The trace says how long "
    "start-up capture takes, not how fast the engine serves; that needs replay steps.",
    doc_url=GRAPHS_DOC,
)


def capture(a: TraceAnalysis) -> Measured | None:
    """The trace records graph capture: what was captured and how long it took, per graph."""
    g = a.graphs
    if g is None or not g.captures:
        return None
    import numpy as np

    from torchdoctor.rules.families._engine import engine
    from torchdoctor.trace.arrays import median

    costs = np.array([c.cost_ms for c in g.captures])
    labels = ", ".join(g.capture_labels)
    evidence: dict[str, Any] = {
        "graphs_captured": len(g.captures),
        "capture_ms": round(g.capture_ms, 3),
        "capture_span_ms": round(g.capture_span_ms, 3),
        "median_capture_ms": round(median(costs), 3),
        "longest_capture_ms": round(float(costs.max()), 3),
        "instantiate_ms": round(sum(c.instantiate_ms for c in g.captures), 3),
        "recorded_launches": sum(c.recorded_launches for c in g.captures),
        "capture_labels": list(g.capture_labels),
    }
    what = f" (batch size and mode: {labels})" if labels else ""
    return Measured(
        value=len(g.captures),
        title={"n": len(g.captures), "what": what, "ms": g.capture_ms},
        evidence=evidence,
        fix={"engine": engine(a)},
    )


NOT_RECORDED = FindingSpec(
    id="graph-kernels-not-recorded",
    label="graph kernels missing from the trace",
    title="Graph kernels not recorded: {n} graph launches in the trace, {missing} without "
    "any of their kernels; {ms:.1f} ms per step of GPU work the trace cannot show",
    severity=SeverityPolicy(fixed="warning", risk=True),
    fix=ifx.record_graph_kernels_fix,
    explanation="The GPU time inside those replays was not recorded, so busy and idle "
    "shares cover the eager kernels only; the time behind the replays is reported as not "
    "recorded, never as idle.",
    doc_url=GRAPHS_DOC,
)


def not_recorded(a: TraceAnalysis) -> Measured | None:
    """Graph launches without any of their kernels: the GPU time inside them is not known."""
    g = a.graphs
    if g is None or not g.launches_without_kernels:
        return None
    from torchdoctor.rules.families._engine import engine

    ms = a.per_step_ms(a.not_recorded_ms)
    return Measured(
        value=g.launches_without_kernels,
        title={"n": g.launch_count, "missing": g.launches_without_kernels, "ms": ms},
        evidence={
            "graph_launches": g.launch_count,
            "launches_without_kernels": g.launches_without_kernels,
            "graph_activities_recorded": g.graph_activity_count,
            "not_recorded_ms_per_step": round(ms, 3),
        },
        fix={"engine": engine(a)},
    )


COVERAGE = FindingSpec(
    id="low-graph-coverage",
    label="work outside the graphs",
    title="Graph coverage {coverage:.0%}: {eager_ms:.1f} ms per step of device work runs "
    "outside the graphs ({ops})",
    severity=SeverityPolicy(th.HOST_WARN, th.HOST_CRITICAL),
    threshold=th.GRAPH_COVERAGE_WARN,
    fix=ifx.graph_coverage_fix,
    explanation="Kernels outside a graph are launched one by one; when the GPU waits for "
    "those launches, the step pays for them. Piecewise graphs (vLLM's default) keep "
    "attention eager on purpose, because its shapes change with the batch.",
    doc_url=GRAPHS_DOC,
    replaces=("host-bound",),
)


def coverage(a: TraceAnalysis) -> Measured | None:
    """Graphs are replayed, but device work runs eagerly beside them: the share of device time
    in graphs (below the spec's threshold fires); saving: the GPU's wait for the host before
    the eager kernels. None when some graphs' kernels are missing (the share is unknown)."""
    g = a.graphs
    if g is None or g.coverage is None:
        return None
    from torchdoctor.rules.families._engine import eager_host_ms, engine

    host = eager_host_ms(a)
    ops = [o.name for o in g.eager_ops[:3]]
    attention = any("attention" in o.name.lower() for o in g.eager_ops[:3])
    return Measured(
        value=g.coverage,
        saving_ms=a.per_step_ms(host),
        share=host / a.accounted_ms if a.accounted_ms > 0 else 0.0,
        title={
            "coverage": g.coverage,
            "eager_ms": a.per_step_ms(g.eager_gpu_ms),
            "ops": ", ".join(ops),
        },
        evidence={
            "graph_coverage": round(g.coverage, 4),
            "graph_gpu_ms_per_step": round(a.per_step_ms(g.graph_gpu_ms), 3),
            "eager_gpu_ms_per_step": round(a.per_step_ms(g.eager_gpu_ms), 3),
            "graph_launches": g.launch_count,
            "eager_ops": [
                {"op": o.name, "activities": o.activities, "gpu_ms": o.gpu_ms} for o in g.eager_ops
            ],
            "host_late_idle_before_eager_work_ms_per_step": round(a.per_step_ms(host), 3),
        },
        fix={"engine": engine(a), "eager_attention": attention},
        where=tuple(ops),
    )


RULES = (
    TraceRule(CAPTURE, capture, on_capture=True),
    TraceRule(NOT_RECORDED, not_recorded, on_capture=True),
    TraceRule(COVERAGE, coverage, below=True),
)
