"""``analyze_snapshot``: per-device numbers, the peak and who holds it, fragmentation, OOM."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from torchdoctor.memory.advice import fixes, fragmentation_matters, read_settings
from torchdoctor.memory.errors import HISTORY_HINT
from torchdoctor.memory.frames import NO_STACK
from torchdoctor.memory.ingest import HolderTable, Ingested, ingest
from torchdoctor.memory.model import (
    DeviceHistory,
    DeviceMemory,
    HolderRow,
    MemoryReport,
    OomReport,
    SeriesPoint,
)
from torchdoctor.memory.replay import DeviceReplay
from torchdoctor.memory.segments import DeviceSegments, by_device, device_segments
from torchdoctor.memory.shape import Segment

BEFORE_HISTORY = "<allocated before the recorded history>"
TOP_HOLDERS = 12
# The allocator does not split a large block when the remainder would be under 1 MiB (kSmallSize).
UNSPLIT_SLACK_BYTES = 1 << 20


def _rows(
    by_holder: Counter[tuple[str, str]], blocks: Counter[tuple[str, str]], top: int
) -> tuple[HolderRow, ...]:
    total = sum(by_holder.values()) or 1
    return tuple(
        HolderRow(label, cat, n, blocks[(label, cat)], n / total)  # type: ignore[arg-type]
        for (label, cat), n in by_holder.most_common(top)
    )


def _holder_of_block(frames: Any, table: HolderTable) -> tuple[str, str]:
    """Holder of a block allocated before the history; no stack means before recording started.

    Looked up through the holder table, which classifies each frames list once: blocks that
    share one list cost one classification, not one each."""
    h = table.holders[table.of_frames(frames)]
    return (BEFORE_HISTORY, "other") if h.label == NO_STACK else (h.label, h.category)


def _peak_holders(
    replay: DeviceReplay, seg: DeviceSegments, table: HolderTable, baseline: int
) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    bytes_by: Counter[tuple[str, str]] = Counter()
    blocks_by: Counter[tuple[str, str]] = Counter()
    for size, holder in replay.live_at_peak.values():
        h = table.holders[holder]
        bytes_by[(h.label, h.category)] += size
        blocks_by[(h.label, h.category)] += 1
    # memory from before the history that was still allocated at the peak
    before = max(0, baseline - replay.unknown_freed_at_peak)
    for addr, size, frames in seg.active_blocks:
        if addr in replay.live or before <= 0:
            continue
        key = _holder_of_block(frames, table)
        bytes_by[key] += size
        blocks_by[key] += 1
        before -= size
    if before > 0:
        bytes_by[(BEFORE_HISTORY, "other")] += before
    return bytes_by, blocks_by


def _oom_reports(
    replay: DeviceReplay, table: HolderTable, alloc0: int, reserved0: int
) -> tuple[OomReport, ...]:
    out = []
    for m in replay.ooms:
        by: Counter[tuple[str, str]] = Counter()
        for holder, n in m.live_by_holder.items():
            by[(table.holders[holder].label, table.holders[holder].category)] += n
        allocated, reserved = alloc0 + m.allocated_rel_bytes, reserved0 + m.reserved_rel_bytes
        out.append(
            OomReport(
                m.time_us,
                m.requested_bytes,
                m.device_free_bytes,
                allocated,
                reserved,
                max(0, reserved - allocated),
                _rows(by, Counter(), 5),
            )
        )
    return tuple(out)


def _unsplit_slack(replay: DeviceReplay, seg: DeviceSegments) -> tuple[int, int]:
    """(bytes by which live blocks exceed their recorded sizes, live allocations with no block).

    The history records request sizes; a block the allocator did not split (remainder under
    ``UNSPLIT_SLACK_BYTES``) is larger in the snapshot. Anything else is an inconsistency.
    """
    active = {addr: size for addr, size, _ in seg.active_blocks}
    slack = unmatched = 0
    for addr, (size, _) in replay.live.items():
        block = active.get(addr, -1)
        if 0 <= block - size < UNSPLIT_SLACK_BYTES:
            slack += block - size
        else:
            unmatched += 1
    return slack, unmatched


def _levels(replay: DeviceReplay, seg: DeviceSegments) -> tuple[int, int, int]:
    """(allocated before the history, reserved before it, live allocations with no block)."""
    slack, unmatched = _unsplit_slack(replay, seg)
    return (
        seg.allocated_bytes - replay.allocated - slack,
        seg.reserved_bytes - replay.reserved,
        unmatched,
    )


def _history(replay: DeviceReplay, seg: DeviceSegments, table: HolderTable) -> DeviceHistory:
    baseline, reserved0, unmatched = _levels(replay, seg)
    bytes_by, blocks_by = _peak_holders(replay, seg, table, baseline)
    categories: Counter[str] = Counter()
    for (_, cat), n in bytes_by.items():
        categories[cat] += n
    return DeviceHistory(
        entries=replay.entries,
        first_time_us=replay.first_time_us or 0,
        last_time_us=replay.last_time_us,
        actions=dict(replay.counts),
        baseline_allocated_bytes=baseline,
        peak_allocated_bytes=baseline + replay.peak,
        peak_time_us=replay.peak_time_us if replay.peak_index >= 0 else replay.first_time_us or 0,
        peak_entry=replay.peak_index,
        largest_request_bytes=replay.largest_request_bytes,
        holders_at_peak=_rows(bytes_by, blocks_by, TOP_HOLDERS),
        categories_at_peak=dict(categories),
        ooms=_oom_reports(replay, table, baseline, reserved0),
        consistent=unmatched == 0 and baseline >= 0,
        unmatched_live_blocks=unmatched,
    )


def _device(device: int, segs: list[Segment], data: Ingested, settings: Any) -> DeviceMemory:
    seg = device_segments(device, segs)
    replay = data.replays.get(device)
    history = _history(replay, seg, data.holders) if replay and replay.entries else None
    largest_request = history.largest_request_bytes if history else 0
    oom = bool(history and history.ooms)
    found = fixes(
        settings,
        reserved_bytes=seg.reserved_bytes,
        free_bytes=seg.free_bytes,
        split_free_bytes=seg.split_free_bytes,
        largest_free_block_bytes=seg.largest_free_block_bytes,
        largest_request_bytes=largest_request,
        oom=oom,
    )
    matters = fragmentation_matters(
        seg.reserved_bytes,
        seg.split_free_bytes,
        seg.largest_free_block_bytes,
        largest_request,
        seg.free_bytes,
    )
    return DeviceMemory(device, seg, history, matters, found)


def analyze_ingested(path: Path, data: Ingested) -> MemoryReport:
    settings = read_settings(data.top.get("allocator_settings"))
    groups = by_device(data.segments)
    devices = sorted(set(groups) | set(data.replays))
    report = tuple(_device(d, groups.get(d, []), data, settings) for d in devices)
    notes = []
    for dev, replay in sorted(data.replays.items()):
        if replay.oom_entries > len(replay.ooms):
            notes.append(
                f"device {dev}: {replay.oom_entries} OOM entries; the first "
                f"{len(replay.ooms) - 1} and the last are itemised"
            )
    if not any(d.history for d in report):
        notes.append(f"no allocation history in this snapshot (recording was off): {HISTORY_HINT}")
    if not settings.known:
        notes.append(
            "the snapshot does not record allocator settings (torch < 2.5?): fixes assume defaults"
        )
    return MemoryReport(
        str(path), path.stat().st_size, data.streamed, settings, report, tuple(notes)
    )


def analyze_snapshot(path: str | Path, *, stream: bool | None = None) -> MemoryReport:
    """Read a snapshot (restricted unpickling; streamed when large) and analyse every device."""
    p = Path(path)
    return analyze_ingested(p, ingest(p, stream=stream))


def memory_series(
    path: str | Path, device: int | None = None
) -> dict[int, tuple[SeriesPoint, ...]]:
    """Allocated and reserved bytes over time per device (at most 2048 points each, peaks kept).

    For drawing (the HTML report): each point is the highest allocated value of the entries it
    stands for, in absolute bytes (the snapshot's segments fix the level before the history).
    """
    return series_of_ingested(ingest(Path(path)), device)


def series_of_ingested(
    data: Ingested, device: int | None = None
) -> dict[int, tuple[SeriesPoint, ...]]:
    """:func:`memory_series` of a snapshot already read (so ``memory --html`` reads it once)."""
    groups = by_device(data.segments)
    out: dict[int, tuple[SeriesPoint, ...]] = {}
    for dev, replay in sorted(data.replays.items()):
        if device is not None and dev != device:
            continue
        seg = device_segments(dev, groups.get(dev, []))
        a0, r0, _ = _levels(replay, seg)
        out[dev] = tuple(SeriesPoint(t, a0 + a, r0 + r) for t, a, r in replay.series.points)
    return out
