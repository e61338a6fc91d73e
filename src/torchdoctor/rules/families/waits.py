"""The device waiting: on a dependency, on the input pipeline, on blocking copies, and the idle
time no named cause explains (low utilisation)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from torchdoctor.analysis.breakdown import _carried_over  # where a CPU step's input wait opens
from torchdoctor.analysis.waits import blocking_copy_calls, idle_gaps, idle_touching, innermost
from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.families._common import share_of_step
from torchdoctor.rules.inference_fixes import graphs_already_fix
from torchdoctor.rules.spec import (
    Details,
    FindingSpec,
    Gate,
    Measured,
    SeverityPolicy,
    TraceRule,
    static,
)
from torchdoctor.trace.arrays import quantile
from torchdoctor.trace.kinds import Kind

if TYPE_CHECKING:
    from torchdoctor.analysis.bundle import TraceAnalysis

D = fx.DOCS


# -- dependency waits ---------------------------------------------------------------------------
DEPENDENCY_SPEC = FindingSpec(
    id="dependency-waits",
    label="waits on a dependency",
    title="Waiting on a dependency: queued work did not start for {ms:.1f} ms per step "
    "({share:.0%}); most of it {kind}",
    severity=SeverityPolicy(th.DEPENDENCY_WARN, th.DEPENDENCY_CRITICAL),
    threshold=th.KERNEL_LATENCY_US,
    fix=fx.dependency_fix,
    explanation="The next kernel or copy was already queued but did not start: a stream "
    "waited on an event, a collective on other ranks, a blocking copy on queued work, or a "
    "first launch on loading its code. Faster kernels do not help; removing the dependency "
    "does.",
    doc_url=f"{D}/notes/cuda.html#cuda-streams",
)

KIND_TEXT = {
    "first-launch": "first launches loading their code",
    "collective": "collectives waiting for other ranks",
    "stream-wait": "streams waiting on events",
    "blocking-copy": "behind blocking copies",
    "unknown": "cause not in the trace",
    "unexplained": "cause not in the trace",
}


def dependency_waits(a: TraceAnalysis) -> Measured | None:
    """Queued work that did not start for longer than kernel-to-kernel latency: the value is
    the longest such wait (µs, queued to started), the saving the steps' summed waits."""
    w = a.waits
    ms = a.per_step_ms(a.total.idle_ms.get("dependency_wait", 0.0))
    if w is None or not w.count or not w.longest or ms <= 0:
        return None
    share = share_of_step(a, ms)
    kind = max(w.by_kind_ms, key=w.by_kind_ms.__getitem__) if w.by_kind_ms else "unknown"
    longest_us = max(x.wait_ms for x in w.longest) * 1000.0 + float(th.KERNEL_LATENCY_US)
    where = [f"{x.annotation or x.cpu_op or x.cpu_call or x.work}" for x in w.longest[:3]]
    return Measured(
        value=longest_us,
        saving_ms=ms,
        title={"ms": ms, "share": share, "kind": KIND_TEXT.get(kind, kind)},
        evidence={
            "dependency_wait_ms_per_step": round(ms, 3),
            "share_of_step": round(share, 4),
            "waits": w.count,
            "wait_ms_by_kind": w.by_kind_ms,
            "kernel_latency_threshold_us": float(th.KERNEL_LATENCY_US),
            "longest_waits": [x.to_dict() for x in w.longest[:5]],
        },
        fix={"kind": kind},
        where=tuple(dict.fromkeys(x for x in where if x)),
    )


# -- the input pipeline -------------------------------------------------------------------------
INPUT_SPEC = FindingSpec(
    id="input-pipeline",
    label="the input pipeline",
    # what was measured: the opening gap and, where the trace has them, the frames running in
    # it; not a guess at what they do (check's line table says more: capture/fit.py)
    title="Input pipeline: each step starts with {what} {ms:.1f} ms ({share:.0%}) while the "
    "CPU runs no torch operator{during}",
    probe="data",
    severity=SeverityPolicy(th.INPUT_WARN, th.DATA_CRITICAL),
    threshold=th.INPUT_WARN,
    fix=fx.input_pipeline_fix,
    explanation="The step begins while the CPU is outside torch operators, typically in a "
    "generator, a prefetch thread's queue or another loader building the next batch; the "
    "device waits for it. Produce batches ahead, in workers or a background thread.",
    doc_url=f"{D}/data.html#multi-process-data-loading",
    knobs=("num_workers", "device_prefetch"),
    # the wait a worker's hand-over can remove: a smaller one is the loop's own glue
    gates=(Gate("ms", th.DATA_WAIT_MIN_MS),),
)
INPUT_FRAMES_SKIPPED = ("ProfilerStep#", "<built-in", "torch/", "<frozen")


