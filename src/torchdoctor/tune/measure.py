"""Step-time statistics of tune's trials: median and spread, warm-up overhead, drift.

Follows ``torch.utils.benchmark``: keep the raw times, report median and interquartile range (IQR),
never the mean (one descheduled step on a shared machine moves a mean, not a median). Two
configurations are compared only on rounds measured side by side (see ``rounds.py``), by
:func:`torchdoctor.ab.compare`, as ``compare --rerun`` and ``fix --prove`` compare theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchdoctor import stats


def warmup_overhead_s(warmup_times_s: Sequence[float], steady: stats.Spread) -> float:
    """Seconds the warm-up steps took beyond steady-state steps (compile time, for compiled runs)."""
    return max(0.0, sum(t - steady.median for t in warmup_times_s))


def drift(first: stats.Spread, again: stats.Spread) -> float:
    """Relative change of the same configuration's median between two measurements (0.05 = 5%)."""
    return abs(again.median - first.median) / first.median if first.median > 0 else 0.0
