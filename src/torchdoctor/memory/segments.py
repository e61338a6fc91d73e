"""Per-device numbers at the moment of the snapshot, from its segments and their blocks.

Definitions follow the caching allocator (``torch.cuda.memory_stats``): *reserved* is the bytes of
every segment obtained with cudaMalloc (``total_size``), *allocated* the blocks a tensor owns
(``allocated_size``), *active* allocated plus blocks freed but still waiting on another stream,
*requested* what callers asked for before rounding. Cached-but-unallocated bytes are
reserved - allocated: memory PyTorch holds that no tensor uses.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal

from torchdoctor.memory.shape import Segment

SizeClass = Literal["small", "large", "expandable"]
SIZE_CLASSES: tuple[SizeClass, ...] = ("small", "large", "expandable")
# A segment with under half its bytes allocated keeps more cache than it uses.
MOSTLY_EMPTY_SHARE = 0.5


@dataclass(frozen=True)
class ClassFree:
    """Reserved and cached-but-unallocated bytes of one segment size class."""

    size_class: SizeClass
    segments: int
    reserved_bytes: int
    free_bytes: int
    largest_free_block_bytes: int


@dataclass(frozen=True)
class DeviceSegments:
    """One device at the snapshot (all byte counts are sums over its segments)."""

    device: int
    segments: int
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    requested_bytes: int
    free_bytes: int
    split_free_bytes: int
    """Free bytes inside segments that also hold allocations: the fragmented part of the cache."""
    largest_free_block_bytes: int
    empty_segments: int
    empty_segment_bytes: int
    mostly_empty_segments: int
    by_class: tuple[ClassFree, ...]
    active_blocks: tuple[tuple[int, int, Any], ...]
    """(address, size, frames) of each allocated block, for holders of memory made before the history."""


def size_class(segment: Segment) -> SizeClass:
    if segment.is_expandable:
        return "expandable"
    return "small" if segment.segment_type == "small" else "large"


def _free_blocks(segment: Segment) -> list[int]:
    return [b.size for b in segment.blocks if b.state == "inactive"]


def _class_rows(segments: list[Segment]) -> tuple[ClassFree, ...]:
    acc: dict[SizeClass, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for seg in segments:
        row = acc[size_class(seg)]
        row[0] += 1
        row[1] += seg.total_size
        row[2] += seg.total_size - seg.allocated_size
        row[3] = max([row[3], *_free_blocks(seg)])
    return tuple(ClassFree(c, *acc[c]) for c in SIZE_CLASSES if c in acc)


def device_segments(device: int, segments: list[Segment]) -> DeviceSegments:
    """Sums and fragmentation evidence over ``segments`` (those of one device)."""
    total = [s.total_size for s in segments]
    allocated = [s.allocated_size for s in segments]
    empty = [t for t, a in zip(total, allocated, strict=True) if a == 0]
    mostly = sum(
        1 for t, a in zip(total, allocated, strict=True) if t and a < MOSTLY_EMPTY_SHARE * t
    )
    blocks = [
        (b.address, b.size, b.frames)
        for s in segments
        for b in s.blocks
        if b.state == "active_allocated"
    ]
    return DeviceSegments(
        device=device,
        segments=len(segments),
        reserved_bytes=sum(total),
        allocated_bytes=sum(allocated),
        active_bytes=sum(s.active_size for s in segments),
        requested_bytes=sum(s.requested_size for s in segments),
        free_bytes=sum(total) - sum(allocated),
        split_free_bytes=sum(total) - sum(allocated) - sum(empty),
        largest_free_block_bytes=max((b for s in segments for b in _free_blocks(s)), default=0),
        empty_segments=len(empty),
        empty_segment_bytes=sum(empty),
        mostly_empty_segments=mostly,
        by_class=_class_rows(segments),
        active_blocks=tuple(blocks),
    )


def by_device(segments: list[Segment]) -> dict[int, list[Segment]]:
    groups: dict[int, list[Segment]] = defaultdict(list)
    for seg in segments:
        groups[seg.device].append(seg)
    return dict(groups)
