"""The statistics behind ``compare``: a rank test for "beyond the noise" and an interval for the
change in median step time.

Why these two:

* **Mann-Whitney U** decides whether NEW's steps are slower or faster than BASE's: two-sided for
  the report's verdict, one-sided ("NEW is slower") for ``--fail-if-slower``, whose question is
  fixed before the data is seen.
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
    test: RankTest
    n_base: int
    n_new: int

    @property
    def p_value(self) -> float:
        """Two-sided Mann-Whitney U p-value (1.0 when either side has fewer than 2 steps)."""
        return self.test.p_two_sided

    @property
    def beyond_noise(self) -> bool:
        """True when the two-sided rank test rejects "same distribution" at ALPHA."""
        return self.p_value < ALPHA

    @property
    def slower_beyond_noise(self) -> bool:
        """True when the one-sided test says NEW's steps are slower, at ALPHA. A gate asks
        only this question, decided before looking at the data, so one side is legitimate."""
        return self.test.p_new_slower < ALPHA

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
    test = mann_whitney(base, new)
    return Change(b_med, n_med, n_med / b_med, lo, hi, confidence, test, len(base), len(new))


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


@dataclass(frozen=True)
class RankTest:
    """Mann-Whitney U test of NEW against BASE."""

    u_new_greater: float
    """Pairs (base, new) where the NEW step was the slower one (ties count a half)."""
    p_two_sided: float
    p_new_slower: float
    """One-sided p-value for "NEW's steps are slower" (the gate's question, fixed in advance)."""
    p_new_faster: float
    method: str


def mann_whitney(base: np.ndarray, new: np.ndarray) -> RankTest:
    """Exact null distribution for small samples without ties, else the normal approximation
    with tie and continuity corrections."""
    n1, n2 = len(base), len(new)
    if n1 < 2 or n2 < 2:
        return RankTest(float("nan"), 1.0, 1.0, 1.0, "too few steps")
    both = np.concatenate([base, new])
    u = float(_ranks(both)[n1:].sum() - n2 * (n2 + 1) / 2.0)  # pairs where new > base
    if n1 * n2 <= EXACT_MAX and len(np.unique(both)) == len(both):
        counts = _u_counts(n1, n2)
        total = math.comb(n1 + n2, n1)
        k = round(u)
        greater = sum(counts[k:]) / total
        less = sum(counts[: k + 1]) / total
        return RankTest(u, min(1.0, 2 * min(greater, less)), greater, less, "exact")
    greater, less = _normal_tails(u, n1, n2, both)
    return RankTest(u, min(1.0, 2 * min(greater, less)), greater, less, "normal approximation")


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


def _normal_tails(u: float, n1: int, n2: int, both: np.ndarray) -> tuple[float, float]:
    """P(U >= u) and P(U <= u) under the null, normal approximation."""
    n = n1 + n2
    _, counts = np.unique(both, return_counts=True)
    tie = float(np.sum(counts**3 - counts)) / (n * (n - 1))
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie))
    if sigma == 0:
        return 1.0, 1.0
    mean = n1 * n2 / 2.0

    def upper(z: float) -> float:
        return 0.5 * math.erfc(z / math.sqrt(2.0))

    return upper((u - mean - 0.5) / sigma), upper((mean - u - 0.5) / sigma)
