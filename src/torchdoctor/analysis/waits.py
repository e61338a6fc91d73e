"""Dependency waits: idle gaps where the next work was queued but did not start.

The breakdown counts, per idle gap, the part after the work that ended it was launched. Up to
``KERNEL_LATENCY_US`` that is the device's kernel-to-kernel latency; beyond it the queued work
was held back by something. This module finds those gaps and, for the longest ones, the evidence
of what held them back:

* ``first-launch``: the launch call itself lasted through the wait and this is the first kernel of
  its name in the trace (the runtime loaded its code module);
* ``collective``: the work that ended the wait is a collective kernel (it waits for other ranks),
  or the CPU was inside a collective call;
* ``stream-wait``: the stream of that work was told to wait on an event
  (``cudaStreamWaitEvent``) after its previous work;
* ``blocking-copy``: the CPU was blocked in a copy or synchronising call during the wait;
* ``unknown``: none of the above is in the trace.

For each, the CPU call that was running at the middle of the wait is named with the torch
operator and the user annotation (``record_function`` range) around it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.definitions import KERNEL_LATENCY_US
from torchdoctor.analysis.gpu_activity import SYNC_CALLS, GpuActivity
from torchdoctor.trace.arrays import distinct, member
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

MAX_DETAILED = 32
"""Gaps explained in detail, longest first (the rest count in the totals as ``unexplained``)."""
_STREAM_WAIT = ("cudaStreamWaitEvent", "hipStreamWaitEvent", "Stream Wait Event")


@dataclass(frozen=True)
class Wait:
    """One idle gap in which queued work did not start."""

    start_us: float
    """Gap start, relative to the trace's first event."""
    wait_ms: float
    """The gap's queued part beyond kernel-to-kernel latency."""
    kind: str
    work: str
    """Name of the kernel, copy or memset that ended the wait."""
    stream: int
    waited_on: str
    """The event or stream waited on, when the trace shows it ('' otherwise)."""
    cpu_call: str
    """Runtime call running on the CPU at the middle of the wait ('' if none)."""
    cpu_op: str
    """Innermost torch operator around that moment."""
    annotation: str
    """Innermost user annotation (``record_function``) around that moment."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DependencyWaits:
    """Waits on dependencies in the analysed steps (milliseconds, totals over the steps)."""

    total_ms: float
    by_kind_ms: dict[str, float]
    count: int
    longest: list[Wait]
    """The longest waits with their evidence, longest first."""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "longest": [w.to_dict() for w in self.longest]}


def idle_gaps(steps: Steps, act: GpuActivity) -> iv.Intervals:
    """Device-idle intervals inside the step windows (no activity on any stream), leaving out
    the gaps in which the device ran work the trace does not hold (``analysis/unrecorded.py``)."""
    busy = act.busy()
    parts = [
        iv.gaps(busy, float(lo), float(hi))
        for lo, hi in zip(steps.starts_us, steps.ends_us, strict=True)
    ]
    if not parts:
        return iv.EMPTY
    g0, g1 = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    if act.unrecorded.any():
        k = np.searchsorted(act.start_us, g1, side="left")
        ok = k < len(act.start_us)
        hidden = np.zeros(len(g1), dtype=bool)
        hidden[ok] = act.unrecorded[k[ok]]
        g0, g1 = g0[~hidden], g1[~hidden]
    return g0, g1


def dependency_waits(table: TraceTable, act: GpuActivity, gaps: iv.Intervals) -> DependencyWaits:
    """Find and explain the waits among ``gaps`` (device-idle intervals in the steps)."""
    g0, g1 = gaps
    k = np.searchsorted(act.start_us, g1, side="left")
    has_next = k < len(act.start_us)
    launch = np.full(len(g0), np.nan)
    launch[has_next] = act.launch_us[k[has_next]]
    queued_from = np.maximum(g0, np.nan_to_num(launch, nan=np.inf))
    wait = np.clip(g1 - queued_from - KERNEL_LATENCY_US, 0.0, None)
    idx = np.flatnonzero(wait > 0)
    order = idx[np.argsort(-wait[idx], kind="stable")]
    detailed = [
        _explain(table, act, int(k[i]), float(g0[i]), float(g1[i]), wait[i])
        for i in order[:MAX_DETAILED]
    ]
    by_kind: dict[str, float] = {}
    for w in detailed:
        by_kind[w.kind] = by_kind.get(w.kind, 0.0) + w.wait_ms
    rest = float(wait[order[MAX_DETAILED:]].sum()) / 1000.0
    if rest > 0:
        by_kind["unexplained"] = rest
    return DependencyWaits(
        total_ms=float(wait[idx].sum()) / 1000.0,
        by_kind_ms={k2: round(v, 3) for k2, v in by_kind.items()},
        count=len(idx),
        longest=detailed[:8],
    )


def _explain(
    table: TraceTable, act: GpuActivity, k: int, g0: float, g1: float, wait_us: float
) -> Wait:
    row = int(act.rows[k])
    mid = (g0 + g1) / 2
    call = _name(table, innermost(table, mid, Kind.RUNTIME, Kind.DRIVER))
    op = innermost(table, mid, Kind.CPU_OP, skip=("ProfilerStep#",))
    note = innermost(table, mid, Kind.USER_ANNOTATION, skip=("ProfilerStep#",))
    stream = int(table.stream[row])
    kind, waited_on = _classify(table, act, k, mid, call)
    return Wait(
        start_us=round(g0, 3),
        wait_ms=round(float(wait_us) / 1000.0, 3),
        kind=kind,
        work=_name(table, row),
        stream=stream,
        waited_on=waited_on,
        cpu_call=call,
        cpu_op=_name(table, op),
        annotation=_name(table, note),
    )


def _classify(
    table: TraceTable, act: GpuActivity, k: int, mid: float, call: str
) -> tuple[str, str]:
    """The kind of wait (see the module docstring) and what was waited on, if shown."""
    row = int(act.rows[k])
    launch = _launch_row(table, row)
    launch_blocks = launch >= 0 and table.ts[launch] + table.dur[launch] >= mid
    if launch_blocks and table.kind[row] == Kind.KERNEL and _first_of_name(table, act, k):
        return "first-launch", ""
    if act.cls[k] == 1 or bool(iv.covered(act.cpu_collectives, np.array([mid]))[0]):
        return "collective", ""
    waited = _stream_wait(table, act, k, int(table.stream[row]))
    if waited is not None:
        return "stream-wait", waited
    if call in SYNC_CALLS or "Memcpy" in call or "Synchronize" in call:
        return "blocking-copy", ""
    return "unknown", ""


def _name(table: TraceTable, row: int) -> str:
    return table.names[int(table.name[row])] if row >= 0 else ""


def innermost(table: TraceTable, t: float, *kinds: Kind, skip: tuple[str, ...] = ()) -> int:
    """The latest-starting event of ``kinds`` that covers time ``t`` (-1 if none)."""
    rows = table.of_kind(*kinds)
    rows = rows[(table.ts[rows] <= t) & (table.ts[rows] + table.dur[rows] >= t)]
    if skip:
        rows = np.array(
            [r for r in rows if not table.names[int(table.name[r])].startswith(skip)],
            dtype=np.int64,
        )
    return int(rows[np.argmax(table.ts[rows])]) if len(rows) else -1


def _launch_row(table: TraceTable, row: int) -> int:
    c = int(table.corr[row])
    if c < 0:
        return -1
    rows = table.of_kind(Kind.RUNTIME, Kind.DRIVER)
    hit = rows[table.corr[rows] == c]
    return int(hit[0]) if len(hit) else -1


def _first_of_name(table: TraceTable, act: GpuActivity, k: int) -> bool:
    same = table.name[act.rows[:k]] == table.name[act.rows[k]]
    return not bool(same.any())


def _stream_wait(table: TraceTable, act: GpuActivity, k: int, stream: int) -> str | None:
    """The stream-wait-event issued for ``stream`` since its previous work, as text."""
    on_stream = np.flatnonzero(table.stream[act.rows[:k]] == stream)
    since = float(act.end_us[on_stream[-1]]) if len(on_stream) else -np.inf
    launched = act.launch_us[k]
    rows = table.rows_named(lambda n: n in _STREAM_WAIT, Kind.GPU_SYNC, Kind.RUNTIME)
    if not np.isnan(launched):
        rows = rows[(table.ts[rows] <= launched) & (table.ts[rows] >= min(since, launched))]
    syncs = [r for r in rows if table.kind[r] == Kind.GPU_SYNC and table.stream[r] == stream]
    if syncs:
        return f"stream {stream} waited on an event (Stream Wait Event, correlation {table.corr[syncs[-1]]})"
    calls = [r for r in rows if table.kind[r] == Kind.RUNTIME]
    if calls:
        return f"{table.names[int(table.name[calls[-1]])]} before the launch"
    return None


def idle_touching(gaps: iv.Intervals, ranges: iv.Intervals) -> float:
    """Total length (ms) of the idle gaps that overlap any of the disjoint, sorted ``ranges``:
    the device idle while (or right after) the CPU was held in them."""
    g0, g1 = gaps
    s, e = ranges
    if not len(g0) or not len(s):
        return 0.0
    # the first range ending after each gap's start; it overlaps the gap if it starts before its end
    k = np.searchsorted(e, g0, side="right")
    ok = k < len(s)
    hit = np.zeros(len(g0), dtype=bool)
    hit[ok] = s[k[ok]] < g1[ok]
    return float((g1 - g0)[hit].sum()) / 1000.0


def blocking_copy_calls(
    table: TraceTable, act: GpuActivity, window: tuple[float, float]
) -> tuple[iv.Intervals, dict[str, int]]:
    """CPU ranges of blocking copy calls (``cudaMemcpy``...; and the launch calls of copies into
    pageable host memory, which block) starting in ``window``, and their count by name."""
    names = ("cudaMemcpy", "hipMemcpy", "hipMemcpyWithStream", "cudaMemcpy2D")
    rows = table.rows_named(lambda n: n in names, Kind.RUNTIME)
    d2h = act.rows[act.pageable & (act.memcpy_dir == "DtoH")]
    corr = table.corr[d2h]
    runtime = table.of_kind(Kind.RUNTIME, Kind.DRIVER)
    launches = runtime[member(table.corr[runtime], corr[corr >= 0])]
    rows = distinct(np.concatenate((rows, launches))).astype(np.int64)  # np.union1d
    rows = rows[(table.ts[rows] >= window[0]) & (table.ts[rows] < window[1])]
    counts: dict[str, int] = {}
    for r in rows:
        n = table.names[int(table.name[r])]
        counts[n] = counts.get(n, 0) + 1
    return iv.union(table.ts[rows], table.ts[rows] + table.dur[rows]), counts
