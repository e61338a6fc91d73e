"""Step statistics, warm-up overhead and the fidelity gate (comparisons: tests/core/test_ab.py)."""

from __future__ import annotations

import math

import pytest

from torchdoctor import stats
from torchdoctor.tune import fidelity, measure


def test_warmup_overhead_is_the_warmup_beyond_steady_steps() -> None:
    compiled = stats.describe([0.020] * 6)
    assert measure.warmup_overhead_s([12.02, 0.02, 0.02], compiled) == pytest.approx(12.0)
    assert measure.warmup_overhead_s([0.01, 0.02], compiled) == 0.0  # never negative


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
