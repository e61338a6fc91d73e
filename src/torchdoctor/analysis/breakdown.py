"""Step time breakdown: where each step's wall time went, on the GPU and (when idle) why.

Definitions (also in docs/analyses.md):

* Busy time is the union of device activity in the step window, attributed exclusively in the
  order compute > communication > memcpy (by direction) > memset: a copy hidden under a kernel
  costs nothing, so it is not counted twice.
* Idle time is the rest of the window. Each idle gap is split by cause, in this order:
  data loading (the CPU was inside a DataLoader ``__next__`` during the gap), synchronisation
  (the CPU was blocked in a synchronising call when the GPU ran dry, so nothing was queued),
  waiting in a collective (the CPU was inside a CPU collective, waiting for other ranks: never
  host overhead), input pipeline (the first gap of a step, while the CPU ran no torch operator:
  a generator, a prefetch thread or another loader producing the batch), host overhead (the work
  that ended the gap was launched only after the gap began: Python, dispatcher and launch cost),
  short gaps (the next work was already queued: the device's own kernel-to-kernel latency, up to
  ``KERNEL_LATENCY_US`` per gap) and dependency waits (queued work that did not start for longer
  than that: a stream waiting on an event, a collective waiting for other ranks, a blocking copy
  behind queued work, a first launch loading its module; see ``analysis/waits.py``).
* One more cause comes first, and only in traces that have it: ``not_recorded``, a gap that
  ends at work queued behind device work the trace does not hold (launched before the profiler
  started, or a graph replay whose kernels were not recorded; ``analysis/unrecorded.py``). The
  device was busy then, with work the trace cannot show: the whole gap counts there.
* The parts add up to the step time exactly.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.definitions import KERNEL_LATENCY_US
from torchdoctor.analysis.gpu_activity import GpuActivity
from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

BUSY_PARTS = (
    "compute",
    "communication",
    "memcpy_h2d",
    "memcpy_d2h",
    "memcpy_d2d",
    "memcpy_other",
    "memset",
)
IDLE_PARTS = (
    "data_loading",
    "synchronization",
    "collective_wait",
    "input_pipeline",
    "host_overhead",
    "short_gaps",
    "dependency_wait",
)
NOT_RECORDED = "not_recorded"
"""The idle part of traces that hold queued-behind-unrecorded work (absent from the others)."""
CPU_PARTS = ("cpu_operators", "communication", "data_loading", "input_pipeline", "other")
_NOT_WORK = ("ProfilerStep#", "enumerate(DataLoader)#")
_DIR_PART = {"HtoD": "memcpy_h2d", "DtoH": "memcpy_d2h", "DtoD": "memcpy_d2d"}


@dataclass(frozen=True)
class StepBreakdown:
    """One step (or the sum over steps). All times in milliseconds."""

    step: int | None
    """ProfilerStep number, or None for the total over all steps."""
    step_ms: float
    busy_ms: dict[str, float]
    """Device busy time by part (BUSY_PARTS), exclusive; empty for CPU-only traces."""
    idle_ms: dict[str, float]
    """Device idle time by cause (IDLE_PARTS); for CPU-only traces, CPU_PARTS instead."""
    pageable_h2d_ms: float
    """Host-to-device copy time from pageable memory (a subset of the copies, not exclusive)."""
    pageable_d2h_ms: float
    """Device-to-host copy time into pageable memory."""

    @property
    def gpu_busy_ms(self) -> float:
        return sum(self.busy_ms.values())

    @property
    def gpu_idle_ms(self) -> float:
        return sum(self.idle_ms.values()) if self.busy_ms else 0.0

    def share(self, ms: float) -> float:
        """``ms`` as a fraction of this step's time (0 for an empty step)."""
        return ms / self.step_ms if self.step_ms > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def step_breakdowns(table: TraceTable, steps: Steps, act: GpuActivity) -> list[StepBreakdown]:
    """A breakdown for each step window, in step order."""
    if not len(act.rows):
        # The operators' union is built once and each step clips its slice (a binary search):
        # building it per step made a CPU-only trace quadratic in its step count.
        rows = table.rows_named(lambda n: not n.startswith(_NOT_WORK), Kind.CPU_OP)
        ops = iv.union(table.ts[rows], table.ts[rows] + table.dur[rows])
        carried = _carried_over(table, steps)
        return [
            _cpu_step(n, float(lo), float(hi), ops, act, float(c))
            for n, lo, hi, c in zip(
                steps.numbers, steps.starts_us, steps.ends_us, carried, strict=True
            )
        ]
    # Exclusive attribution is local in time, so it is done once over the whole trace and each
    # step takes its slice: the cost stays linear in events however many steps there are.
    parts = _exclusive_parts(act)
    claimed = iv.union(
        np.concatenate([p[0] for p in parts.values()]),
        np.concatenate([p[1] for p in parts.values()]),
    )
    copies = {
        "HtoD": _sorted_copies(act, act.pageable & (act.memcpy_dir == "HtoD")),
        "DtoH": _sorted_copies(act, act.pageable & (act.memcpy_dir == "DtoH")),
    }
    out = [
        _gpu_step(n, float(lo), float(hi), parts, claimed, copies, act)
        for n, lo, hi in zip(steps.numbers, steps.starts_us, steps.ends_us, strict=True)
    ]
    if not any(s.idle_ms.get(NOT_RECORDED, 0.0) > 0 for s in out):
        for s in out:  # the part appears only where it holds time
            s.idle_ms.pop(NOT_RECORDED, None)
    return out


