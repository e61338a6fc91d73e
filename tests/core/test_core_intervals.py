"""Interval arithmetic against a brute-force reference on a fine grid (property-based)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdoctor.analysis import intervals as iv

points = np.arange(0, 130, 0.5) + 0.25  # sample points strictly between integer boundaries

spans = st.lists(st.tuples(st.integers(0, 100), st.integers(0, 20)), max_size=10)


def _sets(pairs: list[tuple[int, int]]) -> iv.Intervals:
    s = np.array([a for a, _ in pairs], dtype=float)
    e = np.array([a + d for a, d in pairs], dtype=float)
    return iv.union(s, e)


def _mask(x: iv.Intervals) -> np.ndarray:
    m = np.zeros(len(points), dtype=bool)
    for s, e in zip(*x, strict=True):
        m |= (points >= s) & (points < e)
    return m


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(spans, spans, st.integers(0, 60), st.integers(60, 130))
def test_operations_match_brute_force(a: list, b: list, lo: int, hi: int) -> None:
    x, y = _sets(a), _sets(b)
    mx, my = _mask(x), _mask(y)
    inside = (points >= lo) & (points < hi)
    assert (np.diff(x[0]) > 0).all() and (x[0][1:] > x[1][:-1]).all()  # sorted, disjoint
    assert (_mask(iv.intersect(x, y)) == (mx & my)).all()
    assert (_mask(iv.subtract(x, y)) == (mx & ~my)).all()
    assert (_mask(iv.clip(x, lo, hi)) == (mx & inside)).all()
    assert (_mask(iv.gaps(x, lo, hi)) == (~mx & inside)).all()
    assert (iv.covered(x, points) == mx).all()
    assert iv.total(x) == mx.sum() * 0.5
