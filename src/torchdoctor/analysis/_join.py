"""Shared joins: device activity to the CPU call that launched it, rows to the step windows."""

from __future__ import annotations

import numpy as np

from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import GPU_ACTIVITY_KINDS, Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

LAUNCH_KINDS = (Kind.RUNTIME, Kind.DRIVER)
_GPU = np.array(GPU_ACTIVITY_KINDS, dtype=np.uint8)


def in_window(table: TraceTable, steps: Steps, rows: np.ndarray) -> np.ndarray:
    """The subset of ``rows`` (sorted row indices) that start inside the analysed window."""
    lo, hi = steps.window
    ts = table.ts[rows]
    out: np.ndarray = rows[(ts >= lo) & (ts < hi)] if hi > lo else rows[ts == lo]
    return out


def gpu_rows(table: TraceTable, *kinds: Kind) -> np.ndarray:
    """Row indices of device activities (kernels, memcpys, memsets, or only ``kinds``)."""
    wanted = np.array(kinds, dtype=np.uint8) if kinds else _GPU
    return np.flatnonzero(member(table.kind, wanted))


def launch_of(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """For each device row, the runtime/driver row with the same correlation id, else -1.

    When a runtime call and a driver call share a correlation id, the runtime call (the one
    the application made) wins.
    """
    launch = np.flatnonzero(member(table.kind, np.array(LAUNCH_KINDS, dtype=np.uint8)))
    launch = launch[table.corr[launch] >= 0]
    out = np.full(len(rows), -1, dtype=np.int64)
    if not len(launch) or not len(rows):
        return out
    # sort by (corr, kind): RUNTIME (4) sorts before DRIVER (5), and the first of each corr wins
    order = np.lexsort((table.kind[launch], table.corr[launch]))
    launch = launch[order]
    corr = table.corr[launch]
    first = np.ones(len(corr), dtype=bool)
    first[1:] = corr[1:] != corr[:-1]
    launch, corr = launch[first], corr[first]
    want = table.corr[rows]
    k = np.clip(np.searchsorted(corr, want), 0, len(corr) - 1)
    hit = (corr[k] == want) & (want >= 0)
    out[hit] = launch[k[hit]]
    return out


def step_index(steps: Steps, ts: np.ndarray) -> np.ndarray:
    """Index of the step window holding each time (-1 outside every window)."""
    k = np.searchsorted(steps.starts_us, ts, side="right") - 1
    ok = (k >= 0) & (ts < steps.ends_us[np.clip(k, 0, len(steps) - 1)])
    if len(steps) == 1 and steps.starts_us[0] == steps.ends_us[0]:
        ok = ts == steps.starts_us[0]
        k = np.zeros(len(ts), dtype=np.int64)
    return np.where(ok, k, -1)


def time_by_recorded_op(
    table: TraceTable, kernels: np.ndarray, ops: frozenset[str]
) -> dict[int, float]:
    """Device µs of ``kernels`` summed by the External id of the operator that launched them, for
    the operators named in ``ops`` whose shapes were recorded (``table.shapes``); the others'
    kernels and kernels with no launch call are left out."""
    launch = launch_of(table, kernels)
    ext = np.where(launch >= 0, table.ext_id[np.maximum(launch, 0)], -1)
    by_op: dict[int, float] = {}
    for x, d in zip(ext.tolist(), table.dur[kernels].tolist(), strict=True):
        got = table.shapes.get(x)
        if got is not None and got[0] in ops:
            by_op[x] = by_op.get(x, 0.0) + d
    return by_op