def total_breakdown(per_step: list[StepBreakdown]) -> StepBreakdown:
    """The sum over steps (step=None)."""

    def add(key: str) -> dict[str, float]:
        acc: dict[str, float] = {}
        for s in per_step:
            for k, v in getattr(s, key).items():
                acc[k] = acc.get(k, 0.0) + v
        return acc

    return StepBreakdown(
        step=None,
        step_ms=sum(s.step_ms for s in per_step),
        busy_ms=add("busy_ms"),
        idle_ms=add("idle_ms"),
        pageable_h2d_ms=sum(s.pageable_h2d_ms for s in per_step),
        pageable_d2h_ms=sum(s.pageable_d2h_ms for s in per_step),
    )


def _exclusive_parts(act: GpuActivity) -> dict[str, iv.Intervals]:
    """Each busy part's time not already claimed by a higher-priority part (disjoint sets)."""
    claimed: iv.Intervals = iv.EMPTY
    parts: dict[str, iv.Intervals] = {}
    for part, mask in _busy_masks(act):
        mine = iv.subtract(iv.union(act.start_us[mask], act.end_us[mask]), claimed)
        parts[part] = mine
        claimed = iv.union(
            np.concatenate([claimed[0], mine[0]]), np.concatenate([claimed[1], mine[1]])
        )
    return parts


def _gpu_step(
    n: int,
    lo: float,
    hi: float,
    parts: dict[str, iv.Intervals],
    claimed: iv.Intervals,
    copies: dict[str, iv.Intervals],
    act: GpuActivity,
) -> StepBreakdown:
    busy = {part: iv.total(iv.clip(sets, lo, hi)) / 1000.0 for part, sets in parts.items()}
    idle = _idle_causes(iv.gaps(claimed, lo, hi), act, lo)
    return StepBreakdown(
        step=n,
        step_ms=(hi - lo) / 1000.0,
        busy_ms=busy,
        idle_ms=idle,
        pageable_h2d_ms=_clipped_total(copies["HtoD"], lo, hi),
        pageable_d2h_ms=_clipped_total(copies["DtoH"], lo, hi),
    )


def _busy_masks(act: GpuActivity) -> list[tuple[str, np.ndarray]]:
    masks = [("compute", act.cls == 0), ("communication", act.cls == 1)]
    is_copy = act.cls == 2
    for d, part in _DIR_PART.items():
        masks.append((part, is_copy & (act.memcpy_dir == d)))
    known = member(act.memcpy_dir, list(_DIR_PART))
    masks.append(("memcpy_other", is_copy & ~known))
    masks.append(("memset", act.cls == 3))
    return masks


def _sorted_copies(act: GpuActivity, mask: np.ndarray) -> iv.Intervals:
    """Copy intervals sorted by start (copies on one stream do not overlap; summed, not merged)."""
    order = np.argsort(act.start_us[mask], kind="stable")
    return act.start_us[mask][order], act.end_us[mask][order]


def _clipped_total(copies: iv.Intervals, lo: float, hi: float) -> float:
    """Summed length of the copies' parts inside [lo, hi], in milliseconds."""
    s, e = copies
    k0 = np.searchsorted(e, lo, side="right") if len(e) else 0
    k1 = np.searchsorted(s, hi, side="left") if len(s) else 0
    s, e = s[max(0, k0 - 1) : k1], e[max(0, k0 - 1) : k1]
    return float(np.sum(np.clip(e, lo, hi) - np.clip(s, lo, hi))) / 1000.0


