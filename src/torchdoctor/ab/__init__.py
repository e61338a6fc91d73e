"""The A/B engine: variants (arms) in interleaved rounds, often each in a fresh process, and the
decision. ``compare --rerun``, ``fix --prove`` and ``tune`` run every arm once per round, in an
order that changes per round, so a change in the machine's load falls on all arms alike.

- ``ab.child``: an ``Arm`` (name, command, spec, environment, folder) run once in a fresh
  process: its own session, a timeout, its group killed at its end, on timeout and on Ctrl-C;
  spec and result are JSON files. The child's body is the caller's: ``capture/script_arm.py``
  (the user's script under check's step clock) for compare and fix, ``tune/worker.py`` for tune.
- ``ab.rounds``: the round loop. Tune runs it *inside* one trial process (an arm is a
  configuration's training loop, a round one timed window): its arms are models trained side by
  side from one seed, which a process per window would rebuild and recompile every round; the
  trial itself is one ``ab.child`` process, for isolation (out of memory, a crash, a hang).

The decision is this module's, on the same numbers for all three:

- :func:`ratios`: the per-round ratio ``reference[i] / candidate[i]`` (above 1: the candidate is
  faster).
- :func:`interval`: the 95% interval of the typical per-round ratio: the Hodges-Lehmann estimate
  with the Wilcoxon signed-rank interval (``stats.paired_ratio_interval``, method ``"rank"``).
- :func:`decision`: ``win`` when the whole interval clears ``1 + min_gain``, ``drop`` when the
  whole interval lies below it, else ``undecided`` (more rounds needed). With ``min_gain`` 0 it
  is the two-sided question "faster or slower at all?" that ``compare`` asks.
- :data:`FEWEST_ROUNDS` and :func:`has_interval`: under 6 rounds no 95% interval exists (the
  interval is (0, inf)), so nothing can be decided: too few rounds, not a loss.
- :func:`round_order`: which arm runs when: a shuffled order on even rounds, the reverse of
  the round before on odd ones.
- :func:`compare`: all of the above for one candidate against its reference, with the rounds
  beyond Tukey's far-out fences counted (a burst of load on one arm).
- :func:`break_even_steps`: the step count where paying a one-time cost for a per-step saving
  draws level (compile time against a faster step, one side's start-up against the other's).

Why the rank interval, and only it, for rounds: it is exact and distribution-free with as few as
6 rounds, and a few disturbed rounds move it little. ``compare`` keeps two other methods in
``compare/estimates.py`` on purpose, for evidence that is not interleaved rounds: a percentile
bootstrap over the steps of one run a side (no rounds exist; the interval is then widened by the
run-to-run allowance) and the Mann-Whitney interval over unpaired runs. No other engine has
such evidence.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, overload

import numpy as np

from torchdoctor import stats

MIN_GAIN = 0.02
"""Default smallest relative speed-up that counts: a win needs its whole interval above 1.02
(below ~2%, a gain rarely pays for a change)."""
CONFIDENCE = 0.95
"""Every interval of rounds is a 95% interval."""

T = TypeVar("T")
Decision = Literal["win", "drop", "undecided"]
Times = Sequence[float] | np.ndarray
"""One time per round of one arm."""


def round_order(
    arms: Sequence[T], rnd: int, rng: random.Random, previous: Sequence[T] = ()
) -> list[T]:
    """The order of round ``rnd`` (0-based): drawn from ``rng`` on an even round, the reverse of
    the round before (``previous``) on an odd one (an arm missing from it, last).

    Over each pair of rounds every arm runs in mirrored positions, so whatever a position costs
    (the process after another, a warm cache, the machine's drift within a round) cancels; with
    two arms each runs first equally often, where a fresh shuffle per round can put the same
    arm first 7 rounds in 8."""
    if rnd % 2 == 0 or not previous:
        order = list(arms)
        rng.shuffle(order)
        return order
    return [a for a in reversed(previous) if a in arms] + [a for a in arms if a not in previous]


def ratios(reference: Times, candidate: Times) -> list[float]:
    """Per-round ratios ``reference[i] / candidate[i]`` over the rounds both have (unitless;
    above 1: the candidate took less)."""
    n = min(len(reference), len(candidate))
    return [a / b for a, b in zip(reference[:n], candidate[:n], strict=True)]


def interval(reference: Times, candidate: Times) -> stats.RatioInterval:
    """The typical per-round ratio ``reference / candidate`` and its 95% signed-rank interval,
    over the rounds both have. Under :data:`FEWEST_ROUNDS` rounds the interval is (0, inf)."""
    n = min(len(reference), len(candidate))
    return stats.paired_ratio_interval(reference[:n], candidate[:n], confidence=CONFIDENCE)


def has_interval(iv: stats.RatioInterval) -> bool:
    """Whether the rounds gave an interval at all (too few give (0, inf))."""
    return iv.low > 0 and math.isfinite(iv.high)


FEWEST_ROUNDS = 6
"""The fewest rounds with a 95% signed-rank interval: 6 (the smallest two-sided p-value of n
rounds is 2 / 2**n, and 2/64 = 3% is the first under 5%)."""


def decision(iv: stats.RatioInterval, min_gain: float) -> Decision:
    """``win``: the whole interval lies above ``1 + min_gain``; ``drop``: the whole interval lies
    below it (the candidate cannot reach the gain); ``undecided``: it straddles it, or there is no
    interval (too few rounds)."""
    bar = 1.0 + min_gain
    if iv.clears(bar):
        return "win"
    if iv.below(bar):
        return "drop"
    return "undecided"


@dataclass(frozen=True)
class Comparison:
    """A candidate against a reference on interleaved rounds."""

    interval: stats.RatioInterval
    """Reference time / candidate time per round (above 1: the candidate is faster)."""
    decision: Decision
    """See :func:`decision`."""
    outliers: int = 0
    """Rounds whose ratio lies beyond Tukey's far-out fences (a burst of load on one arm)."""


def compare(reference: Times, candidate: Times, min_gain: float = MIN_GAIN) -> Comparison:
    """Decide on paired rounds: ``reference[i]`` and ``candidate[i]`` ran in the same round.

    One time per round and arm (any unit, the same for both: a window's mean step, a process's
    mean step). Under :data:`FEWEST_ROUNDS` rounds the decision is ``undecided``.
    """
    iv = interval(reference, candidate)
    return Comparison(
        iv, decision(iv, min_gain), len(stats.outlier_rounds(ratios(reference, candidate)))
    )


@overload
def break_even_steps(
    extra_once: float, saved_per_step: float, *, whole: Literal[False] = False
) -> float | None: ...
@overload
def break_even_steps(
    extra_once: float, saved_per_step: float, *, whole: Literal[True]
) -> int | None: ...
def break_even_steps(
    extra_once: float, saved_per_step: float, *, whole: bool = False
) -> float | None:
    """Steps after which a variant that costs ``extra_once`` more once and ``saved_per_step`` less
    each step (both in one time unit; negative: it costs less once, more per step) draws level
    with the other: ``extra_once / saved_per_step``.

    0 when the variant is ahead from the start (no more once, no more per step, a saving
    somewhere); None when it is never ahead (no saving per step for a cost once, or level on
    both). ``whole``: rounded up to a whole step count (an ``int``).
    """
    if saved_per_step == 0 or extra_once == 0 or (extra_once > 0) != (saved_per_step > 0):
        ahead = extra_once <= 0 and saved_per_step >= 0 and (extra_once, saved_per_step) != (0, 0)
        if not ahead:
            return None
        return 0 if whole else 0.0
    steps = extra_once / saved_per_step
    return math.ceil(round(steps, 6)) if whole else steps  # round first: 12/0.01 is 1200.0000000002
