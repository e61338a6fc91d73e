"""What ``torchdoctor memory`` returns: small frozen dataclasses, in bytes and microseconds."""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.memory.advice import AllocatorSettings, Fix
from torchdoctor.memory.frames import Category
from torchdoctor.memory.segments import DeviceSegments


@dataclass(frozen=True)
class HolderRow:
    """Live bytes of one holder (first user frame) at a moment, and its share of all live bytes."""

    label: str
    category: Category
    live_bytes: int
    blocks: int
    share: float


@dataclass(frozen=True)
class OomReport:
    """An ``oom`` entry: what was asked for, what the device and the cache had, who held memory."""

    time_us: int
    requested_bytes: int
    device_free_bytes: int
    allocated_bytes: int
    reserved_bytes: int
    cached_unallocated_bytes: int
    top_holders: tuple[HolderRow, ...]


@dataclass(frozen=True)
class DeviceHistory:
    """The replay of one device's history (absolute bytes: the snapshot fixes the starting level)."""

    entries: int
    first_time_us: int
    last_time_us: int
    actions: dict[str, int]
    baseline_allocated_bytes: int
    """Allocated before the first recorded entry (history keeps only the last max_entries)."""
    peak_allocated_bytes: int
    peak_time_us: int
    peak_entry: int
    largest_request_bytes: int
    holders_at_peak: tuple[HolderRow, ...]
    categories_at_peak: dict[str, int]
    ooms: tuple[OomReport, ...]
    consistent: bool
    """True when every allocation live at the end of the replay is an allocated block of the snapshot."""
    unmatched_live_blocks: int


@dataclass(frozen=True)
class DeviceMemory:
    device: int
    segments: DeviceSegments
    history: DeviceHistory | None
    fragmentation_matters: bool
    fixes: tuple[Fix, ...]


@dataclass(frozen=True)
class MemoryReport:
    path: str
    file_bytes: int
    streamed: bool
    settings: AllocatorSettings
    devices: tuple[DeviceMemory, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class SeriesPoint:
    time_us: int
    allocated_bytes: int
    reserved_bytes: int