def _idle_causes(gaps: iv.Intervals, act: GpuActivity, step_start_us: float) -> dict[str, float]:
    """Split idle gaps by cause (see the module docstring); milliseconds. ``not_recorded`` is
    present only in traces that hold work queued behind unrecorded device work."""
    keys = (*IDLE_PARTS, NOT_RECORDED) if act.unrecorded.any() else IDLE_PARTS
    if not len(gaps[0]):
        return dict.fromkeys(keys, 0.0)
    parts = gap_causes(gaps, act, step_start_us)
    return {k: float(parts[k].sum()) / 1000.0 for k in keys}


def gap_causes(gaps: iv.Intervals, act: GpuActivity, step_start_us: float) -> dict[str, np.ndarray]:
    """Each idle gap of one step split by cause (IDLE_PARTS), microseconds per gap.

    The same split the breakdown sums; the HTML timeline and the Perfetto export draw it.
    ``step_start_us`` is where the step begins (for causes that depend on a gap's place in it).
    """
    g0, g1 = gaps
    hidden = _ends_behind_unrecorded(g1, act)
    length = np.where(hidden, 0.0, g1 - g0)
    data = np.minimum(_overlap_per_gap(gaps, act.dataloader), length)
    rest = length - data
    launch = _next_launch(g1, act)
    # Part of the gap before the work that ended it was even launched: the CPU was late. With
    # no launch on record (the window ends idle), the device simply had nothing from the host.
    late = np.clip(np.nan_to_num(launch - g0, nan=np.inf), 0.0, None)
    late = np.minimum(late, rest)
    blocked = iv.covered(act.sync_calls, g0) | _sync_ended_inside(act.sync_calls, g0, g1)
    sync = np.where(blocked, late, 0.0)
    late_end = g0 + late
    # CPU time inside a collective while the device waited for the launch: communication.
    in_coll = np.minimum(_overlap_per_gap((g0, late_end), act.cpu_collectives), late)
    coll = np.where(blocked, 0.0, in_coll)
    host = np.where(blocked, 0.0, late - coll)
    outside_ops = late - np.minimum(_overlap_per_gap((g0, late_end), act.cpu_ops), late)
    starts_step = _first_gap_of_step(g0, step_start_us, act)
    # Only when no DataLoader is seen in the gap: a DataLoader wait is already named above.
    inputs = np.where(starts_step & (data <= 0), np.minimum(outside_ops, host), 0.0)
    host = host - inputs
    queued = rest - late
    short = np.minimum(queued, KERNEL_LATENCY_US)
    return {
        "data_loading": data,
        "synchronization": sync,
        "collective_wait": coll,
        "input_pipeline": inputs,
        "host_overhead": host,
        "short_gaps": short,
        "dependency_wait": queued - short,
        NOT_RECORDED: np.where(hidden, g1 - g0, 0.0),
    }


def _ends_behind_unrecorded(gap_end: np.ndarray, act: GpuActivity) -> np.ndarray:
    """True for gaps that end at an activity queued behind work the trace does not hold."""
    if not act.unrecorded.any():
        return np.zeros(len(gap_end), dtype=bool)
    k = np.searchsorted(act.start_us, gap_end, side="left")
    ok = k < len(act.start_us)
    out = np.zeros(len(gap_end), dtype=bool)
    out[ok] = act.unrecorded[k[ok]]
    return out


def _first_gap_of_step(g0: np.ndarray, step_start_us: float, act: GpuActivity) -> np.ndarray:
    """True for the gap the step begins with: no device work started between the step's start
    and the gap (the GPU is idle when the step begins, or becomes idle before any new work)."""
    out = np.zeros(len(g0), dtype=bool)
    if len(g0):
        k = np.searchsorted(act.start_us, step_start_us, side="left")
        first_start = act.start_us[k] if k < len(act.start_us) else np.inf
        out[0] = g0[0] <= first_start
    return out


