"""Trace rules about the device waiting: on a dependency, on the input pipeline, on blocking
copies, and the idle time that no named cause explains (low utilisation)."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.analysis.waits import blocking_copy_calls, idle_gaps, idle_touching, innermost
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.inference_fixes import graphs_already_fix
from torchdoctor.rules.registry import spec
from torchdoctor.rules.trace_common import finding, grade
from torchdoctor.trace.kinds import Kind


def _share(a: TraceAnalysis, ms: float) -> float:
    return ms / a.mean_step_ms if a.mean_step_ms else 0.0


def dependency_waits(a: TraceAnalysis) -> Finding | None:
    """Queued work that did not start for longer than kernel-to-kernel latency."""
    w = a.waits
    ms = a.per_step_ms(a.total.idle_ms.get("dependency_wait", 0.0))
    if w is None or not w.count or ms <= 0:
        return None
    share = _share(a, ms)
    kind = max(w.by_kind_ms, key=w.by_kind_ms.__getitem__) if w.by_kind_ms else "unknown"
    evidence = {
        "dependency_wait_ms_per_step": round(ms, 3),
        "share_of_step": round(share, 4),
        "waits": w.count,
        "wait_ms_by_kind": w.by_kind_ms,
        "kernel_latency_threshold_us": float(th.KERNEL_LATENCY_US),
        "longest_waits": [x.to_dict() for x in w.longest[:5]],
    }
    where = [f"{x.annotation or x.cpu_op or x.cpu_call or x.work}" for x in w.longest[:3]]
    s = spec("dependency-waits")
    return finding(
        a,
        s.id,
        s.format_title(ms=ms, share=share, kind=_KIND_TEXT.get(kind, kind)),
        ms,
        grade(s.id, share),
        evidence,
        fix=s.fix(kind),
        where=list(dict.fromkeys(w for w in where if w)),
    )


_KIND_TEXT = {
    "first-launch": "first launches loading their code",
    "collective": "collectives waiting for other ranks",
    "stream-wait": "streams waiting on events",
    "blocking-copy": "behind blocking copies",
    "unknown": "cause not in the trace",
    "unexplained": "cause not in the trace",
}


def input_pipeline(a: TraceAnalysis) -> Finding | None:
    """Steps that begin with the device idle while the CPU is outside torch operators."""
    ms = a.per_step_ms(a.total.idle_ms.get("input_pipeline", 0.0))
    share = _share(a, ms)
    if share < th.INPUT_WARN:
        return None
    # A wait for each batch recurs every step: one slow step start (a first step, a pause)
    # lifts the mean but is not a pipeline; the median step must show it too.
    typical = _median_input_share(a)
    if a.n_steps >= 3 and typical < th.INPUT_WARN:
        return None
    seen = _input_frames(a)
    evidence: dict[str, Any] = {
        "input_wait_ms_per_step": round(ms, 3),
        "share_of_step": round(share, 4),
        "median_step_share": round(typical, 4),
        "dataloader_in_trace": bool(len(a.activity.dataloader[0])),
        "cpu_frames_at_step_start": seen,
    }
    s = spec("input-pipeline")
    return finding(
        a,
        s.id,
        s.format_title(
            what="the GPU idle" if a.has_gpu else "the loop waiting", ms=ms, share=share
        ),
        ms,
        # one step cannot show a pattern that repeats every step: recorded, not a warning
        grade(s.id, share) if a.n_steps > 1 else "info",
        evidence,
        where=seen[:3],
    )


def _median_input_share(a: TraceAnalysis) -> float:
    """The median over steps of each step's input wait as a share of that step."""
    shares = [p.share(p.idle_ms.get("input_pipeline", 0.0)) for p in a.per_step]
    return float(np.median(shares)) if shares else 0.0


def _input_frames(a: TraceAnalysis) -> list[str]:
    """User annotations and Python frames (not built-ins) running halfway through each step's
    input wait, most common first."""
    t, counts = a.table, dict[str, int]()
    skip = ("ProfilerStep#", "<built-in", "torch/", "<frozen")
    for lo, part in zip(a.steps.starts_us[:16], a.per_step[:16], strict=False):
        at = float(lo) + part.idle_ms.get("input_pipeline", 0.0) * 500.0
        for kinds in ((Kind.USER_ANNOTATION,), (Kind.PYTHON_FUNCTION,)):
            r = innermost(t, at, *kinds, skip=skip)
            if r >= 0:
                name = t.names[int(t.name[r])]
                counts[name] = counts.get(name, 0) + 1
    return sorted(counts, key=lambda n: -counts[n])


def synchronous_copies(a: TraceAnalysis) -> Finding | None:
    """Copies through blocking calls, costed by the device idle they cause (not their length)."""
    if not a.has_gpu:
        return None
    ranges, calls = blocking_copy_calls(a.table, a.activity, a.steps.window)
    n_calls = sum(calls.values())
    if not n_calls:
        return None
    stall_ms = a.per_step_ms(idle_touching(idle_gaps(a.steps, a.activity), ranges))
    held_ms = a.per_step_ms(float(np.sum(ranges[1] - ranges[0])) / 1000.0)
    per_step = n_calls / max(a.n_steps, 1)
    share = _share(a, stall_ms)
    evidence = {
        "blocking_copy_calls": calls,
        "copies_per_step": round(per_step, 2),
        "cpu_held_ms_per_step": round(held_ms, 3),
        "gpu_idle_around_copies_ms_per_step": round(stall_ms, 3),
    }
    s = spec("synchronous-copies")
    return finding(
        a,
        s.id,
        s.format_title(per_step=per_step, ms=stall_ms, share=share),
        stall_ms,
        grade(s.id, share),
        evidence,
    )


_NAMED_CAUSES = ("data_loading", "synchronization", "collective_wait", "input_pipeline")


def low_utilization(a: TraceAnalysis) -> Finding | None:
    """GPU busy for too little of the step, for the idle no other cause explains.

    The saving is the short kernel-to-kernel gaps. When a named cause (host overhead, data,
    syncs, dependencies, collectives, input) holds more idle time than they do, it is only
    recorded (info): that cause's own finding carries the fix.
    """
    if not a.has_gpu or a.total.step_ms <= 0:
        return None
    busy = a.gpu_busy_share
    if busy >= th.LOW_UTIL_BUSY:
        return None
    idle = a.total.idle_ms
    gaps_ms = a.per_step_ms(idle.get("short_gaps", 0.0))
    named = ("host_overhead", "dependency_wait", *_NAMED_CAUSES)
    explained = max((a.per_step_ms(idle.get(k, 0.0)) for k in named), default=0.0)
    share = _share(a, gaps_ms)
    evidence = {
        "gpu_busy_share": round(busy, 4),
        "gpu_idle_ms_per_step": round(a.per_step_ms(a.total.gpu_idle_ms - a.not_recorded_ms), 3),
        "idle_by_cause_ms_per_step": {k: round(a.per_step_ms(v), 3) for k, v in idle.items()},
    }
    s = spec("low-gpu-utilization")
    level = grade(s.id, share) if gaps_ms >= explained else "info"
    graphs = a.launch.graph_launch_count if a.launch is not None else 0
    fix = graphs_already_fix(graphs) if graphs else None  # never "use CUDA graphs" to a replay
    return finding(
        a, s.id, s.format_title(busy=busy, ms=gaps_ms), gaps_ms, level, evidence, fix=fix
    )
