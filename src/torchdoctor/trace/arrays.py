"""Small array helpers the analyses share."""

from __future__ import annotations

import numpy as np

_LUT_MAX = 1 << 24
"""Largest integer code looked up through a table (a 16 MiB table at most)."""


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values, as ``np.unique(values)``.

    Integer codes go through a table (``unique_codes``); otherwise asking for the counts takes
    numpy's sort-based path: numpy 2.3+ would check for a masked array first, which imports
    ``numpy.ma`` (about 20 ms, a tenth of ``analyze``'s imports) for arrays never masked here.
    """
    return unique_codes(values)[0]


def unique_codes(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(codes, return_inverse=True, return_counts=True)``: the sorted distinct values,
    each element's index among them, and how many times each occurs (the same arrays).

    Name codes, kinds and ids are small non-negative integers: a table indexed by them finds
    the distinct values in one pass, where ``np.unique`` sorts every row (an argsort per
    call, the analyses' largest cost after the loader). Anything else goes to ``np.unique``.
    The tables are read with ``take``: indexing by int32 codes (``table[codes]``) takes numpy's
    general fancy-index path, about 40% more instructions (and 3x the time) for the same result.
    """
    values = np.asarray(codes).ravel()
    if values.dtype.kind not in "iu" or not len(values):
        return np.unique(values, return_inverse=True, return_counts=True)  # type: ignore[return-value]
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= _LUT_MAX:
        return np.unique(values, return_inverse=True, return_counts=True)  # type: ignore[return-value]
    counts = np.bincount(values, minlength=hi + 1)
    present = np.flatnonzero(counts)
    index = np.zeros(hi + 1, dtype=np.intp)
    index[present] = np.arange(len(present), dtype=np.intp)
    return present.astype(values.dtype), index.take(values), counts[present]


def first_index(inverse: np.ndarray, n_groups: int) -> np.ndarray:
    """Where each group first occurs: ``np.unique(inverse, return_index=True)[1]`` for an
    ``inverse`` holding every group number ``0..n_groups-1`` (no sort)."""
    first = np.full(n_groups, len(inverse), dtype=np.intp)
    np.minimum.at(first, inverse, np.arange(len(inverse), dtype=np.intp))
    return first


def median(values: np.ndarray) -> float:
    """``float(np.median(values))`` of a non-empty 1-D array, the same bits (NaN if any is NaN).

    ``np.median`` imports ``numpy.ma`` to check for a masked result, which this 1-D float path
    never has. Measurement samples go through ``torchdoctor.stats`` (heavier to import).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    n = len(x)
    if n == 0:
        raise ValueError("median of no values")
    if np.isnan(x).any():
        return float("nan")
    half = n // 2
    part = np.partition(x, [half - 1, half] if n % 2 == 0 else [half])
    if n % 2:
        return float(part[half])
    return float(np.mean(part[half - 1 : half + 1]))


def quantile(values: np.ndarray | list[float], q: float) -> float:
    """``float(np.quantile(values, q))`` (its default, linear method) of a non-empty 1-D array
    and a float ``0 <= q <= 1``, the same bits (NaN if any is NaN).

    ``np.quantile`` imports ``numpy.ma`` (``np.unique`` of the positions it partitions at),
    about 20 ms, for an ``analyze`` that never needs it. This is numpy's arithmetic: the
    position ``(n - 1)*q``, and between its two neighbours ``a + (b - a)*t``, or
    ``b - (b - a)*(1 - t)`` from ``t = 0.5``.
    """
    x = np.sort(np.asarray(values, dtype=np.float64).ravel())
    n = len(x)
    if n == 0:
        raise ValueError("quantile of no values")
    if np.isnan(x[-1]):  # sorted: a NaN is last
        return float("nan")
    at = (n - 1) * float(q)
    lo = hi = -1  # at the last position numpy reads the last value twice (t = at + 1)
    if at < n - 1:
        lo = int(np.floor(at))
        hi = lo + 1
    a, b, t = float(x[lo]), float(x[hi]), at - lo
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


_FEW = 8


def member(values: np.ndarray, wanted: object) -> np.ndarray:
    """``np.isin(values, wanted)``, through a lookup table for non-negative integer codes.

    Kinds, name codes and ids are small non-negative integers; indexing a boolean table by them
    is one pass, where ``np.isin`` makes several temporaries (the analyses call it dozens of
    times on every row of a trace). Anything else goes to ``np.isin``.
    """
    want = np.asarray(wanted).ravel()
    if values.dtype.kind not in "iu" or want.dtype.kind not in "iu" or not len(values):
        return np.isin(values, want)
    if values.dtype.itemsize == 1 and len(want) <= _FEW:
        # A few kinds: byte comparisons (vectorised, no index conversion) beat a table lookup.
        mask = np.zeros(len(values), dtype=bool)
        for w in sorted(set(want.tolist())):
            if np.iinfo(values.dtype).min <= w <= np.iinfo(values.dtype).max:
                mask |= values == w
        return mask
    if values.dtype == np.uint8:
        lo, hi = 0, 255
    else:
        lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= _LUT_MAX:
        return np.isin(values, want)
    lut = np.zeros(hi + 1, dtype=bool)
    lut[want[(want >= 0) & (want <= hi)]] = True
    return lut.take(values)  # not lut[values]: see unique_codes
