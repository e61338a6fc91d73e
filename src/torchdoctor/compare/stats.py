"""The statistics behind ``compare``: a rank test for "beyond the noise" and an interval for the
change in median step time.

Why these two:

* **Mann-Whitney U** (two-sided) decides whether NEW's steps are slower or faster than BASE's.
  It makes no assumption about the shape of step-time distributions (they are skewed: a step
  with a data-loader hiccup or a recompile is far slower than the rest) and it is exact for the
  handful of steps a profiler window holds (5 vs 5 steps can reach p = 0.008; a t-test would
  need normality we do not have).
* A **bootstrap of the ratio of medians** gives the interval on the size of the change. With
  few steps the interval is coarse, which is honest: it says how little a short window shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

EXACT_MAX = 400
"""Use the exact null distribution of U when n1 * n2 is at most this (no ties)."""
BOOTSTRAP_ROUNDS = 4000
ALPHA = 0.05
"""Significance level: a change is beyond the noise when p < ALPHA."""


@dataclass(frozen=True)
class Change:
    """How NEW's step times compare with BASE's."""

    base_median_ms: float
    new_median_ms: float
    ratio: float
    """new / base median step time (above 1: slower)."""
    ratio_low: float
    ratio_high: float
    """Bootstrap interval on ``ratio`` at ``confidence``."""
    confidence: float
    p_value: float
    """Two-sided Mann-Whitney U p-value (1.0 when either side has fewer than 2 steps)."""
    method: str
    """"exact" or "normal approximation" (with tie correction)."""
    n_base: int
    n_new: int

    @property
    def beyond_noise(self) -> bool:
        """True when the rank test rejects "same distribution" at ALPHA."""
        return self.p_value < ALPHA

    @property
    def change_pct(self) -> float:
        """Percent change in median step time (positive: NEW is slower)."""
        return (self.ratio - 1.0) * 100.0


def compare_steps(base_ms: np.ndarray, new_ms: np.ndarray, confidence: float = 0.95) -> Change:
    """Median ratio with its bootstrap interval, and the Mann-Whitney p-value."""
    base = np.asarray(base_ms, dtype=np.float64)
    new = np.asarray(new_ms, dtype=np.float64)
    if not len(base) or not len(new):
        raise ValueError("each side needs at least one step time")
    b_med, n_med = float(np.median(base)), float(np.median(new))
    lo, hi = bootstrap_ratio_interval(base, new, confidence)
    p, method = mann_whitney_p(base, new)
    return Change(
        b_med, n_med, n_med / b_med, lo, hi, confidence, p, method, len(base), len(new)
    )


def bootstrap_ratio_interval(
    base: np.ndarray, new: np.ndarray, confidence: float = 0.95, rounds: int = BOOTSTRAP_ROUNDS
) -> tuple[float, float]:
    """Percentile interval of median(new*) / median(base*) over resamples (seeded: repeatable)."""
    rng = np.random.default_rng(20261201)
    b = np.median(rng.choice(base, size=(rounds, len(base)), replace=True), axis=1)
    n = np.median(rng.choice(new, size=(rounds, len(new)), replace=True), axis=1)
    ratios = n / b
    tail = (1.0 - confidence) / 2.0
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1.0 - tail))


def mann_whitney_p(x: np.ndarray, y: np.ndarray) -> tuple[float, str]:
    """Two-sided p-value of the Mann-Whitney U test, and which method computed it."""
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        return 1.0, "too few steps"
    both = np.concatenate([x, y])
    ranks = _ranks(both)
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    u = min(u1, n1 * n2 - u1)
    ties = len(np.unique(both)) < len(both)
    if n1 * n2 <= EXACT_MAX and not ties:
        counts = _u_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        p = 2.0 * sum(counts[: int(math.floor(u)) + 1]) / total
        return min(p, 1.0), "exact"
    return _normal_p(u, n1, n2, both), "normal approximation"


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1, dtype=np.float64)
    for v in np.unique(values):
        m = values == v
        if m.sum() > 1:
            ranks[m] = ranks[m].mean()
    return ranks


@lru_cache(maxsize=64)
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many of the C(n1+n2, n1) orderings give each value of U (0..n1*n2)."""
    # f[i][j] is the distribution for sizes (i, j); U counts pairs where the y element is first.
    table: dict[tuple[int, int], list[int]] = {}
    for i in range(n1 + 1):
        for j in range(n2 + 1):
            if i == 0 or j == 0:
                table[i, j] = [1]
                continue
            a = table[i - 1, j]  # the largest element is an x: it beats all j y's
            b = table[i, j - 1]  # the largest element is a y: adds nothing
            out = [0] * (i * j + 1)
            for k, c in enumerate(a):
                out[k + j] += c
            for k, c in enumerate(b):
                out[k] += c
            table[i, j] = out
    return tuple(table[n1, n2])


def _normal_p(u: float, n1: int, n2: int, both: np.ndarray) -> float:
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    tie = float(np.sum(counts**3 - counts)) / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie))
    if sigma == 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2.0) - 0.5) / sigma  # continuity correction
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))
