"""Interleaved A/B of two scripts in fresh processes: ``compare --rerun``, on ``ab``'s engine.

Each round runs both sides once, each in a new process (``ab.child`` running
``capture/script_arm.py``: the script under ``check``'s step clock, profiler off, stopped after
``warmup + steps`` steps or run to its end with ``full``), in ``ab.rounds``' order; the decision
is the Wilcoxon signed-rank interval of ``base / new`` per round, for each cost (mean step,
one-time cost, time to the job's length), as ``tune`` and ``fix --prove`` decide.

    from torchdoctor.compare.rerun import RerunOptions, Script, run_interleaved

    result = run_interleaved(Script("train.py"), Script("train_fixed.py"), RerunOptions(rounds=8))
    result.verdict.text          # "NEW is faster: mean step 41.2 -> 30.5 ms (...)"
    result.speedup               # RatioInterval of the headline cost, base / new
    result.ratios("mean_step")   # per-round speed-ups

A ``Runner`` runs one side once (``rerun_process.run_child`` by default, a fake in tests);
``judge`` gives the paired estimates and the verdict (why compare keeps its own: ``ab``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from torchdoctor import stats
from torchdoctor.ab.rounds import run_rounds
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.estimates import Estimate, Quantity, estimates
from torchdoctor.compare.rerun_types import (
    ChildRun,
    RerunOptions,
    RoundOrder,
    RunStatus,
    Script,
    SideName,
    StopReason,
)
from torchdoctor.compare.verdict import Verdict, decide

SIDES: tuple[SideName, SideName] = ("BASE", "NEW")

__all__ = [
    "ChildRun",
    "RerunOptions",
    "RerunResult",
    "RoundOrder",
    "RunStatus",
    "Runner",
    "Script",
    "SideName",
    "StopReason",
    "judge",
    "run_interleaved",
]


@dataclass(frozen=True)
class RerunResult:
    """An interleaved comparison of two scripts."""

    base: Script
    new: Script
    options: RerunOptions
    job_steps: int | None
    """The job length the time-to-N cost is for (the runs' own length with ``full``)."""
    runs: list[ChildRun]
    """Every process, in the order it ran."""
    orders: list[RoundOrder]
    """Per round, which side ran first."""
    estimates: dict[Quantity, Estimate]
    """Per cost, the paired estimate over complete rounds (empty when no round completed)."""
    verdict: Verdict | None
    """None when a side failed before any round completed."""
    stopped: StopReason
    failure: str = ""
    """Which side failed and why (empty when none did)."""
    notes: list[str] = field(default_factory=list)

    @property
    def rounds(self) -> list[tuple[ChildRun, ChildRun]]:
        """(BASE, NEW) of each round where both measured, rounds in order."""
        return _paired(self.runs)

    @property
    def speedup(self) -> stats.RatioInterval | None:
        """The headline cost's speed-up of NEW over BASE (base / new) with its interval."""
        return None if self.verdict is None else self.verdict.headline.speedup

    def ratios(self, quantity: Quantity = "mean_step") -> list[float]:
        """Per-round speed-ups ``base / new`` of one cost (rounds in order)."""
        job = self.job_steps or 0
        get = {
            "mean_step": lambda c: c.mean_ms,
            "median_step": lambda c: c.median_ms,
            "one_time": lambda c: c.one_time_s,
            "time_to_n": lambda c: c.time_to_s(job),
        }[quantity]
        return [get(b.cost) / get(n.cost) for b, n in self.rounds]


class Runner(Protocol):
    """Runs one side once and reports what it measured; never raises for the script's sake."""

    def __call__(
        self, side: SideName, rnd: int, script: Script, options: RerunOptions
    ) -> ChildRun: ...


def run_interleaved(
    base: Script,
    new: Script,
    options: RerunOptions | None = None,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    on_run: Callable[[ChildRun], None] | None = None,
    runner: Runner | None = None,
) -> RerunResult:
    """Run ``base`` and ``new`` alternately in fresh processes and decide on per-round ratios.

    Each round runs both sides once, in ``ab.round_order``; after ``options.min_rounds`` rounds it
    stops as soon as the headline cost's interval decides (excludes 1). ``env`` adds environment
    variables and ``cwd`` sets the folder of every process; ``on_run`` sees each process as it
    ends; ``runner`` replaces the fresh process (default ``rerun_process.run_child``). Never
    raises for a failing script: the result says which side failed and why, and holds the
    rounds completed before it.
    """
    opts = options or RerunOptions()
    if runner is None:
        from torchdoctor.compare.rerun_process import run_child

        runner = functools.partial(run_child, env=env, cwd=cwd)
    scripts = {"BASE": base, "NEW": new}
    started = time.monotonic()
    judged: list[tuple[dict[Quantity, Estimate], Verdict]] = []
    runs: list[ChildRun] = []

    def one(side: SideName, rnd: int) -> ChildRun:
        run = runner(side, rnd, scripts[side], opts)
        runs.append(run)
        if on_run is not None:
            on_run(run)
        return run

    def after(rnd: int, _: object) -> str:
        done = _complete_rounds(runs)
        judged[:] = [judge(done, _full_job_steps(done, opts.job_steps))]
        if rnd + 1 >= opts.min_rounds and judged[0][1].decided:
            return "decided"
        return "time" if opts.max_s is not None and time.monotonic() - started > opts.max_s else ""

    played = run_rounds(SIDES, one, opts.rounds, opts.seed, ok=lambda r: r.ok, after_round=after)
    done = _complete_rounds(runs)
    job = _full_job_steps(done, opts.job_steps)
    result_est, verdict = judged[0] if judged else judge(done, job) if done else ({}, None)
    failed = next((r for r in runs if not r.ok), None)
    failure = f"{failed.side} ({scripts[failed.side].path}) {failed.reason}" if failed else ""
    orders: list[RoundOrder] = [
        "BASE NEW" if order[0] == "BASE" else "NEW BASE" for order in played.orders
    ]
    return RerunResult(
        base, new, opts, job, runs, orders, result_est,
        verdict if done else None, cast(StopReason, played.stopped), failure, _notes(runs, opts),
    )  # fmt: skip


def _paired(runs: list[ChildRun]) -> list[tuple[ChildRun, ChildRun]]:
    by_round: dict[int, dict[SideName, ChildRun]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.side] = r
    return [
        (d["BASE"], d["NEW"])
        for _, d in sorted(by_round.items())
        if "BASE" in d and "NEW" in d and d["BASE"].ok and d["NEW"].ok
    ]


def _complete_rounds(runs: list[ChildRun]) -> list[tuple[RunCost, RunCost]]:
    return [(b.cost, n.cost) for b, n in _paired(runs) if b.cost and n.cost]


def _full_job_steps(done: list[tuple[RunCost, RunCost]], given: int | None) -> int | None:
    """The job length: ``given``, else what the runs that went to their end did (the smaller
    side's, if unequal)."""
    if given:
        return given
    lengths = [c.job_steps for pair in done for c in pair if c.job_steps]
    return min(lengths) if lengths else None


def judge(
    done: list[tuple[RunCost, RunCost]], job: int | None
) -> tuple[dict[Quantity, Estimate], Verdict]:
    """The paired estimates of every cost over complete (BASE, NEW) rounds, and the verdict."""
    est = estimates([b for b, _ in done], [n for _, n in done], paired=True, job_steps=job)
    return est, decide(est, job)


def _notes(runs: list[ChildRun], opts: RerunOptions) -> list[str]:
    """What a reader should know about the window (an epoch longer than it, no step found)."""
    out = []
    for r in runs[:2]:
        loaders = r.detail.get("loaders") or []
        if opts.full or not loaders:
            continue
        d = loaders[0]
        if d.get("dataset_len") and d.get("batch_size"):
            per_epoch = -(-int(d["dataset_len"]) // int(d["batch_size"]))
            if per_epoch > opts.steps:
                out.append(
                    f"{r.side}: an epoch is {per_epoch} steps and the window {opts.steps}: epoch-start "
                    f"costs (DataLoader worker start-up) may fall outside it; --steps "
                    f"{per_epoch} or --full counts them"
                )
    return out
