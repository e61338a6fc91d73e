"""Shared views of a trace's device activity: classes of GPU work and the CPU ranges that matter.

Computed once per trace and reused by the breakdown, communication and rules, so no analysis walks
the table twice for the same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from torchdoctor.analysis import intervals as iv
from torchdoctor.analysis.unrecorded import behind_unrecorded
from torchdoctor.trace.arrays import member, unique_codes
from torchdoctor.trace.kinds import GPU_ACTIVITY_KINDS, Kind
from torchdoctor.trace.table import TraceTable

_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall", re.IGNORECASE)
_MEMCPY_DIR = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|PtoP|DtoA|AtoD)\b")
SYNC_CALLS = frozenset(
    {
        *("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"),
        *("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpyFromSymbol", "cudaMemcpyToSymbol"),
        *("cudaMemset", "cudaStreamQuery", "cuCtxSynchronize", "cuStreamSynchronize"),
        *("cuEventSynchronize", "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2"),
        *("hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize"),
        *("hipMemcpy", "hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoD", "hipMemset"),
    }
)
"""Runtime calls that block the CPU until the device (or a stream) has caught up."""
DATALOADER_PREFIX = "enumerate(DataLoader)#"
CPU_COLLECTIVE = re.compile(r"^(gloo|nccl|mpi|ucc):|^c10d::[a-z_]*(all|reduce|broadcast|barrier)")
_NOT_OPS = ("ProfilerStep#", DATALOADER_PREFIX)
DEVICE_CLASSES = ("compute", "communication", "memcpy", "memset")


@dataclass(frozen=True, eq=False)  # arrays: no field-wise ==
class GpuActivity:
    """Device activity rows of one trace with their class, plus CPU ranges used for attribution."""

    rows: np.ndarray
    """Row indices (into the table) of kernels, memcpys and memsets, in start order."""
    start_us: np.ndarray
    end_us: np.ndarray
    cls: np.ndarray
    """Index into DEVICE_CLASSES per row."""
    memcpy_dir: np.ndarray
    """'HtoD', 'DtoH', ... for memcpy rows, '' otherwise (a numpy string array: ``== "HtoD"``
    on it is a sixth of an object array's cost, ``np.isin`` a fifth)."""
    pageable: np.ndarray
    """True for copies whose host side is pageable (not pinned) memory."""
    launch_us: np.ndarray
    """Start of the runtime call that launched each row (NaN where it could not be tied)."""
    dataloader: iv.Intervals
    """Union of CPU ranges spent inside DataLoader ``__next__``."""
    sync_calls: iv.Intervals
    """Union of CPU ranges spent in blocking synchronisation calls."""
    cpu_collectives: iv.Intervals
    """Union of CPU ranges of collectives (``gloo:all_reduce``, ``c10d::allreduce_``...)."""
    cpu_ops: iv.Intervals
    """Union of CPU ranges inside torch operators or runtime calls (not the step annotations)."""
    unrecorded: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """True per row where the activity was queued behind device work the trace does not hold
    (launched before the profiler started, or a graph whose kernels were not recorded); see
    ``analysis/unrecorded.py``. Empty means none."""

    def busy(self, *classes: str) -> iv.Intervals:
        """Union of the intervals of the given classes (all classes when none given)."""
        if classes:
            codes = [DEVICE_CLASSES.index(c) for c in classes]
            m = member(self.cls, codes)
            return iv.union(self.start_us[m], self.end_us[m])
        return iv.union(self.start_us, self.end_us)


def gpu_activity(table: TraceTable) -> GpuActivity:
    """Classify device activity and tie each row to its launch (by CUDA correlation id)."""
    rows = np.flatnonzero(member(table.kind, np.array(GPU_ACTIVITY_KINDS, dtype=np.uint8)))
    kind = table.kind[rows]
    comm_codes = table.codes_matching(lambda n: bool(_COMM.search(n)))
    cls = np.zeros(len(rows), dtype=np.int8)
    cls[(kind == Kind.KERNEL) & member(table.name[rows], comm_codes)] = 1
    cls[kind == Kind.MEMCPY] = 2
    cls[kind == Kind.MEMSET] = 3
    # Direction and pageability are properties of a copy's name: decide once per unique name.
    codes, inverse, _ = unique_codes(table.name[rows])
    unique_names = [table.names[int(c)] for c in codes]
    dir_of = np.array([_direction(n) for n in unique_names] or [""], dtype=str)
    pageable_of = np.array(["Pageable" in n for n in unique_names] or [False], dtype=bool)
    is_copy = kind == Kind.MEMCPY
    dirs = np.where(is_copy, dir_of[inverse] if len(rows) else dir_of[:0], "")
    pageable = pageable_of[inverse] if len(rows) else np.zeros(0, dtype=bool)
    return GpuActivity(
        rows=rows,
        start_us=table.ts[rows],
        end_us=table.ts[rows] + table.dur[rows],
        cls=cls,
        memcpy_dir=dirs,
        pageable=pageable & is_copy,
        launch_us=_launch_times(table, rows),
        dataloader=_cpu_ranges(table, lambda n: n.startswith(DATALOADER_PREFIX)),
        sync_calls=_cpu_ranges(table, lambda n: n in SYNC_CALLS, Kind.RUNTIME, Kind.DRIVER),
        cpu_collectives=_cpu_ranges(table, is_cpu_collective),
        cpu_ops=_cpu_ranges(
            table, lambda n: not n.startswith(_NOT_OPS), Kind.CPU_OP, Kind.RUNTIME, Kind.DRIVER
        ),
        unrecorded=behind_unrecorded(table, rows),
    )


def is_cpu_collective(name: str) -> bool:
    """A CPU-side collective call (``gloo:all_reduce``, ``c10d::allreduce_``, ...)."""
    return bool(CPU_COLLECTIVE.match(name))


def _direction(name: str) -> str:
    m = _MEMCPY_DIR.search(name)
    return m.group(1) if m else "other"


def _launch_times(table: TraceTable, rows: np.ndarray) -> np.ndarray:
    """Start time of the runtime call with the same correlation id as each device row."""
    out = np.full(len(rows), np.nan)
    launches = np.flatnonzero((table.kind == Kind.RUNTIME) | (table.kind == Kind.DRIVER))
    launches = launches[table.corr[launches] >= 0]
    if not len(launches) or not len(rows):
        return out
    corr = table.corr[launches]
    order = np.argsort(corr, kind="stable")
    corr, launches = corr[order], launches[order]
    want = table.corr[rows]
    pos = np.clip(np.searchsorted(corr, want), 0, len(corr) - 1)
    hit = (corr[pos] == want) & (want >= 0)
    out[hit] = table.ts[launches[pos[hit]]]
    return out


def _cpu_ranges(table: TraceTable, predicate: object, *kinds: Kind) -> iv.Intervals:
    kinds = kinds or (Kind.CPU_OP, Kind.USER_ANNOTATION)
    rows = table.rows_named(predicate, *kinds)
    return iv.union(table.ts[rows], table.ts[rows] + table.dur[rows])