def _overlap_per_gap(gaps: iv.Intervals, ranges: iv.Intervals) -> np.ndarray:
    """For each gap, the length covered by the disjoint set ``ranges``."""
    g0, g1 = gaps
    if not len(ranges[0]):
        return np.zeros(len(g0))
    # Cumulative covered length up to t, evaluated at both gap ends.
    s, e = ranges
    cum = np.concatenate([[0.0], np.cumsum(e - s)])

    def covered_until(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(s, t, side="right")
        partial = np.where(
            k > 0, np.clip(t - s[np.maximum(k - 1, 0)], 0.0, (e - s)[np.maximum(k - 1, 0)]), 0.0
        )
        return cum[np.maximum(k - 1, 0)] * (k > 0) + partial

    out: np.ndarray = covered_until(g1) - covered_until(g0)
    return out


def _next_launch(gap_end: np.ndarray, act: GpuActivity) -> np.ndarray:
    """Launch time of the activity that starts when each gap ends (NaN if none or unknown)."""
    k = np.searchsorted(act.start_us, gap_end, side="left")
    ok = k < len(act.start_us)
    out = np.full(len(gap_end), np.nan)
    out[ok] = act.launch_us[k[ok]]
    return out


def _sync_ended_inside(calls: iv.Intervals, g0: np.ndarray, g1: np.ndarray) -> np.ndarray:
    if not len(calls[0]):
        return np.zeros(len(g0), dtype=bool)
    k = np.searchsorted(calls[1], g0, side="right")
    ok = k < len(calls[1])
    out = np.zeros(len(g0), dtype=bool)
    out[ok] = calls[1][k[ok]] < g1[ok]
    return out


def _opening_gap(ops: iv.Intervals, data: iv.Intervals, comm: iv.Intervals, t0: float) -> float:
    """Microseconds from ``t0`` until the first operator, loader or collective runs (0 when one
    is running at ``t0``; 0 when none follows)."""
    work = iv.union(
        np.concatenate([ops[0], data[0], comm[0]]), np.concatenate([ops[1], data[1], comm[1]])
    )
    s, e = work
    k = int(np.searchsorted(s, t0, side="right")) - 1
    if k >= 0 and e[k] > t0:
        return 0.0
    return float(s[k + 1] - t0) if k + 1 < len(s) else 0.0


def _carried_over(table: TraceTable, steps: Steps) -> np.ndarray:
    """For each step, when the last annotated range begun before it ends inside it (its start
    if none): the previous step's work finishing, such as ``Optimizer.step#AdamW.step`` when the
    step marker is advanced from the optimizer's own hook. A range that spans the whole step
    (an annotation around the loop) carries nothing over."""
    lo = np.asarray(steps.starts_us, dtype=float)
    hi = np.asarray(steps.ends_us, dtype=float)
    out = lo.copy()
    if not len(lo):
        return out
    rows = table.rows_named(lambda n: not n.startswith(_NOT_WORK), Kind.USER_ANNOTATION)
    if not len(rows):
        return out
    start = table.ts[rows].astype(float)
    end = start + table.dur[rows]
    k = np.searchsorted(lo, end, side="left") - 1  # the step whose start the range's end follows
    ok = (k >= 0) & (start < lo[np.maximum(k, 0)]) & (end <= hi[np.maximum(k, 0)])
    np.maximum.at(out, k[ok], end[ok])
    return out


def _cpu_step(
    n: int, lo: float, hi: float, all_ops: iv.Intervals, act: GpuActivity, carried: float = 0.0
) -> StepBreakdown:
    """CPU-only trace: time inside DataLoader, in CPU collectives (gloo), in other operators
    (``all_ops``: the union of every operator's span), and everything else (Python and glue),
    exclusive in that order. ``carried``: until when the previous step's annotated work runs on
    into this one (that time is not the batch being produced)."""
    ops = iv.clip(all_ops, lo, hi)
    data = iv.clip(act.dataloader, lo, hi)
    comm = iv.subtract(iv.clip(act.cpu_collectives, lo, hi), data)
    taken = iv.union(np.concatenate([data[0], comm[0]]), np.concatenate([data[1], comm[1]]))
    op_ms = iv.total(iv.subtract(ops, taken)) / 1000.0
    data_ms, comm_ms = iv.total(data) / 1000.0, iv.total(comm) / 1000.0
    step_ms = (hi - lo) / 1000.0
    # The step opens outside any operator, loader or collective: the batch is being produced
    # by something torch does not see (a generator, a queue, another loader).
    # Only where the trace records operators: without them "outside any operator" is unknown.
    input_ms = _opening_gap(ops, data, comm, max(lo, carried)) / 1000.0 if len(ops[0]) else 0.0
    idle = {
        "cpu_operators": op_ms,
        "communication": comm_ms,
        "data_loading": data_ms,
        "input_pipeline": input_ms,
        "other": max(step_ms - op_ms - data_ms - comm_ms - input_ms, 0.0),
    }
    return StepBreakdown(n, step_ms, {}, idle, 0.0, 0.0)
