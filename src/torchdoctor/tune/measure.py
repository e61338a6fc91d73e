"""Step-time statistics of tune's trials: median and spread, warm-up overhead, drift.

Follows ``torch.utils.benchmark``: keep the raw times, report median and interquartile range (IQR),
never the mean (one descheduled step on a shared machine moves a mean, not a median). Two
configurations are compared only on rounds measured side by side (see ``rounds.py``), by
:func:`torchdoctor.ab.compare`, as ``compare --rerun`` and ``fix --prove`` compare theirs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from torchdoctor import stats


@dataclass(frozen=True)
class ArmStepStats:
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


def round_stats(window_steps_s: Sequence[float]) -> ArmStepStats:
    """Median and IQR over windows of their mean step time (seconds)."""
    d = stats.describe(window_steps_s)
    return ArmStepStats(d.median, d.iqr, d.n)


def warmup_overhead_s(warmup_times_s: Sequence[float], steady: ArmStepStats) -> float:
    """Seconds the warm-up steps took beyond steady-state steps (compile time, for compiled runs)."""
    return max(0.0, sum(t - steady.median_s for t in warmup_times_s))


def drift(first: ArmStepStats, again: ArmStepStats) -> float:
    """Relative change of the same configuration's median between two measurements (0.05 = 5%)."""
    return abs(again.median_s - first.median_s) / first.median_s if first.median_s > 0 else 0.0
