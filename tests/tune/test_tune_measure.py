"""Step statistics, the noise rule, compile break-even and the fidelity gate."""

from __future__ import annotations

import math

import pytest

from torchdoctor.tune import fidelity, measure


def test_median_and_spread_over_blocks() -> None:
    # The third block was disturbed by another process: the median over blocks ignores it.
    st = measure.step_stats([0.010, 0.012, 0.011, 0.013, 0.100, 0.102])
    assert st.median_s == pytest.approx(0.012)
    assert st.iqr_s == pytest.approx(0.101 - 0.011)
    assert st.n == 3
    many = measure.step_stats([0.01 * (1 + i % 5) for i in range(50)], blocks=10)
    assert (
        many.n == 10 and many.median_s == pytest.approx(0.03) and many.iqr_s == pytest.approx(0.0)
    )


def test_bursty_data_loading_is_timed_by_throughput() -> None:
    # Four workers deliver four batches at once: three steps find data, one waits 29 ms.
    times = [0.001, 0.001, 0.001, 0.029] * 5
    assert sorted(times)[len(times) // 2] == 0.001  # what a per-step median would say
    assert measure.step_stats(times).median_s == pytest.approx(0.008)


def test_beats_needs_more_than_the_noise() -> None:
    base = measure.step_stats([0.100] * 20)
    assert measure.beats(measure.step_stats([0.097] * 20), base)  # 3% > 2% floor
    assert not measure.beats(measure.step_stats([0.099] * 20), base)  # 1%: noise
    noisy = measure.step_stats([0.08, 0.08, 0.09, 0.09, 0.13, 0.13])  # 90 ms, spread 50 ms
    assert not measure.beats(noisy, base)


def test_blocks_hold_whole_epochs() -> None:
    # Workers restart every 8 steps (not persistent): that step costs 40 ms more.
    times = [0.045 if i % 8 == 0 else 0.005 for i in range(24)]
    unaligned = measure.step_stats(times)  # 5 blocks of ~5 steps: some hold a restart, some not
    aligned = measure.step_stats(times, period=8)
    assert unaligned.iqr_s > 0.005
    assert aligned.n == 3 and aligned.iqr_s == 0.0 and aligned.median_s == pytest.approx(0.010)


def test_break_even_steps() -> None:
    eager, compiled = measure.step_stats([0.030] * 5), measure.step_stats([0.020] * 5)
    assert measure.break_even_steps(12.0, eager, compiled) == 1200
    assert measure.break_even_steps(12.0, compiled, eager) is None
    assert measure.warmup_overhead_s([12.02, 0.02, 0.02], compiled) == pytest.approx(12.0)


def test_fidelity_accepts_rounding_differences() -> None:
    ref = [1.0, 0.9, 0.8]
    v = fidelity.check(ref, [1.0, 0.9 * (1 + 1e-5), 0.8], "fp32", steps=3)
    assert v.ok and v.max_rel_dev == pytest.approx(1e-5)


def test_fidelity_rejects_a_diverging_candidate_with_numbers() -> None:
    ref = [1.0, 0.9, 0.8, 0.7]
    cand = [1.0, 0.92, 0.95, 1.2]
    v = fidelity.check(ref, cand, "bf16-mixed", steps=4)
    assert not v.ok
    assert v.worst_step == 3 and v.max_rel_dev == pytest.approx(0.5 / 0.7)
    assert "step 3" in v.reason and "1.2 vs 0.7" in v.reason and "5e-02" in v.reason


def test_fidelity_tolerance_depends_on_precision() -> None:
    ref, cand = [1.0, 1.0], [1.0, 1.02]
    assert not fidelity.check(ref, cand, "fp32", steps=2).ok
    assert not fidelity.check(ref, cand, "tf32", steps=2).ok
    assert fidelity.check(ref, cand, "bf16-mixed", steps=2).ok


def test_fidelity_rejects_non_finite_and_short_runs() -> None:
    v = fidelity.check([1.0, 1.0, 1.0], [1.0, math.inf, 1.0], "fp32", steps=3)
    assert not v.ok and "inf at step 1" in v.reason
    v = fidelity.check([1.0, 1.0, 1.0], [1.0], "fp32", steps=3)
    assert not v.ok and "only 1 of 3" in v.reason
