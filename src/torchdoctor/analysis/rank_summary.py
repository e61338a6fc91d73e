"""One rank's summary: the few numbers cross-rank analysis needs, small enough to send between
processes (kilobytes, whatever the trace's size).

A worker loads one rank's trace, analyses it and returns only this; the table stays behind.
Times are milliseconds except collective start times, which are absolute trace microseconds
(the trace's own clock, so ranks of one job can be compared).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.breakdown import StepBreakdown
from torchdoctor.analysis.bundle import TraceAnalysis

# Private names on purpose: one definition of a collective's kind and of a CPU collective call.
from torchdoctor.analysis.communication import _collective as collective_kind
from torchdoctor.analysis.gpu_activity import CPU_COLLECTIVE
from torchdoctor.trace.table import TraceTable

TOP_KERNELS = 5


@dataclass(frozen=True)
class Collectives:
    """A rank's collective calls in time order, each tied to the step it started in."""

    kinds: tuple[str, ...]
    """AllReduce, AllGather, ... (see ``collective_kind``)."""
    steps: np.ndarray
    """Step number each call started in."""
    start_us: np.ndarray
    """Absolute start (trace clock, µs): on the GPU the kernel's start, else the CPU call's."""
    dur_us: np.ndarray

    def __len__(self) -> int:
        return len(self.kinds)


@dataclass(frozen=True)
class RankSummary:
    """What one rank's worker returns: per-step times, waiting, breakdown, collectives."""

    rank: int | None
    """From the trace's ``distributedInfo``, else the file name; None if neither says."""
    path: str
    world_size: int | None
    backend: str | None
    device: str | None
    has_gpu: bool
    events: int
    step_numbers: tuple[int, ...]
    step_ms: np.ndarray
    wait_ms: np.ndarray
    """Per step: time waiting in collectives (exposed GPU communication, and CPU collective calls
    while the GPU was idle; all of them on a CPU-only trace)."""
    total: StepBreakdown
    """The breakdown summed over the steps (divide by the step count for ms per step)."""
    exposed_comm_ms: float
    """Exposed GPU communication per step (0 on CPU-only traces)."""
    collectives: Collectives
    top_kernels: tuple[tuple[str, float], ...]
    """(name, total ms) of the costliest kernels."""
    findings: tuple[dict[str, Any], ...] = field(default=())
    """The rank's own findings (as JSON data), most valuable first."""

    @property
    def n_steps(self) -> int:
        return len(self.step_numbers)

    @property
    def mean_step_ms(self) -> float:
        return float(self.step_ms.mean()) if self.n_steps else 0.0

    @property
    def work_ms(self) -> np.ndarray:
        """Per step: the rank's own work, its step time minus its waiting in collectives."""
        out: np.ndarray = self.step_ms - self.wait_ms
        return out

    def per_step(self, total_ms: float) -> float:
        return total_ms / max(self.n_steps, 1)


def summarize(a: TraceAnalysis) -> RankSummary:
    """The summary of an analysed trace (see ``RankSummary``)."""
    meta = a.table.meta
    waiting = waiting_intervals(a)
    wait = [
        iv.total(iv.clip(waiting, float(lo), float(hi))) / 1000.0
        for lo, hi in zip(a.steps.starts_us, a.steps.ends_us, strict=True)
    ]
    top = getattr(a.kernels, "top_kernels", ())[:TOP_KERNELS]
    return RankSummary(
        rank=meta.rank,
        path=meta.path,
        world_size=meta.world_size,
        backend=meta.backend,
        device=str(meta.devices[0].get("name")) if meta.devices else None,
        has_gpu=a.has_gpu,
        events=len(a.table),
        step_numbers=tuple(int(n) for n in a.steps.numbers),
        step_ms=np.asarray(a.steps.durations_ms, dtype=np.float64),
        wait_ms=np.asarray(wait, dtype=np.float64),
        total=a.total,
        exposed_comm_ms=a.per_step_ms(a.comm.exposed_ms),
        collectives=collectives(a),
        top_kernels=tuple((k.name, round(k.total_ms, 3)) for k in top),
    )


def waiting_intervals(a: TraceAnalysis) -> iv.Intervals:
    """When the rank waited in collectives: exposed GPU communication, plus CPU collective calls
    while no GPU work ran (all CPU collective time on a CPU-only trace)."""
    act = a.activity
    exposed = iv.subtract(act.busy("communication"), act.busy("compute"))
    cpu = iv.subtract(act.cpu_collectives, act.busy()) if a.has_gpu else act.cpu_collectives
    return iv.union(np.concatenate([exposed[0], cpu[0]]), np.concatenate([exposed[1], cpu[1]]))


def collectives(a: TraceAnalysis) -> Collectives:
    """The rank's collectives inside its steps: communication kernels on a GPU trace, the
    outermost CPU collective calls otherwise (see ``_cpu_calls``)."""
    t, act = a.table, a.activity
    if a.has_gpu:
        m = act.cls == 1
        names = t.name[act.rows[m]]
        start, end = act.start_us[m], act.end_us[m]
    else:
        names, start, end = _cpu_calls(t)
    step_idx = np.searchsorted(a.steps.starts_us, start, side="right") - 1
    ok = step_idx >= 0
    if len(a.steps):
        ok &= start < a.steps.ends_us[np.clip(step_idx, 0, len(a.steps) - 1)]
    numbers = np.asarray(a.steps.numbers, dtype=np.int64)
    kinds = {int(c): collective_kind(t.names[int(c)]) for c in np.unique(names[ok])}
    return Collectives(
        kinds=tuple(kinds[int(c)] for c in names[ok]),
        steps=numbers[step_idx[ok]] if ok.any() else np.zeros(0, np.int64),
        start_us=start[ok] + t.base_us,
        dur_us=(end - start)[ok],
    )


def _cpu_calls(t: TraceTable) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One range per collective the program issued, in time order.

    A call appears twice: as the ``c10d::allreduce_`` the caller's thread dispatches, and as the
    backend's ``gloo:all_reduce`` on a worker thread, which starts later and may end in the next
    step (it closes when the caller next waits). Counting both, or nesting across threads, makes
    the count per step depend on timing, so the caller's ``c10d::`` calls are used when the
    trace has them (they also mark when the rank arrived), the backend's otherwise; a call
    nested in an earlier one on the same thread is its part."""
    rows = t.rows_named(lambda n: bool(CPU_COLLECTIVE.match(n)))
    caller = t.rows_named(lambda n: bool(CPU_COLLECTIVE.match(n)) and n.startswith("c10d::"))
    if len(caller):
        rows = caller
    rows = rows[np.lexsort((t.ts[rows], t.tid[rows]))]
    start, end, tid = t.ts[rows], t.ts[rows] + t.dur[rows], t.tid[rows]
    keep = np.ones(len(rows), dtype=bool)
    for lo, hi in _runs(tid):
        reach = np.maximum.accumulate(end[lo:hi])
        keep[lo + 1 : hi] = start[lo + 1 : hi] >= reach[:-1]
    rows = rows[keep]
    rows = rows[np.argsort(t.ts[rows], kind="stable")]
    return t.name[rows], t.ts[rows], t.ts[rows] + t.dur[rows]


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) index pairs of the runs of equal values in a sorted array."""
    if not len(values):
        return []
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    bounds = [0, *cuts.tolist(), len(values)]
    return list(pairwise(bounds))
