"""The window's operator summary read from the exported trace, not from the profiler's events.

``torch.profiler``'s ``events()`` builds one Python object per event (about 15 kB per
operator: 3 GB and two minutes for 200k operators on a 2-core machine); the trace file, read
into columns by ``trace/load.py``, costs a few hundred bytes per event. Same definitions as
``profiling.summarise_ops``: top-level operators are ``aten::`` operators whose enclosing
operator is not an ``aten::`` one and that do not run inside ``enumerate(DataLoader)`` (batch
assembly is input time); compute is classified by ``analysis/op_classes.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.gpu_activity import is_cpu_collective
from torchdoctor.analysis.kernel_names import kernel_category
from torchdoctor.analysis.op_classes import classify_op
from torchdoctor.analysis.operators import _innermost, _nest, _thread_key
from torchdoctor.rules.thresholds import TINY_OP_THRESHOLD_US
from torchdoctor.trace.kinds import Kind
from torchdoctor.trace.load import load_trace
from torchdoctor.trace.steps import find_steps

_DEVICE_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
_KERNEL_CLASS = {"gemm": "matmul", "convolution": "convolution", "attention": "attention"}


def summarise_trace(path: Path, steps: int) -> dict[str, Any]:
    """Top-level operators per step, their median duration (us), tiny-op time, and the share
    of operator (or device) time in matmul, convolution, recurrent and attention work."""
    table = load_trace(path)
    names = table.names
    ops = _nest(table)
    lo, hi = find_steps(table).window
    op_names = [names[c] for c in table.name[ops.rows]]
    aten = np.array([n.startswith("aten::") for n in op_names], dtype=bool)
    parent_aten = np.where(ops.parent >= 0, aten[np.maximum(ops.parent, 0)], False)
    top = aten & ~parent_aten & (ops.ts >= lo) & (ops.ts < hi if hi > lo else True)
    top &= ~_inside(table, ops, "enumerate(DataLoader)")
    idx = np.flatnonzero(top)
    durs = (ops.end - ops.ts)[idx]
    total_us = float(durs.sum())
    # Operators that computed on the CPU: no CUDA runtime or driver call inside them (a launch,
    # a copy, a wait); the intra-op threads can only speed these up.
    cpu_us = float(durs[~_calls_the_device(table, ops, top)[idx]].sum())
    tiny_us = float(durs[durs < float(TINY_OP_THRESHOLD_US)].sum())
    by_class: dict[str, float] = {}
    device = np.flatnonzero(np.isin(table.kind, [int(k) for k in _DEVICE_KINDS]))
    device = device[(table.ts[device] >= lo) & (table.ts[device] < hi)] if hi > lo else device
    if len(device) and float(table.dur[device].sum()) > 0:
        for r in device:
            cls = _KERNEL_CLASS.get(kernel_category(names[table.name[r]].lower()), "other")
            by_class[cls] = by_class.get(cls, 0.0) + float(table.dur[r])
        basis, denominator = "device", float(table.dur[device].sum())
    else:
        for i, d in zip(idx, durs, strict=True):
            cls = classify_op(op_names[i])
            by_class[cls] = by_class.get(cls, 0.0) + float(d)
        basis, denominator = "cpu", total_us
    gemm = by_class.get("matmul", 0.0) + by_class.get("convolution", 0.0)
    compute = gemm + by_class.get("recurrent", 0.0) + by_class.get("attention", 0.0)
    steps = max(1, steps)
    return {
        "steps": steps,
        "top_level_ops_per_step": len(idx) / steps,
        "median_op_us": float(np.median(durs)) if len(durs) else 0.0,
        "op_time_ms_per_step": total_us / steps / 1e3,
        "tiny_op_time_ms_per_step": tiny_us / steps / 1e3,
        "cpu_op_time_ms_per_step": cpu_us / steps / 1e3,
        "tiny_op_threshold_us": float(TINY_OP_THRESHOLD_US),
        "gemm_share": gemm / denominator if denominator else 0.0,
        "compute_share": compute / denominator if denominator else 0.0,
        "compute_ms_per_step": compute / steps / 1e3,
        "time_by_class_ms_per_step": {k: v / steps / 1e3 for k, v in sorted(by_class.items())},
        "gemm_share_basis": basis,
        "collective_time_ms_per_step": _collective_us(table, ops, idx) / steps / 1e3,
        "optimizer_state_init_ms_per_step": _state_init_us(table, ops, top, op_names) / steps / 1e3,
        "read_from": "trace",
        "events": len(table),
    }


def _calls_the_device(table: Any, ops: Any, top: np.ndarray) -> np.ndarray:
    """Per operator (in ``ops`` order): a top-level operator inside which a CUDA runtime or
    driver call ran on its thread (it launched, copied or waited: GPU work, not CPU work)."""
    out = np.zeros(len(ops.rows), dtype=bool)
    calls = np.flatnonzero(np.isin(table.kind, [int(Kind.RUNTIME), int(Kind.DRIVER)]))
    if not len(calls) or not len(ops.rows):
        return out
    pos = _innermost(table, ops, calls)
    pos = pos[pos >= 0]
    for _ in range(64):  # up to the top-level operator (nesting is a few levels deep)
        up = ~top[pos] & (ops.parent[pos] >= 0)
        if not up.any():
            break
        pos[up] = ops.parent[pos[up]]
    out[pos[top[pos]]] = True
    return out


STATE_INIT_OPS = frozenset(
    {
        "aten::zeros_like",  # Adam's, RMSprop's moments
        "aten::zeros",
        "aten::full_like",
        "aten::full",
        "aten::clone",  # SGD's momentum buffer: a copy of the first gradient
        "aten::empty_like",
        "aten::lift_fresh",  # torch.tensor(0.0): Adam's step count
        "aten::detach_",
    }
)
"""Top-level operators an optimizer's ``step()`` runs only when its state is empty (its first
step): the state it creates. An optimizer rebuilt every step pays them every step."""


def _state_init_us(table: Any, ops: Any, top: np.ndarray, op_names: list[str]) -> float:
    """Time (us) of the top-level state-creating operators inside ``Optimizer.step#...``."""
    init = np.array([n in STATE_INIT_OPS for n in op_names], dtype=bool) & top
    if not init.any():
        return 0.0
    inside = _inside(table, ops, "Optimizer.step#") & init
    return float((ops.end - ops.ts)[inside].sum())


