"""The one statistics module: medians, quantiles, intervals of ratios, rank tests, outlier rounds.

Used by the meter, tune, check, compare and the benchmarks, so they never disagree on what a
median or a speed-up interval is. No torch import; numpy only.

Public API (stable; other modules and branches depend on it)
------------------------------------------------------------
- :func:`median`, :func:`quantile`, :func:`iqr`: of a sequence of floats. Quantiles interpolate
  linearly between order statistics (numpy's default ``linear`` method, the same as
  ``statistics.quantiles(method="inclusive")``).
- :func:`describe` -> :class:`Spread`: n, median, q1, q3, iqr, min, max and ``rel_spread``.
- :func:`median_interval`: a distribution-free (order statistics) interval of the median.
- :func:`paired_ratio_interval` -> :class:`RatioInterval`: interval of the typical per-round ratio
  ``num[i] / den[i]`` of paired (interleaved) rounds. Speed-up of a candidate over a baseline:
  ``num`` = baseline step times, ``den`` = candidate step times.
- :func:`independent_ratio_interval` -> :class:`RatioInterval`: interval of the ratio of typical
  values of two independent samples (step times of two runs that were not interleaved).
- :func:`mann_whitney` -> :class:`RankTest`: two-sided Mann-Whitney U test of two independent
  samples (are ``a``'s values typically larger than ``b``'s?).
- :func:`mean_ratio_interval` -> :class:`RatioInterval`: percentile bootstrap of the ratio of the
  two samples' means (what a user pays per step, rare long steps included).
- :func:`widened`: an interval with a variance component its sample cannot show added (two runs
  made at different moments: the steps of one run share that run's machine load).
- :func:`outlier_rounds`: indices of values outside Tukey's far-out fences.

Methods (``RatioMethod``)
-------------------------
``"rank"`` (default), paired: on the log ratios ``d_i = log(num_i / den_i)``, the Hodges-Lehmann
estimate (median of the Walsh averages ``(d_i + d_j) / 2``, i <= j) with the distribution-free
interval from the exact Wilcoxon signed-rank distribution (normal approximation above 60 rounds);
exponentiated back to ratios. Assumes rounds are independent and the log-ratio distribution is
symmetric about its centre; robust to a few disturbed rounds. Under 6 rounds no 95% interval
exists, and the interval is (0, inf).
``"rank"``, independent: the Hodges-Lehmann shift of ``log a - log b`` (median of all pairwise
differences) with the interval from the Mann-Whitney U distribution (Bauer 1972; exact without
ties for small samples, normal approximation otherwise).
``"bootstrap"``: percentile bootstrap (``resamples`` draws, fixed ``seed``, so it is repeatable)
of the median log ratio (paired) or of the log ratio of the two medians (independent).

``RatioInterval.confidence`` is the coverage actually achieved: rank intervals step between
order statistics, so it is at least the requested confidence, not exactly it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Literal

import numpy as np

RatioMethod = Literal["rank", "bootstrap"]

_EXACT_SIGNED_RANK_MAX_N = 60  # exact distribution table: 60 * 61 / 2 = 1830 sums, cheap
_EXACT_MW_MAX_CELLS = 2500  # n * m above this: normal approximation
_TUKEY_FAR_OUT = 3.0  # Tukey's "far out" fence: 3 IQRs beyond the quartiles


def _array(values: Sequence[float] | np.ndarray) -> np.ndarray:
    xs = np.asarray(values, dtype=float).ravel()
    if xs.size == 0:
        raise ValueError("no values")
    if not np.all(np.isfinite(xs)):
        raise ValueError("values must be finite")
    return xs


def median(values: Sequence[float] | np.ndarray) -> float:
    """The median (mean of the two middle values for an even count). Raises on empty input."""
    return float(np.median(_array(values)))


def quantile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The ``q``-quantile (0..1), linear interpolation between order statistics."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside 0..1")
    return float(np.quantile(_array(values), q))


def iqr(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile range: 75th minus 25th percentile (0.0 for one value)."""
    xs = _array(values)
    q1, q3 = np.quantile(xs, [0.25, 0.75])
    return float(q3 - q1)


