"""Step-time statistics: median and spread, interleaved comparisons, compile break-even.

Follows ``torch.utils.benchmark``: keep the raw times, report median and interquartile range (IQR),
never the mean (one descheduled step on a shared machine moves a mean, not a median). Two
configurations are compared only on rounds measured side by side (see ``rounds.py``), through
the per-round ratio's interval from :mod:`torchdoctor.stats`.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from torchdoctor import stats

# A median over n samples has standard error ~ 1.2533 * sigma / sqrt(n) (normal samples), and
# sigma ~ IQR / 1.349; together ~0.93 * IQR / sqrt(n).
_SE_PER_IQR = 1.2533 / 1.349

MIN_GAIN = 0.02
"""Default smallest relative speed-up that counts: below ~2% the same configuration measured in two
processes on a shared machine differs by as much (the baseline is measured twice to check)."""


@dataclass(frozen=True)
class StepStats:
    """Steady-state step times of one trial (warm-up excluded)."""

    median_s: float
    """Median over blocks of the mean step time, in seconds."""
    iqr_s: float
    """Interquartile range (75th - 25th percentile; full range under 4 blocks) of the blocks'
    mean step times, in seconds."""
    n: int
    """Blocks of steps the median is taken over."""

    @property
    def rel_spread(self) -> float:
        """IQR as a fraction of the median (0.1 = 10%)."""
        return self.iqr_s / self.median_s if self.median_s > 0 else math.inf

    @property
    def se_s(self) -> float:
        """Approximate standard error of the median, in seconds."""
        return _SE_PER_IQR * self.iqr_s / math.sqrt(max(self.n, 1))


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


def default_blocks(steps: int) -> int:
    """Blocks for ``steps`` measured steps: 5 from 20 steps on (4+ steps each), else 3."""
    return 5 if steps >= 20 else 3


def block_means(
    step_times_s: Sequence[float], blocks: int | None = None, *, period: int | None = None
) -> list[float]:
    """Mean step time (seconds) of consecutive runs of steps.

    Without ``period``: ``blocks`` near-equal runs. With ``period`` (steps per epoch, when an
    epoch is at most half the window): runs of a whole number of periods, so every block holds the
    same number of epoch starts (worker start-up when workers are not persistent).
    """
    n = len(step_times_s)
    if period and 0 < period <= n // 2:
        length = period * math.ceil(n / (blocks or default_blocks(n)) / period)
        edges = list(range(0, n - length + 1, length))
        return [statistics.fmean(step_times_s[a : a + length]) for a in edges]
    k = max(1, min(blocks or default_blocks(n), n // 2))
    cuts = [round(i * n / k) for i in range(k + 1)]
    return [statistics.fmean(step_times_s[a:b]) for a, b in itertools.pairwise(cuts)]


def step_stats(
    step_times_s: Sequence[float], blocks: int | None = None, *, period: int | None = None
) -> StepStats:
    """Median and IQR, over consecutive blocks of steps, of the mean step time (seconds).

    Why blocks and not single steps: with DataLoader workers, batches arrive in bursts (each worker
    finishes a batch at about the same time), so most steps find data waiting and one step in
    ``num_workers`` waits for all of them; the median single step then shows the compute alone
    (1.4 ms where throughput says 8 ms). Likewise one step per epoch pays the workers' start-up. A
    block's mean covers whole bursts (and, with ``period``, whole epochs), and the median over
    blocks still discards a block that another process disturbed.
    """
    if not step_times_s:
        raise ValueError("no step times")
    xs = sorted(block_means(step_times_s, blocks, period=period))
    if len(xs) < 4:
        return StepStats(statistics.median(xs), xs[-1] - xs[0], len(xs))
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return StepStats(statistics.median(xs), q3 - q1, len(xs))


def noise_threshold_s(a: StepStats, b: StepStats, *, min_gain: float = MIN_GAIN) -> float:
    """The smallest difference of medians, in seconds, that counts as real between ``a`` and ``b``.

    The larger of ``min_gain`` times ``b``'s median and two standard errors of the difference.
    """
    return max(min_gain * b.median_s, 2.0 * math.hypot(a.se_s, b.se_s))


def beats(a: StepStats, b: StepStats, *, min_gain: float = MIN_GAIN) -> bool:
    """True when ``a`` is faster than ``b`` by more than the noise (see :func:`noise_threshold_s`)."""
    return b.median_s - a.median_s > noise_threshold_s(a, b, min_gain=min_gain)


def speedup(baseline: StepStats, other: StepStats) -> float:
    """Baseline median / other median (2.0 = twice as fast as the baseline)."""
    return baseline.median_s / other.median_s if other.median_s > 0 else math.inf


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
