"""Find the training (or inference) steps in a trace.

The profiler marks each step with a ``ProfilerStep#N`` range when the user calls
``prof.step()``. Without those marks, torchdoctor falls back to an inference engine's iteration
ranges (``step[DECODE bs=32]``, ``execute_model``...: see ``trace/server_steps.py``), the
optimizer's ``Optimizer.step#...`` ranges, DataLoader ``__next__`` calls, repeating CUDA/HIP graph
launches, the model's repeating top-level forward, then to one window over the whole trace, and
says which signal it used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from torchdoctor.trace import server_steps
from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import GPU_ACTIVITY_KINDS, Kind
from torchdoctor.trace.table import TraceTable

StepSource = Literal[
    "profiler-step",
    "server-step",
    "optimizer-step",
    "dataloader",
    "graph-replay",
    "forward",
    "whole-trace",
]
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_CPU_RANGE_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)


@dataclass(frozen=True, eq=False)  # arrays: no field-wise ==
class Steps:
    """Step windows partitioning the analysed part of the trace (microseconds, table time)."""

    source: StepSource
    numbers: list[int]
    """Step numbers (N of ProfilerStep#N; 0, 1, ... for other sources)."""
    starts_us: np.ndarray
    ends_us: np.ndarray
    note: str
    """How the steps were found, for the report."""
    labels: tuple[str, ...] = ()
    """The name of the range that opened each step (``step[DECODE bs=32]``...), in step order;
    empty for the whole-trace window."""
    cpu_ends_us: np.ndarray | None = None
    """Where each step's own CPU range ends (None for the whole-trace window)."""

    def __len__(self) -> int:
        return len(self.numbers)

    @property
    def durations_ms(self) -> np.ndarray:
        return (self.ends_us - self.starts_us) / 1000.0

    @property
    def window(self) -> tuple[float, float]:
        return float(self.starts_us[0]), float(self.ends_us[-1])


def find_steps(table: TraceTable) -> Steps:
    """Step windows: consecutive step starts, the last step closed by its own work's end.

    Step i spans from its start to the next step's start, so the windows tile the profiled
    region and per-step parts add up to the total. The last step ends when both its CPU range
    and the device work it launched have finished.
    """
    rows, source, numbers = _step_rows(table)
    if source == "whole-trace":
        return _whole_trace(table)
    starts = table.ts[rows]
    cpu_ends = starts + table.dur[rows]
    order = np.argsort(starts, kind="stable")
    starts, cpu_ends = starts[order], cpu_ends[order]
    numbers = [numbers[i] for i in order]
    labels = tuple(table.names[int(table.name[r])] for r in rows[order])
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    # A step range can outlive the recorded events (the profiler closes it late): stop the last
    # step where the trace's own activity ends, but never before the work it launched.
    last_cpu = min(float(cpu_ends[-1]), _activity_end(table, rows))
    ends[-1] = max(last_cpu, _device_end_after(table, starts[-1], cpu_ends[-1]))
    n = f"{len(numbers)} step{'s' if len(numbers) != 1 else ''}"
    ranges = _label_kind(labels) if source == "server-step" else ""  # the only note naming them
    note = {
        "profiler-step": f"{n} from ProfilerStep markers",
        "optimizer-step": f"{n} from optimizer.step() calls (no ProfilerStep markers: call "
        "prof.step() each iteration for exact steps)",
        "dataloader": f"{n} from DataLoader batches (no ProfilerStep markers)",
        "server-step": f"{n} from the engine's iteration ranges ({ranges}; no "
        "ProfilerStep markers)",
        "graph-replay": f"{n} from repeating CUDA/HIP graph launches (no ProfilerStep markers "
        "or iteration ranges)",
        "forward": f"{n} from the model's top-level forward ({labels[0]}; no ProfilerStep markers)",
    }[source]
    return Steps(source, numbers, starts, ends, note, labels, cpu_ends)


def _label_kind(labels: tuple[str, ...]) -> str:
    first = labels[0]
    if re.match(server_steps.SGLANG_STEP, first):
        return "step[...] annotations"
    if re.match(server_steps.EXECUTE_STEP, first):
        return "execute_<tokens>_... annotations"
    return "execute_model"


def _step_rows(table: TraceTable) -> tuple[np.ndarray, StepSource, list[int]]:
    cpu = member(table.kind, np.array(_CPU_RANGE_KINDS, dtype=np.uint8))
    codes = {
        c: int(m.group(1)) for c, n in enumerate(table.names) if (m := _PROFILER_STEP.match(n))
    }
    if codes:
        rows = np.flatnonzero(cpu & member(table.name, list(codes)))
        rows = _first_per_number(rows, [codes[int(table.name[r])] for r in rows])
        if len(rows):
            return rows, "profiler-step", [codes[int(table.name[r])] for r in rows]
    rows = server_steps.step_annotation_rows(table)
    if len(rows):
        return rows, "server-step", list(range(len(rows)))
    for source, prefix in (
        ("optimizer-step", "Optimizer.step#"),
        ("dataloader", "enumerate(DataLoader)#"),
    ):
        rows = np.flatnonzero(cpu & member(table.name, table.codes_matching(_starts(prefix))))
        rows = server_steps.outermost(table, rows)
        if len(rows) >= 2:
            return rows, source, list(range(len(rows)))  # type: ignore[return-value]
    for source, finder in (
        ("graph-replay", server_steps.graph_replay_rows),
        ("forward", server_steps.forward_rows),
    ):
        rows = finder(table)
        if len(rows) >= 2:
            return rows, source, list(range(len(rows)))  # type: ignore[return-value]
    return np.zeros(0, dtype=np.int64), "whole-trace", [0]


def _starts(prefix: str) -> object:
    return lambda n: n.startswith(prefix)


def _first_per_number(rows: np.ndarray, numbers: list[int]) -> np.ndarray:
    """Keep one range per step number (a trace may repeat the marker on several threads)."""
    seen: set[int] = set()
    keep = []
    for r, n in zip(rows.tolist(), numbers, strict=True):
        if n not in seen:
            seen.add(n)
            keep.append(r)
    return np.array(keep, dtype=np.int64)


def _device_end_after(table: TraceTable, start: float, cpu_end: float) -> float:
    """End of the device work launched between ``start`` and ``cpu_end`` (-inf if none)."""
    launch_kinds = np.array((Kind.RUNTIME, Kind.DRIVER), dtype=np.uint8)
    launches = np.flatnonzero(
        member(table.kind, launch_kinds) & (table.ts >= start) & (table.ts <= cpu_end)
    )
    corr = table.corr[launches]
    gpu = member(table.kind, np.array(GPU_ACTIVITY_KINDS, dtype=np.uint8))
    rows = np.flatnonzero(gpu & member(table.corr, corr[corr >= 0]))
    return float((table.ts[rows] + table.dur[rows]).max()) if len(rows) else -np.inf


def _activity_end(table: TraceTable, markers: np.ndarray) -> float:
    """End of the last event that is not a step marker or the profiler's own span."""
    body = table.kind != Kind.TRACE
    body[markers] = False
    if not body.any():
        return float("inf")
    return float((table.ts[body] + table.dur[body]).max())


def _whole_trace(table: TraceTable) -> Steps:
    body = table.kind != Kind.TRACE
    if not body.any():
        body = np.ones(len(table), dtype=bool)
    if not len(table):
        return Steps("whole-trace", [0], np.zeros(1), np.zeros(1), "empty trace")
    start = float(table.ts[body].min())
    end = float((table.ts[body] + table.dur[body]).max())
    note = "no step markers found: analysed the whole trace as one window"
    return Steps("whole-trace", [0], np.array([start]), np.array([end]), note)
