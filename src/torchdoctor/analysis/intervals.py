"""Interval arithmetic on numpy arrays: union, intersection, clipping, total length.

An interval set is a pair ``(starts, ends)`` of float64 arrays, sorted and non-overlapping once it
has gone through ``union``. Everything is vectorised: no Python loop per interval.
"""

from __future__ import annotations

import numpy as np

Intervals = tuple[np.ndarray, np.ndarray]

EMPTY: Intervals = (np.zeros(0), np.zeros(0))


def union(starts: np.ndarray, ends: np.ndarray) -> Intervals:
    """Merge possibly overlapping intervals into a sorted, disjoint set."""
    if len(starts) == 0:
        return EMPTY
    order = np.argsort(starts, kind="stable")
    # take, not starts[order]: the same gather in about 15% fewer instructions (see
    # trace/arrays.unique_codes); this runs on every set of CPU and device ranges.
    s, e = starts.take(order), ends.take(order)
    run_end = np.maximum.accumulate(e)
    # A new merged interval starts where a start lies after every earlier end.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s.take(first), run_end.take(last)


def total(iv: Intervals) -> float:
    """Summed length of a disjoint set."""
    return float(np.sum(iv[1] - iv[0]))


def clip(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The part of a disjoint, sorted set inside ``[lo, hi]`` (binary search, no full scan)."""
    s, e = iv
    k0 = int(np.searchsorted(e, lo, side="right"))
    k1 = int(np.searchsorted(s, hi, side="left"))
    if k1 <= k0:
        return EMPTY
    return np.maximum(s[k0:k1], lo), np.minimum(e[k0:k1], hi)


def intersect(a: Intervals, b: Intervals) -> Intervals:
    """Intersection of two disjoint sets (two-pointer sweep done with searchsorted)."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return EMPTY
    # Each boundary point toggles membership; count how many sets cover each elementary span.
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    delta = np.concatenate(
        [np.ones(len(a[0])), -np.ones(len(a[1])), np.ones(len(b[0])), -np.ones(len(b[1]))]
    )
    order = np.lexsort((delta, pts))  # ends before starts at equal times: touching is no overlap
    pts, depth = pts[order], np.cumsum(delta[order])
    both = depth == 2
    if not both.any():
        return EMPTY
    idx = np.flatnonzero(both)
    s, e = pts[idx], pts[np.minimum(idx + 1, len(pts) - 1)]
    keep = e > s
    return s[keep], e[keep]


def subtract(a: Intervals, b: Intervals) -> Intervals:
    """The parts of disjoint set ``a`` not covered by disjoint set ``b``."""
    if len(a[0]) == 0 or len(b[0]) == 0:
        return a
    pts = np.concatenate([a[0], a[1], b[0], b[1]])
    da = np.concatenate([np.ones(len(a[0])), -np.ones(len(a[1])), np.zeros(2 * len(b[0]))])
    db = np.concatenate([np.zeros(2 * len(a[0])), np.ones(len(b[0])), -np.ones(len(b[1]))])
    order = np.argsort(pts, kind="stable")
    pts = pts.take(order)
    in_a, in_b = np.cumsum(da.take(order)), np.cumsum(db.take(order))
    idx = np.flatnonzero((in_a > 0) & (in_b <= 0))
    idx = idx[idx + 1 < len(pts)]
    s, e = pts[idx], pts[idx + 1]
    keep = e > s
    return union(s[keep], e[keep])


def gaps(iv: Intervals, lo: float, hi: float) -> Intervals:
    """The complement of a disjoint set within ``[lo, hi]``."""
    s, e = clip(iv, lo, hi)
    starts = np.concatenate([[lo], e])
    ends = np.concatenate([s, [hi]])
    keep = ends > starts
    return starts[keep], ends[keep]


def covered(iv: Intervals, points: np.ndarray) -> np.ndarray:
    """Boolean mask: which ``points`` fall inside the disjoint set (half-open [s, e))."""
    if len(iv[0]) == 0:
        return np.zeros(len(points), dtype=bool)
    k = np.searchsorted(iv[0], points, side="right") - 1
    ok = k >= 0
    out = np.zeros(len(points), dtype=bool)
    out[ok] = points[ok] < iv[1][k[ok]]
    return out
