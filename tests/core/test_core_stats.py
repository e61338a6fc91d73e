"""The statistics module: known table values, coverage by simulation, edge cases."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from torchdoctor import stats


def test_median_quantile_iqr_match_statistics_inclusive() -> None:
    xs = [5.0, 1.0, 9.0, 3.0, 7.0, 2.0]
    assert stats.median(xs) == statistics.median(xs)
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    assert stats.quantile(xs, 0.25) == pytest.approx(q1)
    assert stats.iqr(xs) == pytest.approx(q3 - q1)
    d = stats.describe(xs)
    assert (d.n, d.min, d.max, d.median) == (6, 1.0, 9.0, 4.0)
    assert d.rel_spread == pytest.approx((q3 - q1) / 4.0)


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [math.inf]])
def test_empty_or_nonfinite_raises(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        stats.median(bad)


def test_signed_rank_interval_uses_table_critical_value() -> None:
    # n = 10, two-sided 5%: critical T = 8, P(T <= 8) = 25/1024 -> coverage 1 - 50/1024.
    d = np.arange(1, 11, dtype=float)
    ri = stats.paired_ratio_interval(np.exp(d / 10), np.ones(10))
    assert ri.confidence == pytest.approx(1 - 50 / 1024)
    walsh = np.sort([(d[i] + d[j]) / 20 for i in range(10) for j in range(i, 10)])
    assert math.log(ri.low) == pytest.approx(walsh[8])  # W_(9), 1-based
    assert math.log(ri.high) == pytest.approx(walsh[55 - 9])  # W_(47)
    assert math.log(ri.ratio) == pytest.approx(np.median(walsh))


def test_six_rounds_give_min_max_and_five_give_none() -> None:
    num = [1.2, 1.3, 1.25, 1.4, 1.1, 1.35]
    ri = stats.paired_ratio_interval(num, [1.0] * 6)
    assert (ri.low, ri.high) == pytest.approx((1.1, 1.4))
    assert ri.confidence == pytest.approx(1 - 2 / 64)
    none = stats.paired_ratio_interval(num[:5], [1.0] * 5)
    assert none.low == 0.0 and math.isinf(none.high) and none.format() == f"{none.ratio:.2f}x [?]"
    assert not none.clears(1.0)


def test_format_matches_table_style() -> None:
    ri = stats.RatioInterval(1.3149, 1.2201, 1.4049, 0.95, 12, "rank")
    assert ri.format() == "1.31x [1.22-1.40]"
    assert ri.clears(1.2) and not ri.clears(1.25) and ri.excludes(1.0) and not ri.excludes(1.3)


@pytest.mark.parametrize("method", ["rank", "bootstrap"])
def test_paired_interval_covers_true_ratio(method: stats.RatioMethod) -> None:
    """Rounds share a load factor that moves 3x between rounds; the ratio is 1.3 throughout."""
    rng = np.random.default_rng(7)
    hits, reps = 0, 200
    for _ in range(reps):
        load = rng.uniform(1.0, 3.0, 12)
        base = 10.0 * load * rng.lognormal(0, 0.05, 12)
        cand = 10.0 / 1.3 * load * rng.lognormal(0, 0.05, 12)
        ri = stats.paired_ratio_interval(base, cand, method=method, resamples=500, seed=1)
        hits += ri.low <= 1.3 <= ri.high
    assert hits / reps >= (0.93 if method == "rank" else 0.88)


def test_one_disturbed_round_widens_eight_rounds_but_not_twelve() -> None:
    """Signed-rank intervals tolerate outliers only beyond k Walsh averages: keep measuring."""
    base = [10.0, 10.2, 9.9, 10.1, 10.0, 9.8, 10.3, 10.1, 10.0, 9.9, 10.2, 10.1]
    cand = [8.0, 8.1, 7.9, 30.0, 8.0, 7.8, 8.1, 8.0, 8.1, 7.9, 8.0, 8.2]  # round 3: a load burst
    eight = stats.paired_ratio_interval(base[:8], cand[:8])
    twelve = stats.paired_ratio_interval(base, cand)
    assert not eight.clears(1.15)
    assert twelve.clears(1.2) and 1.2 < twelve.ratio < 1.3
    assert stats.outlier_rounds(np.array(base) / np.array(cand)) == [3]


def test_paired_length_mismatch_and_nonpositive_raise() -> None:
    with pytest.raises(ValueError, match="length"):
        stats.paired_ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="positive"):
        stats.paired_ratio_interval([1.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="confidence"):
        stats.paired_ratio_interval([1.0], [1.0], confidence=1.0)


def test_bootstrap_is_repeatable_with_seed() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0, 0.2, 10), rng.lognormal(0, 0.2, 10)
    one = stats.paired_ratio_interval(a, b, method="bootstrap", seed=5)
    assert one == stats.paired_ratio_interval(a, b, method="bootstrap", seed=5)
    assert one.method == "bootstrap" and one.low < one.ratio < one.high


def test_mann_whitney_exact_matches_table() -> None:
    # Completely separated 5 vs 5: U = 25, two-sided p = 2 / C(10, 5) = 2 / 252.
    t = stats.mann_whitney([6, 7, 8, 9, 10], [1, 2, 3, 4, 5])
    assert t.u == 25 and t.prob_a_greater == 1.0
    assert t.p_value == pytest.approx(2 / 252)
    # One swap: U = 24 -> P(U >= 24) = 2/252, p = 4/252.
    assert stats.mann_whitney([5, 7, 8, 9, 10], [1, 2, 3, 4, 6]).p_value == pytest.approx(4 / 252)


def test_mann_whitney_normal_approximation_with_ties() -> None:
    rng = np.random.default_rng(0)
    a = np.round(rng.normal(10, 1, 80))
    b = np.round(rng.normal(10, 1, 80))
    same = stats.mann_whitney(a, b)
    shifted = stats.mann_whitney(a + 2, b)
    assert same.p_value > 0.01 and shifted.p_value < 1e-6 and shifted.prob_a_greater > 0.8


def test_independent_interval_exact_and_coverage() -> None:
    # 5 vs 5 at 95%: critical U = 2, P(U <= 2) = 4/252 -> k = 3, coverage 1 - 8/252.
    ri = stats.independent_ratio_interval([2.0] * 5, [1.0, 1.01, 1.02, 1.03, 1.04])
    assert ri.confidence == pytest.approx(1 - 8 / 252) and ri.n == 5
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(400):
        a = 13.0 * rng.lognormal(0, 0.1, 15)
        b = 10.0 * rng.lognormal(0, 0.1, 20)
        got = stats.independent_ratio_interval(a, b)
        hits += got.low <= 1.3 <= got.high
    assert hits / 400 >= 0.93  # nominal 95%; binomial noise at 400 draws is about 1%


def test_independent_bootstrap_ratio_of_medians() -> None:
    a, b = [12.0, 13.0, 14.0, 13.0], [10.0, 10.0, 9.0, 11.0]
    ri = stats.independent_ratio_interval(a, b, method="bootstrap")
    assert ri.ratio == pytest.approx(13.0 / 10.0)


def test_outlier_rounds_far_out_only() -> None:
    xs = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 4.0, 1.02]
    assert stats.outlier_rounds(xs) == [6]
    assert stats.outlier_rounds([1.0, 9.0, 1.0]) == []
    assert stats.outlier_rounds([1.0, 1.1, 0.9, 1.05, 1.5], fence_iqr=1.5) == [4]