@dataclass(frozen=True)
class Spread:
    """Median and spread of a sample, in the sample's unit."""

    n: int
    """Number of values."""
    median: float
    """Median."""
    q1: float
    """25th percentile."""
    q3: float
    """75th percentile."""
    min: float
    """Smallest value."""
    max: float
    """Largest value."""

    @property
    def iqr(self) -> float:
        """q3 - q1."""
        return self.q3 - self.q1

    @property
    def rel_spread(self) -> float:
        """IQR as a fraction of the median (0.1 = 10%); inf when the median is 0."""
        return self.iqr / self.median if self.median > 0 else math.inf


def describe(values: Sequence[float] | np.ndarray) -> Spread:
    """n, median, quartiles and range of ``values``. Raises ValueError on empty input."""
    xs = _array(values)
    q1, q2, q3 = np.quantile(xs, [0.25, 0.5, 0.75])
    return Spread(xs.size, float(q2), float(q1), float(q3), float(xs.min()), float(xs.max()))


def median_interval(
    values: Sequence[float] | np.ndarray, confidence: float = 0.9
) -> tuple[float, float, float]:
    """A distribution-free interval of the median: (low, high, its actual confidence).

    The order statistics x(k) and x(n+1-k) with the largest k whose binomial coverage is at
    least ``confidence``; with too few values for that, the range (and its coverage,
    1 - 2 / 2**n). Raises ValueError on empty input."""
    _check_confidence(confidence)
    xs = np.sort(_array(values))
    n = xs.size
    k, cover = 1, 1.0 - 2.0 * 0.5**n
    tail = 0.0
    for j in range(1, n // 2 + 1):  # P(Binomial(n, 1/2) <= j - 1), both tails
        tail += math.comb(n, j - 1) * 0.5**n
        if 1.0 - 2.0 * tail < confidence:
            break
        k, cover = j, 1.0 - 2.0 * tail
    return float(xs[k - 1]), float(xs[n - k]), cover


@dataclass(frozen=True)
class RatioInterval:
    """A ratio's point estimate and confidence interval (ratios, not logs)."""

    ratio: float
    """Point estimate (Hodges-Lehmann or median; see the module docstring)."""
    low: float
    """Lower end of the interval (0.0 when too few values for any interval)."""
    high: float
    """Upper end of the interval (inf when too few values for any interval)."""
    confidence: float
    """Coverage achieved (>= the requested confidence for rank intervals)."""
    n: int
    """Paired rounds, or the smaller sample's size for independent samples."""
    method: RatioMethod
    """How the interval was computed."""

    def clears(self, threshold: float) -> bool:
        """True when the whole interval lies above ``threshold`` (e.g. ``1 + min_gain``)."""
        return self.low > threshold

    def below(self, threshold: float) -> bool:
        """True when the whole interval lies below ``threshold``."""
        return self.high < threshold

    def excludes(self, value: float) -> bool:
        """True when ``value`` lies outside the interval."""
        return value < self.low or value > self.high

    def format(self, digits: int = 2) -> str:
        """``1.31x [1.22-1.40]`` (``[?]`` when no interval exists)."""
        if self.low <= 0 or math.isinf(self.high):
            return f"{self.ratio:.{digits}f}x [?]"
        return f"{self.ratio:.{digits}f}x [{self.low:.{digits}f}-{self.high:.{digits}f}]"

    def __str__(self) -> str:
        return self.format()


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence} outside (0, 1)")


