"""The statistics behind ``compare``: how much a comparison can know, and the estimate of each
cost with its interval (the arithmetic itself lives in the shared ``torchdoctor.stats``).

Three kinds of evidence, weakest first:

* **one run a side.** The steps of one run share that run's machine load: a second run made a
  minute later can be 2x slower on a shared machine, and the steps' spread cannot show it. A rank
  test on those steps (what ``compare`` once did) calls such drift "beyond the noise", so here no
  test is made: the step-level interval is widened by a run-to-run allowance
  (:data:`RUN_TO_RUN_PCT`, ``--run-noise``) and the verdict says "looks", never "is".
* **several runs a side.** One value per run (its mean step, its one-time cost...), compared with
  the Mann-Whitney U test and its Hodges-Lehmann interval on runs, not steps. Runs made one after
  another still share slow drift; interleave them (A B A B) when you make them.
* **interleaved rounds** (``compare --rerun``): each round runs both sides in fresh processes, in
  shuffled order, so a load change hits both alike; the decision is the Wilcoxon signed-rank
  interval of the per-round ratios, from ``torchdoctor.ab`` as ``tune`` and ``fix --prove``
  decide.

Every interval here is of the *speed-up* ``base / new`` of a cost (above 1: NEW costs less).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

import numpy as np

from torchdoctor import ab, stats
from torchdoctor.compare.cost import RunCost

EvidenceKind = Literal["one run a side", "runs", "interleaved"]
Quantity = Literal["mean_step", "median_step", "one_time", "time_to_n"]

ALPHA = 0.05
"""Significance level: intervals are 95%, tests decide at p < ALPHA."""
RUN_TO_RUN_PCT = 100.0
"""Default run-to-run allowance, in percent: two runs of the same code, made one after the other
on a shared machine, differ in mean step by up to this much (95% of pairs). Measured with
``benchmarks/compare_run_noise.py`` on a 2-core machine shared with other jobs: see
docs/compare.md. A quiet, dedicated GPU machine varies far less; ``--run-noise`` sets yours."""
MIN_RUNS_FOR_INTERVAL = 4
"""The fewest runs a side (equal counts) with a 95% rank interval: with 3 and 3 the smallest
two-sided Mann-Whitney p-value is 2/20 = 0.1, so 3 runs a side can never decide."""
BOOTSTRAP_ROUNDS = 4000
BOOTSTRAP_SEED = 20261201
"""Fixed, so a rerun of ``compare`` on the same files prints the same interval."""

UNITS: dict[Quantity, str] = {
    "mean_step": "ms",
    "median_step": "ms",
    "one_time": "s",
    "time_to_n": "s",
}
LABELS: dict[Quantity, str] = {
    "mean_step": "mean step",
    "median_step": "median step",
    "one_time": "one-time cost",
    "time_to_n": "time to N steps",
}


@dataclass(frozen=True)
class Estimate:
    """One cost on both sides, and the speed-up's interval."""

    quantity: Quantity
    base: float
    """BASE's value (its median over runs or rounds), in :attr:`unit`."""
    new: float
    """NEW's value, in :attr:`unit`. With several runs or rounds: BASE's median divided by the
    speed-up, so the two columns and the ratio always agree (the medians of each side's runs
    can come from different moments and disagree with the paired or pairwise ratio)."""
    unit: str
    speedup: stats.RatioInterval
    """``base / new`` (above 1: NEW costs less), at 95%; for one run a side, widened by the
    run-to-run allowance."""
    evidence: EvidenceKind
    test: str
    """What decided, in words (or why nothing could)."""
    n_base: int
    """Runs, rounds or steps behind BASE's value."""
    n_new: int
    p_value: float | None = None
    """Two-sided p-value of the test on runs (None for the other kinds)."""

    @property
    def has_interval(self) -> bool:
        """Whether a 95% interval exists (too few runs or rounds give none)."""
        return ab.has_interval(self.speedup)

    @property
    def decided(self) -> bool:
        """True when evidence that can support it puts the whole interval on one side of 1."""
        return self.evidence != "one run a side" and ab.decision(self.speedup, 0.0) != "undecided"

    @property
    def change_pct(self) -> float:
        """Percent change of the cost (positive: NEW costs more)."""
        return (1.0 / self.speedup.ratio - 1.0) * 100.0

    @property
    def label(self) -> str:
        """The quantity in words."""
        return LABELS[self.quantity]


def run_to_run_log_sd(pct: float) -> float:
    """The allowance ``pct`` (95% of two runs' ratios within 1 +/- pct/100) as a log-scale SD."""
    z = NormalDist().inv_cdf(1.0 - ALPHA / 2.0)
    return math.log1p(pct / 100.0) / z


def _values(runs: Sequence[RunCost], q: Quantity, job_steps: int | None) -> np.ndarray:
    get: dict[Quantity, Callable[[RunCost], float]] = {
        "mean_step": lambda r: r.mean_ms,
        "median_step": lambda r: r.median_ms,
        "one_time": lambda r: r.one_time_s,
        "time_to_n": lambda r: r.time_to_s(job_steps or 0),
    }
    return np.array([get[q](r) for r in runs], dtype=np.float64)


def _per_sample(base: Sequence[RunCost], new: Sequence[RunCost]) -> bool:
    """Steps compare per sample when both sides know their batch and the batches differ."""
    b, n = base[0].samples_per_step, new[0].samples_per_step
    return bool(b and n and b != n)


