"""Operator table, like ``torch.profiler``'s ``key_averages()``: CPU and device time per operator.

Operators are the ``cpu_op`` events. On each thread they nest (``aten::linear`` calls
``aten::addmm``); an operator's *self* CPU time is its duration minus its direct children's.
Device time (kernels, memcpys, memsets) is charged to the operator that launched it: the launch
call (joined to the device activity by correlation id) lies inside the innermost operator on the
same thread, which gets it as *self* device time; that operator and all its ancestors get it as
*total* device time.

A call nested inside a call of the same name (``aten::copy_`` inside ``aten::copy_``) adds its
self times but not its totals: the outer call's total already holds it, and counting it again
gave an operator more CPU time than the step lasted. ``ProfilerStep#N`` ranges are markers, not
operators: they keep their place in the nesting but get no row.
"""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import numpy as np

from torchdoctor.analysis._join import gpu_rows, in_window, launch_of
from torchdoctor.trace.arrays import member, unique_codes
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import TraceTable

_EPS_US = 1e-6  # float slack when comparing nested boundaries (timestamps are rounded to 1 ns)
_MAX_PASSES = 10_000  # the pointer walks converge in O(log n + depth) passes; this only guards
_MARKERS = ("ProfilerStep#",)


@dataclass(frozen=True)
class OperatorRow:
    """One operator name, summed over its calls that started in the window."""

    name: str
    calls: int
    total_cpu_ms: float
    """Duration of its calls, each counted once: a call inside a call of the same name is in the
    outer call's duration."""
    self_cpu_ms: float
    """Duration minus the durations of the operators it called directly."""
    total_device_ms: float
    """Device time launched by the operator or anything it called (nested same-name calls once)."""
    self_device_ms: float
    """Device time launched directly by the operator (it is the innermost operator)."""
    mean_cpu_us: float
    """total_cpu_ms per call not inside a call of the same name, in µs."""


@dataclass(frozen=True)
class OperatorStats:
    """The operator table over the analysed window."""

    steps: int
    call_count: int
    name_count: int
    device_ms: float
    """Summed duration of the device activities that started in the window."""
    attributed_device_ms: float
    """The part of device_ms launched from inside an operator."""
    top_by_self_device: tuple[OperatorRow, ...]
    top_by_self_cpu: tuple[OperatorRow, ...]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        d = asdict(self)
        d["top_by_self_device"] = [asdict(r) for r in self.top_by_self_device]
        d["top_by_self_cpu"] = [asdict(r) for r in self.top_by_self_cpu]
        return d


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class _Ops(NamedTuple):
    """CPU operators sorted by (thread, start, longest first), with their nesting."""

    rows: np.ndarray
    ts: np.ndarray
    end: np.ndarray
    thread: np.ndarray
    parent: np.ndarray
    """Position (in this order) of the innermost enclosing operator, -1 for a root."""


def analyze_operators(table: TraceTable, steps: Steps, top_n: int = 20) -> OperatorStats:
    """Calls, total/self CPU ms and total/self device ms per operator name; the top ``top_n``
    names by self device time and by self CPU time."""
    ops = _nest(table)
    self_dev, total_dev, attributed = _device_time(table, steps, ops)
    dur = ops.end - ops.ts
    child_dur = np.bincount(ops.parent[ops.parent >= 0], dur[ops.parent >= 0], len(dur))
    self_cpu = np.maximum(dur - child_dur, 0.0)
    lo, hi = steps.window
    win = (ops.ts >= lo) & (ops.ts < hi) if hi > lo else ops.ts == lo
    win &= ~_is_marker(table, ops.rows)
    outer = ~_inside_same_name(table.name[ops.rows], ops.parent)
    codes, inv, _ = unique_codes(table.name[ops.rows[win]])
    n = len(codes)
    once = outer[win]
    sums = [
        np.bincount(inv, x[win] * w, n) / 1e3
        for x, w in ((dur, once), (self_cpu, 1.0), (total_dev, once), (self_dev, 1.0))
    ]
    calls = np.bincount(inv, minlength=n)
    outer_calls = np.maximum(np.bincount(inv, once, n), 1)
    table_rows = [
        OperatorRow(
            name=table.names[codes[i]],
            calls=int(calls[i]),
            total_cpu_ms=float(sums[0][i]),
            self_cpu_ms=float(sums[1][i]),
            total_device_ms=float(sums[2][i]),
            self_device_ms=float(sums[3][i]),
            mean_cpu_us=float(sums[0][i] * 1e3 / outer_calls[i]),
        )
        for i in range(n)
    ]
    gpu = in_window(table, steps, gpu_rows(table))
    return OperatorStats(
        steps=len(steps),
        call_count=int(win.sum()),
        name_count=n,
        device_ms=float(table.dur[gpu].sum()) / 1e3,
        attributed_device_ms=attributed,
        top_by_self_device=_top(table_rows, "self_device_ms", top_n),
        top_by_self_cpu=_top(table_rows, "self_cpu_ms", top_n),
    )


