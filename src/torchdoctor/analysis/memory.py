"""Device memory from the ``[memory]`` events (written when the profiler ran with
``profile_memory=True``): peak allocated and reserved bytes per CUDA device.

Each event carries the caching allocator's totals *after* the allocation or free it records, so
the level at any time is that of the latest event before it. The peak over the window is the
largest level in the window, counting the level carried in from before the window's start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.trace.arrays import distinct
from torchdoctor.trace.steps import Steps
from torchdoctor.trace.table import MemoryEvents, TraceTable

_CUDA = 1  # Kineto's device type for CUDA (and HIP) memory


@dataclass(frozen=True)
class DeviceMemory:
    """Memory of one device."""

    device_id: int
    source: str
    """"totals": the allocator's totals recorded in each event; "running-sum-of-sizes": older
    traces without totals, levels relative to what was allocated when profiling started."""
    event_count: int
    """Memory events of this device in the whole trace."""
    window_event_count: int
    peak_allocated_bytes: int
    """Largest total allocated by tensors during the window."""
    peak_reserved_bytes: int | None
    """Largest total reserved by the caching allocator during the window (None if unknown)."""
    trace_peak_allocated_bytes: int
    trace_peak_reserved_bytes: int | None
    reserved_minus_allocated_at_peak_bytes: int | None
    """Reserved minus allocated at the window's reserved peak (at its fullest moment, when the
    reserved level stays at its peak over several events): memory the caching allocator holds
    but tensors do not use (fragmentation headroom)."""
    total_memory_bytes: int | None
    """The device's totalGlobalMem from deviceProperties."""
    peak_allocated_share: float | None
    """peak_allocated_bytes / total_memory_bytes (None without totals or totalGlobalMem)."""
    peak_reserved_share: float | None


@dataclass(frozen=True)
class MemoryStats:
    """Per-device memory peaks; ``has_memory_events`` False when the trace has none."""

    has_memory_events: bool
    event_count: int
    """All ``[memory]`` events in the trace (CPU ones included)."""
    devices: tuple[DeviceMemory, ...]
    note: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data."""
        d = asdict(self)
        d["devices"] = [asdict(x) for x in self.devices]
        return d


def analyze_memory(table: TraceTable, steps: Steps) -> MemoryStats:
    """Peak allocated and reserved bytes per CUDA device over the window and the whole trace."""
    mem = table.memory
    cuda = np.flatnonzero((mem.device_type == _CUDA) & (mem.device_id >= 0))
    if not len(cuda):
        note = (
            "no device memory events: profile with profile_memory=True to see memory use"
            if not len(mem)
            else "memory events only for the CPU"
        )
        return MemoryStats(bool(len(mem)), len(mem), (), note)
    devices = tuple(
        _device(table, steps, mem, cuda[mem.device_id[cuda] == d], int(d))
        for d in distinct(mem.device_id[cuda])
    )
    return MemoryStats(True, len(mem), devices, f"{len(cuda)} device memory events")


def _levels(mem: MemoryEvents, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Allocated and reserved bytes after each event, and where the numbers come from.

    Traces from before torch 1.10 have no totals, only each event's signed size; there the
    allocated level is the running sum of sizes, relative to what was allocated when
    profiling started, and the reserved level is unknown.
    """
    alloc, reserved = mem.total_allocated[rows], mem.total_reserved[rows]
    ok = alloc >= 0
    if ok.any():
        # an event without totals keeps the last known level
        last = np.maximum.accumulate(np.where(ok, np.arange(len(ok)), np.flatnonzero(ok)[0]))
        return alloc[last], reserved[last] if (reserved >= 0).any() else None, "totals"
    return np.cumsum(mem.nbytes[rows]), None, "running-sum-of-sizes"


def _device(
    table: TraceTable, steps: Steps, mem: MemoryEvents, rows: np.ndarray, device_id: int
) -> DeviceMemory:
    """Peaks of one device; ``rows`` are its events in time order."""
    alloc, reserved, source = _levels(mem, rows)
    lo, hi = steps.window
    ts = mem.ts[rows]
    inside = (ts >= lo) & (ts < hi)
    sel = inside.copy()
    before = np.flatnonzero(ts < lo)
    if len(before):  # the level carried in from before the window is its first level
        sel[before[-1]] = True
    if not sel.any():
        sel[:] = True
    peak_alloc = int(alloc[sel].max())
    peak_res = int(reserved[sel].max()) if reserved is not None else None
    headroom = None
    if reserved is not None and peak_res is not None:
        at_peak = sel & (reserved == peak_res)
        headroom = peak_res - int(alloc[at_peak].max())
    total = _total_memory(table, device_id)
    return DeviceMemory(
        device_id=device_id,
        source=source,
        event_count=len(rows),
        window_event_count=int(inside.sum()),
        peak_allocated_bytes=peak_alloc,
        peak_reserved_bytes=peak_res,
        trace_peak_allocated_bytes=int(alloc.max()),
        trace_peak_reserved_bytes=int(reserved.max()) if reserved is not None else None,
        reserved_minus_allocated_at_peak_bytes=headroom,
        total_memory_bytes=total,
        peak_allocated_share=peak_alloc / total if total and source == "totals" else None,
        peak_reserved_share=peak_res / total if total and peak_res is not None else None,
    )


def _total_memory(table: TraceTable, device_id: int) -> int | None:
    for props in table.meta.devices:
        if props.get("id") == device_id:
            mem = props.get("totalGlobalMem")
            return int(mem) if isinstance(mem, int | float) and mem > 0 else None
    return None
