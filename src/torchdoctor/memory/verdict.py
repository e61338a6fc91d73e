"""What dominates a snapshot, in one line: the verdict at the top of ``torchdoctor memory``.

Derived from the report the command already computes (no second pass over the snapshot): the
busiest device's OOM if it had one, else its peak and the kind of memory that holds most of it
(with its holders), else, without an allocation history, what the segments say.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchdoctor.memory.analysis import BEFORE_HISTORY
from torchdoctor.memory.model import DeviceHistory, DeviceMemory, HolderRow, MemoryReport
from torchdoctor.units import fmt_bytes

NO_HISTORY_HINT = (
    "no allocation history recorded: call torch.cuda.memory._record_memory_history() "
    "before the work to see who holds it"
)


@dataclass(frozen=True)
class MemoryVerdict:
    """The one-line verdict, with the numbers it states."""

    device: int | None
    dominant_kind: str | None
    """The kind of memory (optimizer state, activations, ...) holding most of the peak seen by
    the history; None without a history."""
    dominant_bytes: int
    dominant_share_of_peak: float
    dominant_places: int
    """How many first user frames hold the dominant kind at the peak (among the holders listed)."""
    text: str


def _largest_kind(h: DeviceHistory) -> tuple[str, int, list[HolderRow]] | None:
    """The kind holding most of the peak, once the bytes from before the history are set
    apart (their kind is unknown); with its holders, largest first."""
    before: dict[str, int] = {
        r.category: r.live_bytes for r in h.holders_at_peak if r.label == BEFORE_HISTORY
    }
    kinds = {k: v - before.get(k, 0) for k, v in h.categories_at_peak.items()}
    kinds = {k: v for k, v in kinds.items() if v > 0}
    if not kinds:
        return None
    kind = max(kinds, key=lambda k: kinds[k])
    rows = [r for r in h.holders_at_peak if r.category == kind and r.label != BEFORE_HISTORY]
    return kind, kinds[kind], sorted(rows, key=lambda r: -r.live_bytes)


def _peak_text(d: DeviceMemory, h: DeviceHistory) -> tuple[str, str | None, int, float, int]:
    peak = h.peak_allocated_bytes
    text = f"peak allocated {fmt_bytes(peak)} of {fmt_bytes(d.segments.reserved_bytes)} reserved"
    before = sum(r.live_bytes for r in h.holders_at_peak if r.label == BEFORE_HISTORY)
    if before >= peak / 2:
        text += f"; {before / max(1, peak):.0%} of it allocated before the recorded history"
    largest = _largest_kind(h)
    if largest is None:
        return text, None, 0, 0.0, 0
    kind, size, rows = largest
    share = size / max(1, peak)
    text += f"; {kind} {fmt_bytes(size)} ({share:.0%})"
    if len(rows) == 1:
        text += f" from {rows[0].label}"
    elif rows:
        text += f" from {len(rows)} places, most at {rows[0].label} {fmt_bytes(rows[0].live_bytes)}"
    return text, kind, size, share, len(rows)


def verdict_of(report: MemoryReport) -> MemoryVerdict:
    """The verdict of the device that reserved the most."""
    d = max(report.devices, key=lambda x: x.segments.reserved_bytes, default=None)
    if d is None:
        return MemoryVerdict(None, None, 0, 0.0, 0, "the snapshot holds no segments")
    h = d.history
    kind, size, share, places = None, 0, 0.0, 0
    if h is not None and h.ooms:
        o = h.ooms[-1]
        text = (
            f"out of memory asking {fmt_bytes(o.requested_bytes)} with "
            f"{fmt_bytes(o.device_free_bytes)} free on the device and "
            f"{fmt_bytes(o.cached_unallocated_bytes)} cached but unallocated"
        )
        if o.top_holders:
            top = o.top_holders[0]
            text += (
                f"; the largest holder: {top.label} {fmt_bytes(top.live_bytes)} ({top.category})"
            )
    elif h is not None:
        text, kind, size, share, places = _peak_text(d, h)
    else:
        s = d.segments
        text = f"reserved {fmt_bytes(s.reserved_bytes)}, allocated {fmt_bytes(s.allocated_bytes)}; "
        text += NO_HISTORY_HINT
    if d.fixes:
        text += f"; fragmentation matters: try {d.fixes[0].env}"
    if len(report.devices) > 1:
        text = f"device {d.device}: {text}"
    return MemoryVerdict(d.device, kind, size, share, places, text)