def input_pipeline(a: TraceAnalysis) -> Measured | None:
    """Steps that begin with the device idle while the CPU is outside torch operators.

    A wait for each batch recurs every step: one slow step start (a first step, a pause) lifts
    the mean but is not a pipeline, so with three steps or more the value is the smaller of the
    mean share and the lower quartile of the steps' shares (on a shared machine two of four
    profiled steps can open late on a scheduler stall; a producer the loop waits for makes
    three of four wait). One step cannot show a pattern: info at most.
    """
    ms = a.per_step_ms(a.total.idle_ms.get("input_pipeline", 0.0))
    share = share_of_step(a, ms)
    shares = [p.share(p.idle_ms.get("input_pipeline", 0.0)) for p in a.per_step]
    # np.quantile's bits, without the numpy.ma import np.quantile pays (trace.arrays.quantile)
    typical, low = (quantile(shares, q) if shares else 0.0 for q in (0.5, 0.25))

    def details() -> Details:  # the frames, looked up only for a finding
        seen = input_frames(a)
        during = {"during": f" (in {seen[0]})"} if seen else {}
        return Details(during, {"cpu_frames_at_step_start": seen}, tuple(seen[:3]))

    return Measured(
        value=min(share, low) if a.n_steps >= 3 else share,
        saving_ms=ms,
        title={
            "what": "the GPU idle" if a.has_gpu else "the loop waiting",
            "ms": ms,
            "share": share,
            "during": "",
        },
        evidence={
            "input_wait_ms_per_step": round(ms, 3),
            "share_of_step": round(share, 4),
            "median_step_share": round(typical, 4),
            "lower_quartile_step_share": round(low, 4),
            "dataloader_in_trace": bool(len(a.activity.dataloader[0])),
        },
        fix={"gpu": a.has_gpu},
        details=details,
        most=None if a.n_steps > 1 else "info",
        gates={"ms": ms},
    )


def input_frames(a: TraceAnalysis) -> list[str]:
    """User annotations and Python frames (not built-ins) running halfway through each step's
    input wait, most common first. On a CPU-only trace the wait opens where the previous step's
    work carried into the step ends (``Optimizer.step#SGD.step`` run long on a busy machine is
    not what the loop waits for)."""
    t, counts = a.table, dict[str, int]()
    opens = a.steps.starts_us if a.has_gpu else _carried_over(t, a.steps)
    for lo, part in zip(opens[:16], a.per_step[:16], strict=False):
        at = float(lo) + part.idle_ms.get("input_pipeline", 0.0) * 500.0
        for kinds in ((Kind.USER_ANNOTATION,), (Kind.PYTHON_FUNCTION,)):
            r = innermost(t, at, *kinds, skip=INPUT_FRAMES_SKIPPED)
            if r >= 0:
                name = t.names[int(t.name[r])]
                counts[name] = counts.get(name, 0) + 1
    return sorted(counts, key=lambda n: -counts[n])


# -- synchronous copies -------------------------------------------------------------------------
SYNC_COPIES_SPEC = FindingSpec(
    id="synchronous-copies",
    label="synchronous copies",
    title="Synchronous copies: {per_step:.4g} per step hold the CPU; the GPU idles {ms:.1f} ms "
    "per step ({share:.0%}) around them",
    severity=SeverityPolicy(th.SYNC_WARN, th.SYNC_CRITICAL),
    fix=static(fx.SYNC_COPIES),
    explanation="A blocking copy waits for all queued work and stops the CPU from running ahead.",
    doc_url=f"{D}/notes/cuda.html#use-pinned-memory-buffers",
    knobs=("device_prefetch", "pin_memory"),
    codemods=("non-blocking-copies",),
)