def _positive(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    xs = _array(values)
    if np.any(xs <= 0):
        raise ValueError(f"{name}: ratios need positive values")
    return xs


@lru_cache(maxsize=128)
def _signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(T <= t) for t = 0..n(n+1)/2, T the Wilcoxon signed-rank statistic of n values."""
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):
        counts[rank:] = counts[rank:] + counts[:-rank].copy()
    return tuple(np.cumsum(counts) / 2.0**n)


def _signed_rank_k(n: int, confidence: float) -> tuple[int, float]:
    """1-based rank k of the interval's lower end, and the coverage achieved.

    With C the largest t with P(T <= t) <= alpha/2, k = C + 1 and the interval is
    [W_(k), W_(M+1-k)] over the M sorted Walsh averages; k = 0 means no interval at this
    confidence (too few values).
    """
    alpha_half = (1.0 - confidence) / 2.0
    if n <= _EXACT_SIGNED_RANK_MAX_N:
        cdf = _signed_rank_cdf(n)
        k = 0
        while k < len(cdf) and cdf[k] <= alpha_half:
            k += 1
        return k, float(1.0 - 2.0 * cdf[k - 1]) if k else 0.0
    m = n * (n + 1) / 4.0
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24.0)
    z = NormalDist().inv_cdf(1.0 - alpha_half)
    return max(0, math.floor(m - z * sd) + 1), confidence


def _walsh_averages(d: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2.0)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def paired_ratio_interval(
    num: Sequence[float] | np.ndarray,
    den: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    method: RatioMethod = "rank",
    resamples: int = 4000,
    seed: int = 0,
) -> RatioInterval:
    """Interval of the typical per-round ratio ``num[i] / den[i]`` of paired rounds.

    Returns a :class:`RatioInterval` (unitless). Raises ValueError on empty, unequal-length,
    non-finite or non-positive input. See the module docstring for the methods.
    """
    _check_confidence(confidence)
    a, b = _positive(num, "num"), _positive(den, "den")
    if a.size != b.size:
        raise ValueError(f"paired samples differ in length ({a.size} vs {b.size})")
    d = np.log(a / b)
    if method == "bootstrap":
        return _bootstrap(d, None, confidence, resamples, seed)
    walsh = _walsh_averages(d)
    point = float(np.exp(np.median(walsh)))
    k, achieved = _signed_rank_k(d.size, confidence)
    if k == 0:
        return RatioInterval(point, 0.0, math.inf, 0.0, d.size, "rank")
    lo, hi = float(np.exp(walsh[k - 1])), float(np.exp(walsh[walsh.size - k]))
    return RatioInterval(point, lo, hi, achieved, d.size, "rank")


def _bootstrap(
    x: np.ndarray, y: np.ndarray | None, confidence: float, resamples: int, seed: int
) -> RatioInterval:
    """Percentile bootstrap of median(x) (paired logs) or median(x) - median(y) (two samples)."""
    rng = _rng(seed)
    draws = np.median(x[rng.integers(0, x.size, (resamples, x.size))], axis=1)
    point = float(np.median(x))
    if y is not None:
        draws = draws - np.median(y[rng.integers(0, y.size, (resamples, y.size))], axis=1)
        point -= float(np.median(y))
    alpha_half = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(draws, [alpha_half, 1.0 - alpha_half])
    n = x.size if y is None else min(x.size, y.size)
    return RatioInterval(
        float(np.exp(point)), float(np.exp(lo)), float(np.exp(hi)), confidence, n, "bootstrap"
    )


@dataclass(frozen=True)
class RankTest:
    """Two-sided Mann-Whitney U test of two independent samples."""

    u: float
    """U statistic of ``a``: pairs (a_i, b_j) with a_i > b_j, ties counted as one half."""
    p_value: float
    """Two-sided p-value (exact without ties for small samples, else normal approximation)."""
    prob_a_greater: float
    """U / (n_a * n_b): the chance a random ``a`` value exceeds a random ``b`` value."""


@lru_cache(maxsize=64)
def _mw_cdf(n: int, m: int) -> tuple[float, ...]:
    """P(U <= u) for u = 0..n*m, U the Mann-Whitney statistic without ties."""
    # ways[i][j][u]: arrangements of i a's and j b's with U = u; rolled over i.
    ways = [[np.zeros(n * m + 1) for _ in range(m + 1)] for _ in range(n + 1)]
    for j in range(m + 1):
        ways[0][j][0] = 1.0
    for i in range(1, n + 1):
        ways[i][0][0] = 1.0
        for j in range(1, m + 1):
            # the largest value is an a (beats all j b's) or a b (adds nothing)
            shifted = np.zeros(n * m + 1)
            shifted[j:] = ways[i - 1][j][: n * m + 1 - j]
            ways[i][j] = shifted + ways[i][j - 1]
    total = ways[n][m]
    return tuple(np.cumsum(total) / total.sum())


def _ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (1-based), ties sharing the mean of their positions."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    ranks = np.empty(values.size)
    start = 0
    while start < values.size:
        end = start
        while end + 1 < values.size and sorted_vals[end + 1] == sorted_vals[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def mann_whitney(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> RankTest:
    """Two-sided Mann-Whitney U test: do ``a`` and ``b`` come from the same distribution?

    Returns a :class:`RankTest`. Exact p-value without ties when n_a * n_b <= 2500; otherwise the
    normal approximation with tie and continuity correction.
    """
    x, y = _array(a), _array(b)
    n, m = x.size, y.size
    ranks = _ranks(np.concatenate([x, y]))
    u = float(ranks[:n].sum() - n * (n + 1) / 2.0)
    has_ties = np.unique(np.concatenate([x, y])).size < n + m
    if not has_ties and n * m <= _EXACT_MW_MAX_CELLS:
        cdf = _mw_cdf(n, m)
        lo = min(u, n * m - u)
        p = min(1.0, 2.0 * cdf[round(lo)])
    else:
        p = _mw_normal_p(u, n, m, ranks)
    return RankTest(u, p, u / (n * m))


def _mw_normal_p(u: float, n: int, m: int, ranks: np.ndarray) -> float:
    _, tie_counts = np.unique(ranks, return_counts=True)
    tie_term = float(np.sum(tie_counts**3 - tie_counts)) / ((n + m) * (n + m - 1))
    var = n * m / 12.0 * ((n + m + 1) - tie_term)
    if var <= 0:
        return 1.0
    z = (abs(u - n * m / 2.0) - 0.5) / math.sqrt(var)
    return min(1.0, 2.0 * (1.0 - NormalDist().cdf(max(z, 0.0))))


def _mw_k(n: int, m: int, confidence: float) -> tuple[int, float]:
    """1-based rank k of the lower end among the n*m sorted pairwise differences, and coverage.

    Same construction as :func:`_signed_rank_k` with the Mann-Whitney distribution.
    """
    alpha_half = (1.0 - confidence) / 2.0
    if n * m <= _EXACT_MW_MAX_CELLS:
        cdf = _mw_cdf(n, m)
        k = 0
        while k < len(cdf) and cdf[k] <= alpha_half:
            k += 1
        return k, float(1.0 - 2.0 * cdf[k - 1]) if k else 0.0
    z = NormalDist().inv_cdf(1.0 - alpha_half)
    sd = math.sqrt(n * m * (n + m + 1) / 12.0)
    return max(0, math.floor(n * m / 2.0 - z * sd) + 1), confidence


def independent_ratio_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    method: RatioMethod = "rank",
    resamples: int = 4000,
    seed: int = 0,
) -> RatioInterval:
    """Interval of the ratio of typical values, ``a`` over ``b``, of two independent samples.

    E.g. ``a`` = a baseline run's step times, ``b`` = a candidate run's: a ratio above 1 means the
    candidate is faster. Returns a :class:`RatioInterval`; ``n`` is the smaller sample's size.
    """
    _check_confidence(confidence)
    x, y = np.log(_positive(a, "a")), np.log(_positive(b, "b"))
    if method == "bootstrap":
        return _bootstrap(x, y, confidence, resamples, seed)
    diffs = np.sort(np.subtract.outer(x, y).ravel())
    point = float(np.exp(np.median(diffs)))
    k, achieved = _mw_k(x.size, y.size, confidence)
    n = min(x.size, y.size)
    if k == 0:
        return RatioInterval(point, 0.0, math.inf, 0.0, n, "rank")
    lo, hi = float(np.exp(diffs[k - 1])), float(np.exp(diffs[diffs.size - k]))
    return RatioInterval(point, lo, hi, achieved, n, "rank")


def mean_ratio_interval(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
) -> RatioInterval:
    """Ratio of means, ``mean(a) / mean(b)``, with a percentile bootstrap interval (each sample
    resampled on its own, ``resamples`` draws, fixed ``seed``). Means, not medians: one stall in
    ten steps costs the user a tenth of a stall per step, and the mean says so.

    The interval treats the values as independent draws; for the steps of one run it says only
    how well that run's mean is known, not how a second run would differ (see :func:`widened`).
    """
    _check_confidence(confidence)
    x, y = _positive(a, "a"), _positive(b, "b")
    rng = _rng(seed)
    mx = x[rng.integers(0, x.size, (resamples, x.size))].mean(axis=1)
    my = y[rng.integers(0, y.size, (resamples, y.size))].mean(axis=1)
    alpha_half = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(np.log(mx) - np.log(my), [alpha_half, 1.0 - alpha_half])
    point = float(x.mean() / y.mean())
    n = min(x.size, y.size)
    return RatioInterval(point, float(np.exp(lo)), float(np.exp(hi)), confidence, n, "bootstrap")


def widened(iv: RatioInterval, extra_log_sd: float) -> RatioInterval:
    """``iv`` with an independent source of variation added on the log scale.

    Each half-width ``h`` (``log(ratio / low)`` and ``log(high / ratio)``) becomes
    ``sqrt(h**2 + (z * extra_log_sd)**2)``, ``z`` the normal quantile of ``iv.confidence``: the
    variances of independent log-scale errors add. ``extra_log_sd`` is the standard deviation of
    the log ratio that the sample cannot show (for two runs of the same code made at different
    moments, the between-run spread of their log ratio). An interval that does not exist stays so.
    """
    if extra_log_sd < 0 or not math.isfinite(extra_log_sd):
        raise ValueError(f"extra_log_sd must be finite and >= 0; got {extra_log_sd}")
    if iv.low <= 0 or math.isinf(iv.high):
        return iv
    z = NormalDist().inv_cdf(1.0 - (1.0 - iv.confidence) / 2.0)
    extra = z * extra_log_sd
    lo_half = math.hypot(math.log(iv.ratio / iv.low), extra)
    hi_half = math.hypot(math.log(iv.high / iv.ratio), extra)
    return RatioInterval(
        iv.ratio,
        iv.ratio * math.exp(-lo_half),
        iv.ratio * math.exp(hi_half),
        iv.confidence,
        iv.n,
        iv.method,
    )


def outlier_rounds(
    values: Sequence[float] | np.ndarray, *, fence_iqr: float = _TUKEY_FAR_OUT
) -> list[int]:
    """Indices of values beyond Tukey's fences: below q1 - k*IQR or above q3 + k*IQR.

    ``fence_iqr`` (k) defaults to 3 ("far out"): a round disturbed by another process, not the
    ordinary spread. Fewer than 4 values: no outliers (quartiles mean nothing).
    """
    xs = _array(values)
    if xs.size < 4:
        return []
    q1, q3 = np.quantile(xs, [0.25, 0.75])
    spread = q3 - q1
    lo, hi = q1 - fence_iqr * spread, q3 + fence_iqr * spread
    return [int(i) for i in np.flatnonzero((xs < lo) | (xs > hi))]
