"""Device work the trace does not hold: what an idle-looking gap really was.

A profiler window starts in the middle of a running program. A serving engine keeps the GPU one
iteration ahead of the CPU, so the first work launched in the window queues behind the previous
iteration's kernels, launched before the profiler started and therefore not recorded. And a
trace may hold a CUDA/HIP graph launch without the kernels it ran. In both cases the device is
busy with work that is not in the trace; calling that time idle (or a "dependency wait") is
wrong. This module marks the device activities that waited behind such work:

* **queued behind work from before the trace**: the first activity recorded on its stream, whose
  launch call returned more than ``KERNEL_LATENCY_US`` before it started, when nothing in the
  trace can have held it: no recorded device work on another stream ended within that latency
  before it started (the producer of an event it waited on would have), and no GPU-side wait
  record (``Stream Wait Event``) precedes it on its stream;
* **queued behind a graph whose kernels were not recorded**: a graph launch with no recorded
  activity was issued between the launch of the previous activity on its stream and its own.

A gap that ends at such an activity is ``not_recorded`` in the breakdown (see breakdown.md).
"""

from __future__ import annotations

import numpy as np

from torchdoctor.analysis._join import launch_of
from torchdoctor.analysis.definitions import KERNEL_LATENCY_US
from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import GPU_ACTIVITY_KINDS, Kind
from torchdoctor.trace.server_steps import graph_launch_rows
from torchdoctor.trace.table import TraceTable


def behind_unrecorded(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """For device activity ``rows`` (in start order): True where the activity was queued behind
    device work the trace does not hold (see the module docstring)."""
    out = np.zeros(len(rows), dtype=bool)
    if not len(rows):
        return out
    key = table.device[rows].astype(np.int64) * (1 << 32) + table.stream[rows].astype(np.int64)
    order = np.argsort(key, kind="stable")  # by stream, then start (rows are in start order)
    k_sorted = key[order]
    new_stream = np.ones(len(order), dtype=bool)
    new_stream[1:] = k_sorted[1:] != k_sorted[:-1]
    first = order[new_stream]  # the first activity of each stream: a few rows
    out[first] = _queued_from_before(table, rows[first])
    empty = _empty_graphs(table, graph_launch_rows(table))
    if len(empty):  # the launch join of every activity: only traces with such graphs pay it
        launch = launch_of(table, rows)
        known = launch >= 0
        call_ts = np.where(known, table.ts[np.maximum(launch, 0)], np.nan)
        prev = np.where(new_stream, -1, np.roll(order, 1))
        prev_call = np.full(len(rows), -np.inf)
        has_prev = prev >= 0
        prev_call[order[has_prev]] = call_ts[prev[has_prev]]
        out |= known & _after_unrecorded_graph(table, empty, prev_call, call_ts)
    return out


def _queued_from_before(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """For first-on-their-stream activities: queued (launch call returned more than the
    latency before the start) with nothing in the trace that can have held them."""
    launch = launch_of(table, rows)
    known = launch >= 0
    start = table.ts[rows]
    call_end = np.where(known, table.ts[launch] + table.dur[launch], np.nan)
    out = np.zeros(len(rows), dtype=bool)
    cand = np.flatnonzero(known & (call_end < start - KERNEL_LATENCY_US))
    out[cand] = _nothing_in_trace_held(table, rows[cand], start[cand])
    return out


def _nothing_in_trace_held(table: TraceTable, rows: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Nothing recorded can have held the queued activity: no recorded device work on another
    stream ended within ``KERNEL_LATENCY_US`` before it started (the event it may have waited
    for), and no GPU-side wait record precedes it on its stream."""
    gpu = np.flatnonzero(member(table.kind, np.array(GPU_ACTIVITY_KINDS, dtype=np.uint8)))
    ends = table.ts[gpu] + table.dur[gpu]
    waits = np.flatnonzero(table.kind == Kind.GPU_SYNC)
    ok = np.ones(len(rows), dtype=bool)
    for i, r in enumerate(rows.tolist()):
        other = table.stream[gpu] != table.stream[r]
        near = (ends > start[i] - KERNEL_LATENCY_US) & (ends <= start[i] + 1e-3)
        if (other & near).any():
            ok[i] = False
        elif len(waits):
            on_stream = waits[table.stream[waits] == table.stream[r]]
            ok[i] = not (len(on_stream) and table.ts[on_stream[0]] <= start[i])
    return ok


def _empty_graphs(table: TraceTable, graphs: np.ndarray) -> np.ndarray:
    """The graph launches that ran no recorded activity (by correlation, else by stream and
    time window)."""
    if not len(graphs):
        return graphs
    from torchdoctor.analysis.graphs import graph_owner

    gpu = np.flatnonzero(member(table.kind, np.array(GPU_ACTIVITY_KINDS, dtype=np.uint8)))
    owner = graph_owner(table, gpu, graphs)
    out: np.ndarray = graphs[~member(graphs, owner[owner >= 0])]
    return out


def _after_unrecorded_graph(
    table: TraceTable, empty: np.ndarray, prev_call: np.ndarray, call_ts: np.ndarray
) -> np.ndarray:
    """A graph launch that ran no recorded activity (``empty``) was issued between the
    previous activity's launch on the stream and this activity's launch."""
    t = np.sort(table.ts[empty])
    # the latest empty graph launch before each call, compared with the previous call
    k = np.searchsorted(t, np.nan_to_num(call_ts, nan=-np.inf), side="left") - 1
    latest = np.where(k >= 0, t[np.maximum(k, 0)], -np.inf)
    return latest > prev_call