def _inside(table: Any, ops: Any, prefix: str) -> np.ndarray:
    """Operators that start inside a user annotation named ``prefix...`` of their thread
    (``enumerate(DataLoader)``, ``Optimizer.step#Adam.step``)."""
    names = table.names
    rows = np.flatnonzero(table.kind == int(Kind.USER_ANNOTATION))
    rows = np.array([r for r in rows if names[table.name[r]].startswith(prefix)], dtype=np.int64)
    inside = np.zeros(len(ops.rows), dtype=bool)
    if not len(rows):
        return inside
    keys = _thread_key(table, rows)
    for key in np.unique(keys):
        mine = rows[keys == key]
        starts = table.ts[mine]
        order = np.argsort(starts)
        starts, ends = starts[order], (table.ts[mine] + table.dur[mine])[order]
        sel = np.flatnonzero(ops.thread == key)
        pos = np.searchsorted(starts, ops.ts[sel], side="right") - 1
        ok = pos >= 0
        inside[sel[ok]] = ops.ts[sel[ok]] <= ends[pos[ok]]
    return inside


def _collective_us(table: Any, ops: Any, top: np.ndarray) -> float:
    """Time inside CPU collectives (operators or annotations, any thread: with gloo the
    transfer runs on the backend's thread) that no top-level operator overlaps."""
    names = table.names
    host = np.flatnonzero(np.isin(table.kind, [int(Kind.CPU_OP), int(Kind.USER_ANNOTATION)]))
    coll = np.array([r for r in host if is_cpu_collective(names[table.name[r]])], dtype=np.int64)
    if not len(coll):
        return 0.0
    spans = iv.union(table.ts[coll], table.ts[coll] + table.dur[coll])
    return iv.total(iv.subtract(spans, iv.union(ops.ts[top], ops.end[top])))


def clock_aligned_ops(
    path: Path, marks: list[int] | None
) -> tuple[list[int], list[int], list[str]] | None:
    """Top-level ``aten::`` operators of the thread that emitted the ``torchdoctor#clock``
    markers, as (start, end, name) lists on the sampler's clock (``perf_counter_ns``), read
    from the exported trace; None without markers. The last marker's start is ``marks[-1]``;
    times are taken relative to it (microseconds in the trace, so sub-microsecond offsets
    between the two clocks stay below the sampler's resolution)."""
    if not marks:
        return None
    table = load_trace(path)
    try:
        code = table.names.index("torchdoctor#clock")
    except ValueError:
        return None
    found = np.flatnonzero(table.name == code)
    if len(found) < 2:
        return None
    marker = int(found[np.argmax(table.ts[found])])
    ops = _nest(table)
    key = _thread_key(table, np.array([marker]))[0]
    aten = np.array([table.names[c].startswith("aten::") for c in table.name[ops.rows]], dtype=bool)
    parent_aten = np.where(ops.parent >= 0, aten[np.maximum(ops.parent, 0)], False)
    idx = np.flatnonzero(aten & ~parent_aten & (ops.thread == key))
    zero = float(table.ts[marker])
    starts = [marks[-1] + round((float(ops.ts[i]) - zero) * 1000) for i in idx]
    ends = [marks[-1] + round((float(ops.end[i]) - zero) * 1000) for i in idx]
    names = [table.names[table.name[ops.rows[i]]] for i in idx]
    order = sorted(range(len(idx)), key=starts.__getitem__)
    return [starts[i] for i in order], [ends[i] for i in order], [names[i] for i in order]
