"""What one run costs the user: its steady-state steps and the one-time costs before them.

A job of ``N`` steps takes ``T(N) = one_time_s + N * mean_s``: the steady-state mean step (not the
median: a stall every tenth step costs a tenth of a stall per step) times the steps, plus what the
first steps cost beyond steady-state steps (compile, the first batches, DataLoader worker
start-up, and in a rerun the process start-up). Two sides whose one-time costs and steady steps
move in opposite directions cross at the *break-even* step count (``torchdoctor.ab``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LONG_STEP_X = 3.0
"""A steady-state step over 3x the median is a *long step*: an epoch start's worker start-up, a
stall, a recompile; what the mean counts and the median hides."""
MIN_ONE_TIME_S = 1e-3
"""One-time costs are floored here before a ratio is taken: a warm-up as fast as the steady steps
(within noise) has no one-time cost, and a ratio of two zeros means nothing."""


@dataclass(frozen=True)
class RunCost:
    """One run's costs. Step times in milliseconds, other times in seconds."""

    step_ms: np.ndarray
    """Steady-state step times (after the warm-up)."""
    warmup_ms: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """The warm-up steps' times (empty when the side does not record them, e.g. a trace)."""
    startup_s: float = 0.0
    """Time before the first step began that the run measured (a rerun: process start-up)."""
    exit_s: float = 0.0
    """Time from the script's end to the process's exit that the run measured (a rerun: the
    interpreter's shutdown, seconds with torch loaded on a busy machine); 0 when not measured."""
    compile_s: float | None = None
    """torch.compile's compile time, when known (part of the one-time cost, not on top of it)."""
    job_steps: int | None = None
    """Steps of the whole run when it ran to its end (its own length), else None."""
    window_mean_ms: float | None = None
    """Steady-state mean step measured over the whole window with a device synchronisation at
    both ends (a rerun); None: the mean of ``step_ms``."""
    samples_per_step: float | None = None
    """Samples per optimizer step (the DataLoader's batch size), when known."""
    job_s: float | None = None
    """The whole run's measured time, start to exit, when it ran to its end (a ``--full``
    rerun); the time to ``job_steps`` steps is then this, not the model below."""

    @property
    def mean_ms(self) -> float:
        """Mean steady-state step: what a step costs on average, rare long steps included."""
        if self.window_mean_ms is not None:
            return self.window_mean_ms
        return float(np.mean(self.step_ms))

    @property
    def median_ms(self) -> float:
        """Median steady-state step: the typical step."""
        return float(np.median(self.step_ms))

    @property
    def long_steps(self) -> tuple[int, float]:
        """Steps over ``LONG_STEP_X`` x the median, and their share of the window's time."""
        xs = np.asarray(self.step_ms, dtype=np.float64)
        if not len(xs) or float(np.sum(xs)) <= 0:
            return 0, 0.0
        long = xs[xs > LONG_STEP_X * float(np.median(xs))]
        return len(long), float(np.sum(long) / np.sum(xs))

    @property
    def has_one_time(self) -> bool:
        """Whether this run recorded anything before its steady steps."""
        return len(self.warmup_ms) > 0 or self.startup_s > 0 or self.exit_s > 0

    @property
    def one_time_s(self) -> float:
        """Start-up and exit plus what the warm-up steps took beyond as many steady steps (s)."""
        warm = float(np.sum(self.warmup_ms)) - len(self.warmup_ms) * self.mean_ms
        return max(MIN_ONE_TIME_S, self.startup_s + self.exit_s + warm / 1000.0)

    def time_to_s(self, steps: int) -> float:
        """Seconds to run ``steps`` steps from the start (warm-up included): one-time + N x mean,
        or the measured whole run when ``steps`` is its own length."""
        if self.job_s is not None and steps == self.job_steps:
            return self.job_s
        return self.one_time_s + steps * self.mean_ms / 1000.0
