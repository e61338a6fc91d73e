"""Step-time statistics: median and spread, interleaved comparisons, compile break-even.

Follows ``torch.utils.benchmark``: keep the raw times, report median and interquartile range (IQR),
never the mean (one descheduled step on a shared machine moves a mean, not a median). Two
configurations are compared only on rounds measured side by side (see ``rounds.py``), through
the per-round ratio's interval from :mod:`torchdoctor.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from torchdoctor import stats

MIN_GAIN = 0.02
"""Default smallest relative speed-up that counts: a win needs its whole interval above 1.02 (below
~2%, a gain rarely pays for a configuration change)."""


@dataclass(frozen=True)
class StepStats:
    """Steady-state step times of one arm of a trial (warm-up excluded)."""

    median_s: float
    """Median over windows (one per round) of the mean step time, in seconds."""
    iqr_s: float
    """Interquartile range of the windows' mean step times, in seconds."""
    n: int
    """Windows (rounds) the median is taken over."""

    @property
    def rel_spread(self) -> float:
        """IQR as a fraction of the median (0.1 = 10%)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else math.inf


Decision = Literal["win", "drop", "undecided"]


@dataclass(frozen=True)
class Comparison:
    """A candidate against a reference on interleaved rounds."""

    interval: stats.RatioInterval
    """Reference step time / candidate step time per round (above 1: the candidate is faster)."""
    decision: Decision
    """win: the whole interval clears 1 + min_gain; drop: the whole interval is below it (the
    candidate cannot reach the gain); undecided: more rounds needed."""
    outliers: int = 0
    """Rounds whose ratio lies beyond Tukey's far-out fences (a burst of load on one arm)."""


def compare(
    reference_s: Sequence[float], candidate_s: Sequence[float], min_gain: float
) -> Comparison:
    """Decide on paired rounds: ``reference_s[i]`` and ``candidate_s[i]`` ran in the same round.

    Mean step times in seconds, one per round. Under 6 rounds no 95% interval exists, so the
    decision is ``undecided``.
    """
    n = min(len(reference_s), len(candidate_s))
    ref, cand = list(reference_s[:n]), list(candidate_s[:n])
    interval = stats.paired_ratio_interval(ref, cand)
    ratios = [a / b for a, b in zip(ref, cand, strict=True)]
    decision: Decision = "undecided"
    if interval.clears(1.0 + min_gain):
        decision = "win"
    elif interval.below(1.0 + min_gain):
        decision = "drop"
    return Comparison(interval, decision, len(stats.outlier_rounds(ratios)))


def round_stats(window_steps_s: Sequence[float]) -> StepStats:
    """Median and IQR over windows of their mean step time (seconds)."""
    d = stats.describe(window_steps_s)
    return StepStats(d.median, d.iqr, d.n)


def warmup_overhead_s(warmup_times_s: Sequence[float], steady: StepStats) -> float:
    """Seconds the warm-up steps took beyond steady-state steps (compile time, for compiled runs)."""
    return max(0.0, sum(t - steady.median_s for t in warmup_times_s))


def break_even_steps(compile_s: float, eager: StepStats, compiled: StepStats) -> int | None:
    """Steps after which compiling pays off: compile seconds / seconds saved per step.

    None when the compiled step is not faster than the eager one (compiling never pays).
    """
    saved = eager.median_s - compiled.median_s
    if saved <= 0:
        return None
    return math.ceil(round(compile_s / saved, 6))  # round first: 12 / 0.01 is 1200.0000000002


def drift(first: StepStats, again: StepStats) -> float:
    """Relative change of the same configuration's median between two measurements (0.05 = 5%)."""
    return abs(again.median_s - first.median_s) / first.median_s if first.median_s > 0 else 0.0