def total_cpu_ms_by_name(table: TraceTable, steps: Steps) -> dict[str, float]:
    """Total CPU ms per operator name over the calls that started in the window, a call inside a
    call of the same name counted once (in the outer call); step markers left out."""
    ops = _nest(table)
    lo, hi = steps.window
    win = (ops.ts >= lo) & (ops.ts < hi) if hi > lo else ops.ts == lo
    win &= ~_is_marker(table, ops.rows) & ~_inside_same_name(table.name[ops.rows], ops.parent)
    names = table.name[ops.rows[win]]
    sums = np.bincount(names, (ops.end - ops.ts)[win], len(table.names)) / 1e3
    return {table.names[c]: float(sums[c]) for c in unique_codes(names)[0]}


def _is_marker(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Per row: is it a step marker rather than an operator."""
    codes = table.codes_matching(lambda n: n.startswith(_MARKERS))
    return member(table.name[rows], codes)


def _inside_same_name(name: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per operator: does an enclosing operator (at any depth) have the same name."""
    out = np.zeros(len(parent), dtype=bool)
    anc = parent.copy()
    has = anc >= 0
    # Only a name that encloses some operator can enclose one of its own: the walk skips the
    # rest (most operators: the leaves' names, aten::empty, aten::view..., enclose nothing).
    live = np.flatnonzero(has & member(name, name[parent[has]]))
    for _ in range(_MAX_PASSES):  # one pass per nesting level
        if not len(live):
            break
        out[live] |= name[anc[live]] == name[live]
        live = live[~out[live]]
        anc[live] = parent[anc[live]]
        live = live[anc[live] >= 0]
    return out


def _top(rows: list[OperatorRow], key: str, n: int) -> tuple[OperatorRow, ...]:
    ranked = sorted(rows, key=lambda r: (-getattr(r, key), r.name))
    return tuple(r for r in ranked[: max(n, 0)] if getattr(r, key) > 0)


def _thread_key(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    out: np.ndarray = table.pid[rows].astype(np.int64) * (1 << 31) + table.tid[rows].astype(
        np.int64
    )
    return out


def _nest(table: TraceTable) -> _Ops:
    """Sort the operators and find each one's parent with a vectorised pointer walk.

    In (thread, start, longest-first) order the parent of an operator is the nearest earlier
    operator on its thread that contains it: every earlier one started no later, so the nearest
    that ends no earlier (less ``_EPS_US``). Each pass replaces a candidate that does not contain
    the operator by that candidate's own candidate; every skipped operator ended before the
    candidate did, so the walk is exact and takes about log2(n) + depth passes.
    """
    rows = np.flatnonzero(table.kind == Kind.CPU_OP)
    thread = _thread_key(table, rows)
    order = np.lexsort((-table.dur[rows], table.ts[rows], thread))
    rows, thread = rows[order], thread[order]
    ts, end = table.ts[rows], table.ts[rows] + table.dur[rows]
    cand = np.arange(len(rows)) - 1
    if len(rows):
        starts = np.flatnonzero(np.diff(thread)) + 1
        cand[starts] = -1
        cand[0] = -1
        # An operator that ends after every earlier one on its thread has no parent: settled
        # here, its walk (all its earlier siblings, log2 of them passes) is not needed.
        reach = np.empty_like(end)
        for lo, hi in zip([0, *starts.tolist()], [*starts.tolist(), len(rows)], strict=True):
            np.maximum.accumulate(end[lo:hi], out=reach[lo:hi])
        cand[1:][reach[:-1] < end[1:] - _EPS_US] = -1
    # Only operators whose candidate missed can miss again (the others keep theirs): each pass
    # looks at those, so the passes after the first cost a fraction of one.
    live = np.flatnonzero(cand >= 0)
    for _ in range(_MAX_PASSES):
        c = cand[live]
        live = live[end[c] < end[live] - _EPS_US]
        if not len(live):
            break
        cand[live] = cand[cand[live]]
        live = live[cand[live] >= 0]
    return _Ops(rows, ts, end, thread, cand)


def _innermost(table: TraceTable, ops: _Ops, rows: np.ndarray) -> np.ndarray:
    """Position of the innermost operator on the same thread enclosing each row's start."""
    if not len(ops.rows) or not len(rows):
        return np.full(len(rows), -1, dtype=np.int64)
    span = float(max(ops.end.max(), table.ts[rows].max()) - min(ops.ts.min(), 0.0)) + 1.0
    threads, rank_ops = np.unique(ops.thread, return_inverse=True)
    key_ops = rank_ops * span + ops.ts  # non-decreasing: ops are sorted by thread, then start
    t = table.ts[rows]
    th = _thread_key(table, rows)
    rank = np.clip(np.searchsorted(threads, th), 0, len(threads) - 1)
    pos = np.searchsorted(key_ops, rank * span + t + _EPS_US, side="right") - 1
    pos = np.where((threads[rank] == th) & (pos >= 0), pos, -1)
    pos = np.where((pos >= 0) & (ops.thread[np.maximum(pos, 0)] == th), pos, -1)
    for _ in range(_MAX_PASSES):
        p = np.maximum(pos, 0)
        miss = (pos >= 0) & (ops.end[p] < t - _EPS_US)
        if not miss.any():
            break
        pos[miss] = ops.parent[pos[miss]]
    return pos


def _device_time(
    table: TraceTable, steps: Steps, ops: _Ops
) -> tuple[np.ndarray, np.ndarray, float]:
    """Self and total device µs per operator, and the attributed device ms in the window."""
    gpu = gpu_rows(table)
    launch = launch_of(table, gpu)
    owner = np.full(len(gpu), -1, dtype=np.int64)
    has = launch >= 0
    owner[has] = _innermost(table, ops, launch[has])
    n = len(ops.rows)
    self_dev = np.bincount(owner[owner >= 0], table.dur[gpu][owner >= 0], n)
    total_dev = self_dev.copy()
    depth = _depth(ops.parent)
    by_depth = np.argsort(-depth, kind="stable")
    levels = np.split(by_depth, np.flatnonzero(np.diff(depth[by_depth])) + 1)
    for level in levels:  # deepest first: each level adds its totals to its parents
        level = level[ops.parent[level] >= 0]
        np.add.at(total_dev, ops.parent[level], total_dev[level])
    lo, hi = steps.window
    gts = table.ts[gpu]
    in_win = (gts >= lo) & (gts < hi) if hi > lo else gts == lo
    attributed = float(table.dur[gpu][in_win & (owner >= 0)].sum()) / 1e3
    return self_dev, total_dev, attributed


def _depth(parent: np.ndarray) -> np.ndarray:
    """Nesting depth (0 for roots), one vectorised pass per level."""
    depth = np.zeros(len(parent), dtype=np.int64)
    has = parent >= 0
    for _ in range(_MAX_PASSES):
        new = np.where(has, depth[np.maximum(parent, 0)] + 1, 0)
        if np.array_equal(new, depth):
            break
        depth = new
    return depth
