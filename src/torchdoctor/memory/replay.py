"""Replay a device's allocation history entry by entry, keeping only bounded state.

Follows the caching allocator's counters: ``memory_allocated`` goes up at ``alloc`` and down at
``free_requested`` (the tensor is gone; a block waiting on another stream is still *active* until
``free_completed``); reserved memory moves with ``segment_alloc``/``segment_free`` (and the
``segment_map``/``segment_unmap`` of expandable segments). The history is a window (the allocator
keeps the last ``max_entries``), so the replay counts relative to its first entry; the snapshot's
segments fix the absolute level afterwards (:func:`torchdoctor.memory.analysis`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SERIES_POINTS = 2048
OOMS_LISTED = 32
"""OOM entries itemised per device: the first 31 and the last (a log of thousands of retries
would otherwise cost the live set once per entry)."""
_MISSING = object()

_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


@dataclass
class OomMoment:
    """The allocator's state when an ``oom`` entry was recorded (bytes relative to the window)."""

    time_us: int
    requested_bytes: int
    device_free_bytes: int
    allocated_rel_bytes: int
    reserved_rel_bytes: int
    live_by_holder: dict[int, int]


@dataclass
class Series:
    """At most ``SERIES_POINTS`` points of (time_us, allocated, reserved), relative to the window.

    Each point keeps the highest allocated value of the entries it covers, so a short peak is never
    averaged away; when full, neighbouring points merge and the stride doubles.
    """

    stride: int = 1
    points: list[tuple[int, int, int]] = field(default_factory=list)
    _pending: tuple[int, int, int] | None = None
    _count: int = 0

    def add(self, time_us: int, allocated: int, reserved: int) -> None:
        point = (time_us, allocated, reserved)
        if self._pending is None or allocated > self._pending[1]:
            self._pending = point
        self._count += 1
        if self._count >= self.stride:
            self.flush()

    def flush(self) -> None:
        if self._pending is not None:
            self.points.append(self._pending)
        self._pending, self._count = None, 0
        if len(self.points) >= SERIES_POINTS:
            pairs = zip(self.points[0::2], self.points[1::2], strict=False)
            self.points = [max(a, b, key=lambda p: p[1]) for a, b in pairs]
            self.stride *= 2


class LiveAt:
    """The live set as it was at one moment, kept as an undo journal of the changes since.

    Copying the live set at every new peak (or OOM) costs the set's size each time: a history
    that reaches a new peak, frees, and reaches a higher one made the replay quadratic. The
    journal costs one entry per change; it becomes a copy once it outgrows the set, so the
    work stays linear in the history.
    """

    __slots__ = ("_copy", "_journal", "marked")

    def __init__(self) -> None:
        self._journal: list[tuple[int, object]] | None = None
        self._copy: dict[int, tuple[int, int]] | None = None
        self.marked = False

    def mark(self) -> None:
        """The moment is now (what ``live`` holds now)."""
        self._journal, self._copy, self.marked = [], None, True

    def before_change(self, live: dict[int, tuple[int, int]], addr: int) -> bool:
        """Journal a change to ``live[addr]``; False once the journal became a copy."""
        journal = self._journal
        if journal is None:
            return False
        journal.append((addr, live.get(addr, _MISSING)))
        if len(journal) > len(live) + 64:
            self._copy, self._journal = self.state(live), None
            return False
        return True

    def state(self, live: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """The live set at the marked moment."""
        if self._copy is not None:
            return self._copy
        out = dict(live)
        for addr, old in reversed(self._journal or []):
            if old is _MISSING:
                out.pop(addr, None)
            else:
                out[addr] = old  # type: ignore[assignment]
        return out


@dataclass
class DeviceReplay:
    """Running counters and the live allocations of one device's history."""

    allocated: int = 0
    active: int = 0
    reserved: int = 0
    peak: int = 0
    peak_index: int = -1
    peak_time_us: int = 0
    entries: int = 0
    largest_request_bytes: int = 0
    unknown_freed: int = 0
    unknown_freed_at_peak: int = 0
    first_time_us: int | None = None
    last_time_us: int = 0
    live: dict[int, tuple[int, int]] = field(default_factory=dict)
    live_at_peak: dict[int, tuple[int, int]] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    ooms: list[OomMoment] = field(default_factory=list)
    series: Series = field(default_factory=Series)
    oom_entries: int = 0
    """Every ``oom`` entry seen (``ooms`` itemises at most ``OOMS_LISTED``)."""
    _at_peak: LiveAt = field(default_factory=LiveAt)
    _at_last_oom: LiveAt = field(default_factory=LiveAt)
    _journaling: list[LiveAt] = field(default_factory=list)
    """The moments whose journal is open (most of a history has none: no cost then)."""

    def feed(self, action: str, addr: int, size: int, time_us: int, holder: int) -> None:
        """Apply one history entry; ``holder`` is the interned holder of its stack."""
        self.counts[action] += 1
        if self.first_time_us is None:
            self.first_time_us = time_us
        self.last_time_us = time_us
        if action == "alloc":
            self._alloc(addr, size, holder)
        elif action in ("free_requested", "free"):
            self._free(addr, size)
            if action == "free":
                self.active -= size
        elif action == "free_completed":
            self.active -= size
        elif action in _RESERVE:
            self.reserved += _RESERVE[action] * size
        self.entries += 1
        self.series.add(time_us, self.allocated, self.reserved)

    def _change(self, addr: int) -> None:
        self._journaling = [j for j in self._journaling if j.before_change(self.live, addr)]

    def _mark(self, moment: LiveAt) -> None:
        moment.mark()
        if moment not in self._journaling:
            self._journaling.append(moment)

    def _alloc(self, addr: int, size: int, holder: int) -> None:
        self.allocated += size
        self.active += size
        if self._journaling:
            self._change(addr)
        self.live[addr] = (size, holder)
        self.largest_request_bytes = max(self.largest_request_bytes, size)
        if self.allocated > self.peak:
            self.peak, self.peak_index, self.peak_time_us = (
                self.allocated,
                self.entries,
                self.last_time_us,
            )
            self._mark(self._at_peak)
            self.unknown_freed_at_peak = self.unknown_freed

    def _free(self, addr: int, size: int) -> None:
        self.allocated -= size
        if addr in self.live:
            if self._journaling:
                self._change(addr)
            del self.live[addr]
        else:
            self.unknown_freed += size  # allocated before the recorded window

    def oom(self, requested: int, device_free: int, time_us: int) -> None:
        self.largest_request_bytes = max(self.largest_request_bytes, requested)  # it was asked for
        self.oom_entries += 1
        last = len(self.ooms) >= OOMS_LISTED - 1
        moment = OomMoment(
            time_us,
            requested,
            device_free,
            self.allocated,
            self.reserved,
            {} if last else _by_holder(self.live),
        )
        if not last:
            self.ooms.append(moment)
            return
        # Past the first ones only the latest is kept; its holders are read at the end.
        if len(self.ooms) == OOMS_LISTED:
            self.ooms[-1] = moment
        else:
            self.ooms.append(moment)
        self._mark(self._at_last_oom)

    def finish(self) -> None:
        if self._at_peak.marked:
            self.live_at_peak = self._at_peak.state(self.live)
        if self._at_last_oom.marked:
            self.ooms[-1].live_by_holder = _by_holder(self._at_last_oom.state(self.live))
        self.series.flush()


def _by_holder(live: dict[int, tuple[int, int]]) -> dict[int, int]:
    by: Counter[int] = Counter()
    for size, holder in live.values():
        by[holder] += size
    return dict(by)
