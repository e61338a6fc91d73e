"""Memory that grows with the step count: the slope of the memory recorded at each step's end
(``run.json``'s ``memory_steps``), fitted over the steps no instrument of ours touched.

The profiler holds its events in the process until it stops, and the work count and the mode
toggles allocate their own: only the clean window and the clean steps after the instruments
(``steps.schedule``'s ``clean`` and ``after``) are fitted, each as its own segment. The slope is
Theil-Sen's (the median of the slopes between every two steps of one segment), so a step that
frees a cache or collects garbage moves it little. Growth in warm-up (the allocator's pools, a
lazily built cache) rises in a few steps then stays; a leak rises in most steps: a fit is judged
on its slope, its share of rising steps and its total. Plain data; no torch import.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from statistics import median
from typing import Any, Literal

MemoryKind = Literal["host", "resident", "device"]
"""``host``: what malloc has in use (CPU tensors live there); ``resident``: the process's
resident memory, fitted only where the first is not recorded; ``device``: CUDA's allocated."""

MIB = 2**20


@dataclass(frozen=True)
class GrowthFit:
    """Memory growth over the fitted steps."""

    kind: MemoryKind
    bytes_per_step: float
    """Theil-Sen slope, bytes per step."""
    rising_share: float
    """Share of consecutive fitted steps after which memory was higher than before."""
    steps: int
    """Step-to-step differences fitted (over every segment)."""
    segments: tuple[tuple[int, int], ...]
    """The fitted steps, first and last (1-based, inclusive), per segment."""
    last_bytes: int
    """The memory at the last fitted step's end."""

    @property
    def fitted_growth_bytes(self) -> float:
        """The slope over the fitted steps: how much the memory grew across them."""
        return self.bytes_per_step * self.steps

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["segments"] = [list(s) for s in self.segments]
        out["mib_per_step"] = round(self.bytes_per_step / MIB, 3)
        return out


def pair_slopes(points: Sequence[tuple[float, float]]) -> list[float]:
    """The slope between every two points with different x."""
    return [
        (y2 - y1) / (x2 - x1)
        for i, (x1, y1) in enumerate(points)
        for x2, y2 in points[i + 1 :]
        if x2 != x1
    ]


def clean_segments(
    schedule: dict[str, Any], steps: int, tail: bool = False
) -> list[tuple[int, int]]:
    """The steps no instrument touched, as (first, last) step numbers (1-based, inclusive) of
    each segment that ran: the clean window, the clean steps after the instruments and, with
    ``tail`` (``--full``: no toggles ran), every step after those to the script's end."""
    out: list[tuple[int, int]] = []
    for key in ("clean", "after"):
        span = schedule.get(key)
        if not isinstance(span, list | tuple) or len(span) != 2:
            continue
        first, last = int(span[0]), min(int(span[1]), steps)
        if last > first:
            out.append((first, last))
    if tail and out and steps > out[-1][1] + 1:
        if out[-1][0] == (schedule.get("after") or [None])[0]:
            out[-1] = (out[-1][0], steps)  # the after window runs on into the tail
        else:
            out.append((out[-1][1] + 1, steps))
    return out


def split_at(segments: Sequence[tuple[int, int]], breaks: Iterable[int]) -> list[tuple[int, int]]:
    """``segments`` cut at each step in ``breaks`` (a step that compiled: its growth is the
    compiler's, so the memory before it and after it fall in different segments)."""
    cuts = sorted(set(breaks))
    out: list[tuple[int, int]] = []
    for first, last in segments:
        start = first
        for step in (c for c in cuts if first < c <= last):
            if step - 1 > start:
                out.append((start, step - 1))
            start = step
        if last > start:
            out.append((start, last))
    return out


def fit_growth(
    values: Sequence[int | None], segments: Sequence[tuple[int, int]], kind: MemoryKind
) -> GrowthFit | None:
    """The growth of ``values`` (index ``i``: memory at the end of step ``i + 1``; negative or
    None: unknown) over ``segments``; None when fewer than three steps could be fitted."""
    slopes: list[float] = []
    rises = diffs = last = 0
    used: list[tuple[int, int]] = []
    for first, end in segments:
        pts = [
            (float(s), float(v))
            for s in range(first, end + 1)
            if s - 1 < len(values) and (v := values[s - 1]) is not None and v >= 0
        ]
        if len(pts) < 2:
            continue
        # Theil-Sen within each segment only: between segments the instruments moved memory.
        slopes += pair_slopes(pts)
        used.append((int(pts[0][0]), int(pts[-1][0])))
        for (_, a), (_, b) in pairwise(pts):
            diffs += 1
            rises += b > a
        last = int(pts[-1][1])
    if diffs < 3:
        return None
    return GrowthFit(kind, median(slopes), rises / diffs, diffs, tuple(used), last)


def growth_of(
    memory_steps: dict[str, Any] | None,
    schedule: dict[str, Any],
    tail: bool = False,
    compiled: Iterable[int] = (),
) -> list[GrowthFit]:
    """The fits of the host (heap in use, else resident) and the device column of ``run.json``'s
    ``memory_steps``
    (``tail``: see :func:`clean_segments`; ``compiled``: steps that compiled, left out)."""
    breaks = list(compiled)
    if not isinstance(memory_steps, dict):
        return []
    out = []
    host: tuple[str, MemoryKind] = (
        ("heap_bytes", "host") if memory_steps.get("heap_bytes") else ("rss_bytes", "resident")
    )
    columns: tuple[tuple[str, MemoryKind], ...] = (host, ("cuda_allocated_bytes", "device"))
    for key, kind in columns:
        values = memory_steps.get(key)
        if not isinstance(values, list) or not values:
            continue
        segments = split_at(clean_segments(schedule, len(values), tail), breaks)
        fit = fit_growth(values, segments, kind)
        if fit is not None:
            out.append(fit)
    return out