def synchronous_copies(a: TraceAnalysis) -> Measured | None:
    """Copies through blocking calls, costed by the device idle they cause (not their length).
    Any such copy is recorded; its severity follows the idle around it."""
    if not a.has_gpu:
        return None
    ranges, calls = blocking_copy_calls(a.table, a.activity, a.steps.window)
    n_calls = sum(calls.values())
    if not n_calls:
        return None
    stall_ms = a.per_step_ms(idle_touching(idle_gaps(a.steps, a.activity), ranges))
    held_ms = a.per_step_ms(float(np.sum(ranges[1] - ranges[0])) / 1000.0)
    per_step = n_calls / max(a.n_steps, 1)
    share = share_of_step(a, stall_ms)
    return Measured(
        value=float(n_calls),
        saving_ms=stall_ms,
        title={"per_step": per_step, "ms": stall_ms, "share": share},
        evidence={
            "blocking_copy_calls": calls,
            "copies_per_step": round(per_step, 2),
            "cpu_held_ms_per_step": round(held_ms, 3),
            "gpu_idle_around_copies_ms_per_step": round(stall_ms, 3),
        },
    )


# -- low utilisation ----------------------------------------------------------------------------
def low_util_fix(graphs: int = 0) -> str:
    """Compile and graphs, unless the step already replays graphs (never "use CUDA graphs" to
    a replay)."""
    return graphs_already_fix(graphs) if graphs else fx.LOW_UTIL


LOW_UTIL_SPEC = FindingSpec(
    id="low-gpu-utilization",
    label="low GPU utilisation",
    title="Low GPU utilisation: busy {busy:.0%} of the step, {ms:.1f} ms per step of short gaps "
    "between kernels that no other cause explains",
    threshold=th.LOW_UTIL_BUSY,
    fix=low_util_fix,
    explanation="The GPU is idle for much of the step even after the named causes; small "
    "kernels with gaps between them leave the device waiting.",
    doc_url=f"{D}/generated/torch.compile.html",
    knobs=("compile", "optimizer_impl", "num_workers"),
    frameworks=(("transformers", lambda f: "TrainingArguments(..., torch_compile=True)"),),
)
NAMED_CAUSES = (
    "host_overhead",
    "dependency_wait",
    "data_loading",
    "synchronization",
    "collective_wait",
    "input_pipeline",
)
"""Idle causes with findings of their own."""


def low_utilization(a: TraceAnalysis) -> Measured | None:
    """The device busy for too little of the step (fires below ``LOW_UTIL_BUSY``).

    The saving is the short kernel-to-kernel gaps. When a named cause (host overhead, data,
    syncs, dependencies, collectives, input) holds more idle time than they do, it is only
    recorded (info): that cause's own finding carries the fix.
    """
    if not a.has_gpu or a.total.step_ms <= 0:
        return None
    busy = a.gpu_busy_share
    idle = a.total.idle_ms
    gaps_ms = a.per_step_ms(idle.get("short_gaps", 0.0))
    explained = max((a.per_step_ms(idle.get(k, 0.0)) for k in NAMED_CAUSES), default=0.0)
    graphs = a.launch.graph_launch_count if a.launch is not None else 0
    return Measured(
        value=busy,
        saving_ms=gaps_ms,
        share=share_of_step(a, gaps_ms),
        title={"busy": busy, "ms": gaps_ms},
        evidence={
            "gpu_busy_share": round(busy, 4),
            "gpu_idle_ms_per_step": round(
                a.per_step_ms(a.total.gpu_idle_ms - a.not_recorded_ms), 3
            ),
            "idle_by_cause_ms_per_step": {k: round(a.per_step_ms(v), 3) for k, v in idle.items()},
        },
        fix={"graphs": graphs or 0},
        most=None if gaps_ms >= explained else "info",
    )


RULES = (
    TraceRule(DEPENDENCY_SPEC, dependency_waits),
    TraceRule(INPUT_SPEC, input_pipeline),
    TraceRule(SYNC_COPIES_SPEC, synchronous_copies),
    TraceRule(LOW_UTIL_SPEC, low_utilization, below=True),
)
