"""The statistics behind ``compare``, from the shared ``torchdoctor.stats``: a rank test for
"beyond the noise" and an interval for the change in median step time.

Why these two:

* **Mann-Whitney U** decides whether NEW's steps are slower or faster than BASE's: two-sided for
  the report's verdict, one-sided ("NEW is slower") for ``--fail-if-slower``, whose question is
  fixed before the data is seen. It makes no assumption about the shape of step-time
  distributions (they are skewed: a step with a data-loader hiccup or a recompile is far slower
  than the rest) and it is exact for the handful of steps a profiler window holds (5 vs 5 steps
  can reach p = 0.008; a t-test would need normality we do not have).
* A **bootstrap of the ratio of medians** gives the interval on the size of the change. With
  few steps the interval is coarse, which is honest: it says how little a short window shows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torchdoctor import stats

BOOTSTRAP_ROUNDS = 4000
BOOTSTRAP_SEED = 20261201
"""Fixed, so a rerun prints the same interval."""
ALPHA = 0.05
"""Significance level: a change is beyond the noise when p < ALPHA."""


@dataclass(frozen=True)
class RankTest:
    """Mann-Whitney U test of NEW against BASE."""

    u_new_greater: float
    """Pairs (base, new) where the NEW step was the slower one (ties count a half)."""
    p_two_sided: float
    p_new_slower: float
    """One-sided p-value for "NEW's steps are slower" (the gate's question, fixed in advance)."""
    method: str


def mann_whitney(base: np.ndarray, new: np.ndarray) -> RankTest:
    """The shared two-sided test, and its one-sided half in the direction "NEW is slower".

    The null distribution of U is symmetric, so the one-sided p-value in the observed direction
    is half the two-sided one; in the other direction it is at least one half.
    """
    if len(base) < 2 or len(new) < 2:
        return RankTest(float("nan"), 1.0, 1.0, "too few steps")
    t = stats.mann_whitney(new, base)
    p = float(t.p_value)
    one = p / 2.0 if t.prob_a_greater > 0.5 else 1.0 - p / 2.0
    exact = len(base) * len(new) <= 2500 and len(np.unique(np.r_[base, new])) == len(base) + len(
        new
    )
    return RankTest(float(t.u), p, one, "exact" if exact else "normal approximation")


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
        return bool(self.p_value < ALPHA)

    @property
    def slower_beyond_noise(self) -> bool:
        """True when the one-sided test says NEW's steps are slower, at ALPHA. A gate asks
        only this question, decided before looking at the data, so one side is legitimate."""
        return bool(self.test.p_new_slower < ALPHA)

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
    b_med, n_med = stats.median(base), stats.median(new)
    iv = stats.independent_ratio_interval(
        new,
        base,
        confidence=confidence,
        method="bootstrap",
        resamples=BOOTSTRAP_ROUNDS,
        seed=BOOTSTRAP_SEED,
    )
    test = mann_whitney(base, new)
    return Change(
        b_med,
        n_med,
        n_med / b_med,
        float(iv.low),
        float(iv.high),
        confidence,
        test,
        len(base),
        len(new),
    )
