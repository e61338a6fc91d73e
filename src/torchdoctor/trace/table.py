"""The trace as a columnar table: one numpy array per field, strings interned to int32 codes."""

# Annotations evaluated, not strings: typing.NamedTuple compiles each string one (0.4M
# instructions a field, at every start-up).

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from torchdoctor.trace.arrays import member
from torchdoctor.trace.kinds import GPU_ACTIVITY_KINDS, Kind


@dataclass(frozen=True, eq=False)  # arrays: no field-wise ==
class MemoryEvents:
    """``[memory]`` instant events (present when the profiler ran with profile_memory=True)."""

    ts: np.ndarray
    """Time, microseconds (float64)."""
    total_allocated: np.ndarray
    """Bytes allocated on the device after the event (int64; -1 where absent)."""
    total_reserved: np.ndarray
    """Bytes reserved by the caching allocator after the event (int64; -1 where absent)."""
    device_id: np.ndarray
    """Device index (-1 is the CPU)."""
    device_type: np.ndarray
    """Kineto's device type: 0 CPU, 1 CUDA (int16; -1 where absent)."""
    nbytes: np.ndarray
    """Bytes allocated (positive) or freed (negative) by the event."""

    def __len__(self) -> int:
        return len(self.ts)


# A named tuple: analyze imports it before any trace (rules/spec.py says what a dataclass costs).
class TraceMeta(NamedTuple):
    """What the trace says about where it came from."""

    path: str
    rank: int | None
    world_size: int | None
    backend: str | None
    devices: list[dict[str, Any]]
    """deviceProperties: name, computeMajor, computeMinor, totalGlobalMem, numSms..."""
    top_level: dict[str, Any]
    """Every other top-level key of the trace file."""
    json_bytes: int
    """Size of the decompressed JSON."""


@dataclass(frozen=True, eq=False)  # arrays: no field-wise ==
class TraceTable:
    """All complete (``ph: X``) events of one trace, sorted by start time.

    Times are microseconds relative to ``base_us`` (the first event's start), so float64 keeps
    sub-nanosecond resolution even for epoch timestamps.
    """

    meta: TraceMeta
    base_us: float
    ts: np.ndarray
    """Start, microseconds since ``base_us`` (float64)."""
    dur: np.ndarray
    """Duration, microseconds (float64, >= 0)."""
    kind: np.ndarray
    """``Kind`` as uint8."""
    name: np.ndarray
    """Index into ``names`` (int32)."""
    names: list[str]
    pid: np.ndarray
    """Index into ``pids`` (int32)."""
    pids: list[int | str | None]
    tid: np.ndarray
    """Index into ``tids`` (int32)."""
    tids: list[int | str | None]
    corr: np.ndarray
    """CUDA correlation id tying a runtime call to its kernel (int64; -1 if none)."""
    ext_id: np.ndarray
    """Kineto's External id tying an operator to the runtime calls it made (int64; -1 if none)."""
    device: np.ndarray
    """GPU index of device activities (int16; -1 otherwise)."""
    stream: np.ndarray
    """CUDA/HIP stream of device activities (int32; -1 otherwise)."""
    nbytes: np.ndarray
    """Bytes moved by memcpy/memset (int64; -1 otherwise)."""
    memory: MemoryEvents
    input_types: dict[int, bytes] = field(default_factory=dict)
    """Raw JSON of ``Input type`` for GEMM/convolution operators, keyed by External id."""
    shapes: dict[int, tuple[str, bytes, bytes]] = field(default_factory=dict)
    """GEMM/attention operators that launch kernels (``columns.SHAPE_OPS``), by External id:
    (operator name, raw ``Input Dims`` JSON, raw ``Input type`` JSON)."""
    notes: list[str] = field(default_factory=list)
    """What the loader had to work around (skipped events, negative durations...)."""

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def end(self) -> np.ndarray:
        return self.ts + self.dur

    def of_kind(self, *kinds: Kind) -> np.ndarray:
        """Row indices of the given kinds, in time order."""
        return np.flatnonzero(member(self.kind, np.array(kinds, dtype=np.uint8)))

    def gpu_rows(self) -> np.ndarray:
        """Row indices of kernels, memcpys and memsets."""
        return self.of_kind(*GPU_ACTIVITY_KINDS)

    def codes_matching(self, predicate: Any) -> np.ndarray:
        """Codes of all names for which ``predicate(name)`` is true (int32 array)."""
        return np.array([i for i, n in enumerate(self.names) if predicate(n)], dtype=np.int32)

    def rows_named(self, predicate: Any, *kinds: Kind) -> np.ndarray:
        """Row indices whose name satisfies ``predicate`` (optionally of the given kinds)."""
        mask = member(self.name, self.codes_matching(predicate))
        if kinds:
            mask &= member(self.kind, np.array(kinds, dtype=np.uint8))
        return np.flatnonzero(mask)

    @property
    def has_gpu(self) -> bool:
        return bool(member(self.kind, np.array(GPU_ACTIVITY_KINDS, dtype=np.uint8)).any())
