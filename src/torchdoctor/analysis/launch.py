"""Launch overhead: how many kernels, how short, and whether the GPU waited for the CPU to launch.

A kernel (or memcpy, memset) is joined to the runtime or driver call that launched it by
correlation id (kernels run from a CUDA graph share the graph launch's). When the launch call
started, the activity's stream was either

- still busy with earlier work (*queued*: the CPU was ahead, and the launch delay is queueing
  behind that work), or
- already idle (*host-late*: the GPU stream waited for the CPU to issue the launch).

The stream idle time before host-late activities, minus the time any other stream kept the GPU busy,
is the GPU time lost to late launches (``host_late_idle_ms``): the key number for a
host/launch-bound finding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis._join import gpu_rows, in_window, launch_of, step_index
from torchdoctor.trace.arrays import distinct, median, member
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.server_steps import graph_launch_rows
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable


@dataclass(frozen=True)
class LaunchStats:
    """Launch statistics over the analysed window (per-step values are means over its steps)."""

    steps: int
    kernel_count: int
    """Kernels (not memcpy/memset) that started in the window."""
    kernels_per_step: float
    kernels_each_step: tuple[int, ...]
    median_kernel_us: float | None
    launched_kernel_count: int
    """Kernels joined to a launch call by correlation id (graph kernels included)."""
    unlaunched_kernel_count: int
    """Kernels whose launch call is not in the trace (launched before profiling started, or a
    trace without runtime events)."""
    share_shorter_than_launch: float | None
    """Of kernels launched on their own: the share whose duration is below their launch call's
    CPU duration (the GPU finishes them faster than the CPU can issue them)."""
    median_launch_cost_us: float | None
    """Median CPU duration of the launch calls of kernels launched on their own."""
    median_launch_delay_us: float | None
    """Median of kernel start minus launch-call start, kernels launched on their own."""
    queued_count: int
    """Kernels, memcpys and memsets (graph kernels included) whose stream was still busy with
    earlier work when their launch call started."""
    host_late_count: int
    """Those whose stream was idle when the launch call started."""
    queueing_delay_ms: float
    """Summed launch delay of queued activities (time spent behind earlier work on the
    stream)."""
    host_late_idle_ms: float
    """GPU idle time (no activity on any stream) right before host-late activities, summed over
    the steps: the GPU was starved waiting for a launch."""
    host_late_idle_ms_per_step: float
    host_late_idle_ms_each_step: tuple[float, ...]
    gpu_idle_ms: float
    """Step time with no kernel, memcpy or memset on any stream, summed over the steps."""
    host_late_share_of_idle: float | None
    """host_late_idle_ms / gpu_idle_ms (None when the GPU was never idle)."""
    launch_call_count: int
    launch_call_ms_per_step: float
    """CPU time in the calls that launched the window's kernels (graph launches included)."""
    graph_launch_count: int
    """cudaGraphLaunch / hipGraphLaunch calls in the window."""
    graph_kernel_count: int
    """Kernels that ran from a CUDA/HIP graph (joined to a graph launch)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        d = asdict(self)
        d["kernels_each_step"] = list(self.kernels_each_step)
        d["host_late_idle_ms_each_step"] = list(self.host_late_idle_ms_each_step)
        return d


def analyze_launch(table: TraceTable, steps: Steps) -> LaunchStats:
    """Kernels per step, short kernels, launch delay (queued vs host-late) and CUDA-graph use."""
    acts = in_window(table, steps, gpu_rows(table))
    launch = launch_of(table, acts)
    graph_rows = graph_launch_rows(table)
    from_graph = (launch >= 0) & member(launch, graph_rows)
    solo = (launch >= 0) & ~from_graph
    is_kernel = table.kind[acts] == Kind.KERNEL
    ts, dur = table.ts[acts], table.dur[acts]
    l_ts = np.where(launch >= 0, table.ts[launch], np.nan)
    l_dur = np.where(launch >= 0, table.dur[launch], np.nan)
    prev_end = _stream_prev_end(table, acts)
    queued = (launch >= 0) & (prev_end > l_ts)
    host_late = (launch >= 0) & ~queued
    each_idle, gpu_idle = _host_late_idle(table, steps, acts[host_late], prev_end[host_late])
    ks = solo & is_kernel
    per_step = np.bincount(step_index(steps, ts[is_kernel]) + 1, minlength=len(steps) + 1)[1:]
    calls = distinct(launch[is_kernel & (launch >= 0)])
    n = max(len(steps), 1)
    late_ms = float(each_idle.sum())
    return LaunchStats(
        steps=len(steps),
        kernel_count=int(is_kernel.sum()),
        kernels_per_step=float(is_kernel.sum()) / n,
        kernels_each_step=tuple(int(c) for c in per_step),
        median_kernel_us=_median(dur[is_kernel]),
        launched_kernel_count=int((is_kernel & (launch >= 0)).sum()),
        unlaunched_kernel_count=int((is_kernel & (launch < 0)).sum()),
        share_shorter_than_launch=_share(dur[ks] < l_dur[ks]),
        median_launch_cost_us=_median(l_dur[ks]),
        median_launch_delay_us=_median(ts[ks] - l_ts[ks]),
        queued_count=int(queued.sum()),
        host_late_count=int(host_late.sum()),
        queueing_delay_ms=float((ts[queued] - l_ts[queued]).sum()) / 1e3,
        host_late_idle_ms=late_ms,
        host_late_idle_ms_per_step=late_ms / n,
        host_late_idle_ms_each_step=tuple(float(x) for x in each_idle),
        gpu_idle_ms=gpu_idle,
        host_late_share_of_idle=late_ms / gpu_idle if gpu_idle > 0 else None,
        launch_call_count=len(calls),
        launch_call_ms_per_step=float(table.dur[calls].sum()) / 1e3 / n,
        graph_launch_count=len(in_window(table, steps, graph_rows)),
        graph_kernel_count=int((from_graph & is_kernel).sum()),
    )


def _stream_prev_end(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """For each row, the latest end of earlier device activity on its (device, stream).

    -inf for the first activity of a stream. "Earlier" is by start time (ties: table order).
    """
    allg = gpu_rows(table)
    if not len(rows):
        return np.zeros(0)
    key = table.device[allg].astype(np.int64) * (1 << 32) + table.stream[allg].astype(np.int64)
    g = np.unique(key, return_inverse=True)[1]
    order = np.lexsort((allg, table.ts[allg], g))  # by stream, then start
    g_sorted, rows_sorted = g[order], allg[order]
    end = table.ts[rows_sorted] + table.dur[rows_sorted]
    # Offset each stream's ends so one running maximum never crosses a stream boundary.
    offset = (float(end.max()) - float(end.min()) + 1.0) * g_sorted if len(end) else end
    run = np.maximum.accumulate(end - end.min() + offset) - offset + end.min()
    prev = np.full(len(end), -np.inf)
    same = np.zeros(len(end), dtype=bool)
    same[1:] = g_sorted[1:] == g_sorted[:-1]
    prev[1:][same[1:]] = run[:-1][same[1:]]
    pos = np.empty(len(table), dtype=np.int64)
    pos[rows_sorted] = np.arange(len(rows_sorted))
    out: np.ndarray = prev[pos[rows]]
    return out


def _host_late_idle(
    table: TraceTable, steps: Steps, late: np.ndarray, prev_end: np.ndarray
) -> tuple[np.ndarray, float]:
    """Per-step GPU-idle ms before host-late kernels, and total GPU-idle ms over the steps.

    A host-late activity's stream was idle from ``prev_end`` (or the step start) to its start;
    the part of that wait when no stream at all was busy is GPU time lost to the late launch.
    """
    allg = gpu_rows(table)
    if not len(allg):
        return np.zeros(len(steps)), 0.0
    busy = iv.union(table.ts[allg], table.ts[allg] + table.dur[allg])
    idx = step_index(steps, table.ts[late])
    ok = idx >= 0
    start = np.maximum(prev_end[ok], steps.starts_us[idx[ok]])
    waits = iv.union(start, np.maximum(table.ts[late][ok], start))
    starved = iv.subtract(waits, busy)
    each = np.zeros(len(steps))
    idle = 0.0
    for i, (lo, hi) in enumerate(zip(steps.starts_us, steps.ends_us, strict=True)):
        each[i] = iv.total(iv.clip(starved, lo, hi)) / 1e3
        idle += iv.total(iv.gaps(busy, lo, hi)) / 1e3
    return each, idle


def _median(x: np.ndarray) -> float | None:
    return median(x) if len(x) else None


def _share(mask: np.ndarray) -> float | None:
    return float(mask.mean()) if len(mask) else None
