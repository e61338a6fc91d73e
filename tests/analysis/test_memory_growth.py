"""The growth fit of the memory at each step's end (analysis/memory_growth.py)."""

from __future__ import annotations

import random

import pytest

from torchdoctor.analysis.memory_growth import (
    MIB,
    clean_segments,
    fit_growth,
    growth_of,
    split_at,
)

SCHEDULE = {"clean": [4, 11], "profiled": [13, 16], "after": [17, 21]}


def _series(n: int, per_step: float, noise: float = 0.0, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [int(300 * MIB + per_step * i + rng.uniform(-noise, noise)) for i in range(n)]


def test_one_step_that_grabbed_a_lot_does_not_move_the_fit() -> None:
    values = [int(300 * MIB + 2 * MIB * i) for i in range(10)]
    values[4] += 500 * MIB  # one step that grabbed a lot and gave it back: the median ignores it
    fit = fit_growth(values, [(1, 10)], "resident")
    assert fit is not None and fit.bytes_per_step == pytest.approx(2 * MIB)
    assert fit_growth(values[:2], [(1, 2)], "resident") is None  # one difference: no fit


def test_segments_leave_out_the_instrumented_steps() -> None:
    assert clean_segments(SCHEDULE, 30) == [(4, 11), (17, 21)]
    assert clean_segments(SCHEDULE, 14) == [(4, 11)]  # the script ended in the profiled window
    assert clean_segments({"clean": None, "after": None}, 30) == []
    # --full, no toggles: the steps after the after window are clean too
    assert clean_segments(SCHEDULE, 40, tail=True) == [(4, 11), (17, 40)]


def test_a_leak_is_fitted_through_noise_and_the_profilers_jump() -> None:
    values = _series(30, 3 * MIB, noise=0.8 * MIB)
    for i in range(12, 16):  # the profiler's events: a jump that the fit must not count
        values[i] += 200 * MIB
    fit = fit_growth(values, clean_segments(SCHEDULE, 30), "resident")
    assert fit is not None and fit.kind == "resident"
    assert fit.bytes_per_step == pytest.approx(3 * MIB, rel=0.2)
    assert fit.rising_share >= 0.7 and fit.steps == 7 + 4
    assert fit.segments == ((4, 11), (17, 21))


def test_a_warm_up_that_levels_off_is_no_slope() -> None:
    # the allocator's pools grow in the first clean steps, then nothing changes
    values = [300 * MIB + min(i, 5) * 4 * MIB for i in range(30)]
    fit = fit_growth(values, clean_segments(SCHEDULE, 30), "resident")
    assert fit is not None
    assert fit.bytes_per_step == 0 and fit.rising_share < 0.5


def test_unknown_values_and_too_few_steps() -> None:
    assert fit_growth([-1] * 30, clean_segments(SCHEDULE, 30), "resident") is None
    assert fit_growth(_series(6, MIB), [(4, 6)], "device") is None  # two differences


def test_growth_of_reads_both_columns() -> None:
    memory = {"rss_bytes": _series(30, 0.0), "cuda_allocated_bytes": _series(30, 2 * MIB)}
    fits = {f.kind: f for f in growth_of(memory, SCHEDULE)}
    assert fits["resident"].bytes_per_step == 0
    assert fits["device"].bytes_per_step == pytest.approx(2 * MIB)
    assert growth_of({"rss_bytes": None, "cuda_allocated_bytes": None}, SCHEDULE) == []
    assert growth_of(None, SCHEDULE) == []


def test_steps_that_compiled_are_cut_out() -> None:
    assert split_at([(4, 11), (17, 21)], [5, 6, 9, 30]) == [(6, 8), (9, 11), (17, 21)]
    # each recompile (steps 4-9) adds compiled code; the steps after them are flat
    values = [300 * MIB + min(i, 8) * 3 * MIB for i in range(30)]
    schedule_fit = growth_of({"rss_bytes": values}, SCHEDULE)
    assert schedule_fit[0].bytes_per_step > 0
    (fit,) = growth_of({"rss_bytes": values}, SCHEDULE, compiled=range(4, 10))
    assert fit.bytes_per_step == 0 and fit.segments == ((9, 11), (17, 21))
