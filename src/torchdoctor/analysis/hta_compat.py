"""Holistic Trace Analysis's temporal breakdown, reproduced exactly, for cross-checking.

torchdoctor's own breakdown (``breakdown.py``) differs from HTA's on purpose (see
docs/analyses.md); this module computes HTA's definitions so the two can be compared number for
number:

* device events are every event with a stream (kernels, memcpy, memset, and ``cuda_sync`` events
  recorded on a stream);
* timestamps are rounded inward to whole microseconds (start up, end down) when the trace has
  fractional timestamps, as HTA does;
* with more than one ProfilerStep, only device events launched before the last step started are
  kept (HTA drops the last, possibly incomplete, step);
* the span runs from the first device event's start to the last one's end; compute is the union
  of kernels whose name contains none of "nccl", "Memcpy", "Memset"; idle is the span minus the
  union of all device events; non-compute is the rest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.trace.arrays import member, unique_codes
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.table import TraceTable

_CPU_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.RUNTIME, Kind.DRIVER)


@dataclass(frozen=True)
class HtaBreakdown:
    """HTA's temporal breakdown: percentages of the device span."""

    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    span_ms: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def hta_temporal_breakdown(table: TraceTable) -> HtaBreakdown | None:
    """HTA's idle / compute / non-compute percentages, or None for a trace without device events."""
    dev = member(table.kind, np.array((Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET), dtype=np.uint8))
    dev |= (table.kind == Kind.GPU_SYNC) & (table.stream >= 0)
    rows = _launched_before_last_step(table, np.flatnonzero(dev))
    if not len(rows):
        return None
    start = table.ts[rows] + table.base_us
    end = start + table.dur[rows]
    all_ts = table.ts + table.base_us
    if np.any(all_ts != np.floor(all_ts)):
        start, end = np.ceil(start), np.floor(end)
    # Decided once per distinct name, not per event.
    codes, per_row, _ = unique_codes(table.name[rows])
    by_code = [table.names[c] for c in codes.tolist()]
    memory_or_comm = np.array(
        [("nccl" in n.lower()) or ("Memcpy" in n) or ("Memset" in n) for n in by_code], dtype=bool
    )[per_row]
    compute = ~memory_or_comm & (table.kind[rows] != Kind.GPU_SYNC)
    busy = iv.union(start, end)
    span = float(busy[1][-1] - busy[0][0])
    if span <= 0:
        return HtaBreakdown(0.0, 100.0, 0.0, 0.0)
    busy_us = iv.total(busy)
    compute_us = iv.total(iv.union(start[compute], end[compute]))
    return HtaBreakdown(
        idle_pct=round(100 * (span - busy_us) / span, 2),
        compute_pct=round(100 * compute_us / span, 2),
        non_compute_pct=round(100 * (busy_us - compute_us) / span, 2),
        span_ms=span / 1000.0,
    )


def _launched_before_last_step(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    step_codes = table.codes_matching(lambda n: "ProfilerStep" in n)
    if len(step_codes) <= 1:
        return rows
    cpu = member(table.kind, np.array(_CPU_KINDS, dtype=np.uint8))
    markers = np.flatnonzero(cpu & member(table.name, step_codes))
    last_start = table.ts[markers].max()
    launched = table.corr[np.flatnonzero(cpu & (table.ts < last_start))]
    out: np.ndarray = rows[member(table.corr[rows], launched[launched >= 0])]
    return out