def kind_of(base: Sequence[RunCost], new: Sequence[RunCost], paired: bool) -> EvidenceKind:
    """What the runs can support: interleaved rounds, several runs, or one run a side."""
    if paired:
        return "interleaved"
    return "one run a side" if len(base) == 1 and len(new) == 1 else "runs"


def estimates(
    base: Sequence[RunCost],
    new: Sequence[RunCost],
    *,
    paired: bool = False,
    job_steps: int | None = None,
    run_noise_pct: float = RUN_TO_RUN_PCT,
) -> dict[Quantity, Estimate]:
    """Each cost's estimate: mean and median step always, the one-time cost when both sides
    recorded one, the time to ``job_steps`` steps when that length is known.

    ``paired``: ``base[i]`` and ``new[i]`` ran in the same round (``compare --rerun``).
    """
    if not base or not new:
        raise ValueError("each side needs at least one run")
    if paired and len(base) != len(new):
        raise ValueError(f"paired rounds differ in length ({len(base)} vs {len(new)})")
    kind = kind_of(base, new, paired)
    quantities: list[Quantity] = ["mean_step", "median_step"]
    if all(r.has_one_time for r in [*base, *new]):
        quantities.append("one_time")
        if job_steps:
            quantities.append("time_to_n")
    scale = 1.0
    if _per_sample(base, new):  # ms per sample: a bigger batch may take a longer step
        scale = float(new[0].samples_per_step or 1) / float(base[0].samples_per_step or 1)
    out: dict[Quantity, Estimate] = {}
    for q in quantities:
        if kind == "one run a side":
            est = _single(base[0], new[0], q, job_steps, run_noise_pct)
        else:
            b, n = _values(base, q, job_steps), _values(new, q, job_steps)
            est = _paired(b, n, q) if kind == "interleaved" else _runs(b, n, q)
        if q in ("mean_step", "median_step") and scale != 1.0:
            est = _rescale(est, scale, base[0], new[0])
        out[q] = est
    return out


def _rescale(est: Estimate, scale: float, base: RunCost, new: RunCost) -> Estimate:
    """A step estimate as time per sample (the two sides' batches differ)."""
    from dataclasses import replace

    s = est.speedup
    return replace(
        est,
        base=est.base / float(base.samples_per_step or 1),
        new=est.new / float(new.samples_per_step or 1),
        unit="ms/sample",
        speedup=stats.RatioInterval(
            s.ratio * scale, s.low * scale, s.high * scale, s.confidence, s.n, s.method
        ),
    )


def _single(
    base: RunCost, new: RunCost, q: Quantity, job_steps: int | None, run_noise_pct: float
) -> Estimate:
    """One run a side: the step-level interval widened by the run-to-run allowance; no test."""
    extra = run_to_run_log_sd(run_noise_pct)
    test = (
        f"none: one run a side (a step-level interval widened by a +/-{run_noise_pct:g}% "
        "run-to-run allowance)"
    )
    if q in ("mean_step", "median_step"):
        b, n = base.step_ms, new.step_ms
        if q == "mean_step":
            iv = stats.mean_ratio_interval(b, n, resamples=BOOTSTRAP_ROUNDS, seed=BOOTSTRAP_SEED)
            bv, nv = base.mean_ms, new.mean_ms
        else:
            iv = stats.independent_ratio_interval(
                b, n, method="bootstrap", resamples=BOOTSTRAP_ROUNDS, seed=BOOTSTRAP_SEED
            )
            bv, nv = base.median_ms, new.median_ms
        return Estimate(q, bv, nv, UNITS[q], stats.widened(iv, extra), "one run a side", test,
                        len(b), len(n))  # fmt: skip
    bv = float(_values([base], q, job_steps)[0])
    nv = float(_values([new], q, job_steps)[0])
    test = "none: one value a side"
    point = stats.RatioInterval(bv / nv, 0.0, math.inf, 0.0, 1, "rank")  # no interval
    return Estimate(q, bv, nv, UNITS[q], point, "one run a side", test, 1, 1)


def _runs(b: np.ndarray, n: np.ndarray, q: Quantity) -> Estimate:
    """Several runs a side: Mann-Whitney U on the runs' values, Hodges-Lehmann interval."""
    iv = stats.independent_ratio_interval(b, n)
    p = stats.mann_whitney(b, n).p_value if len(b) > 1 or len(n) > 1 else 1.0
    test = f"Mann-Whitney U on {len(b)} and {len(n)} runs"
    if not ab.has_interval(iv):
        test += f" (too few runs for a 95% interval: {MIN_RUNS_FOR_INTERVAL} a side give one)"
    base = float(np.median(b))
    return Estimate(
        q, base, base / iv.ratio, UNITS[q], iv, "runs", test, len(b), len(n), float(p)
    )  # fmt: skip


def _paired(b: np.ndarray, n: np.ndarray, q: Quantity) -> Estimate:
    """Interleaved rounds: Wilcoxon signed-rank interval of the per-round ratios base / new."""
    iv = ab.interval(b, n)
    test = f"Wilcoxon signed-rank on {len(b)} per-round ratios"
    if not ab.has_interval(iv):
        test += f" ({ab.FEWEST_ROUNDS} rounds give a 95% interval)"
    base = float(np.median(b))
    return Estimate(
        q, base, base / iv.ratio, UNITS[q], iv, "interleaved", test, len(b), len(n)
    )  # fmt: skip
