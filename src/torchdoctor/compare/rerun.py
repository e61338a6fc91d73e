"""Interleaved A/B of two scripts in fresh processes: ``compare --rerun`` and ``fix --prove``.

Each round runs both sides once, each in a new Python process, in a seeded random order that is
reversed in the next round (each side first equally often), so a change in the machine's load
hits both sides of a round alike and a process's position in the round cancels out. Every process runs
its script under ``check``'s step clock with the profiler off (``rerun_child.py``), stops after
``warmup + steps`` steps (or runs to the end with ``full``), and reports its step times, its
start-up and its compile time. The decision is made on per-round ratios: the Wilcoxon
signed-rank interval of ``base / new`` per round, for each cost (mean step, one-time cost, time
to the job's length), exactly as ``tune`` decides between configurations.

    from torchdoctor.compare.rerun import RerunOptions, Script, run_interleaved

    result = run_interleaved(Script("train.py"), Script("train_fixed.py"), RerunOptions(rounds=8))
    result.verdict.text          # "NEW is faster: mean step 41.2 -> 30.5 ms (...)"
    result.speedup               # RatioInterval of the headline cost, base / new
    result.ratios("mean_step")   # per-round speed-ups

The pieces are separate so that another interleaved A/B can reuse them: ``round_order`` (the
balanced order), a ``Runner`` (one fresh process of one side; ``rerun_process.run_child`` by
default, a fake in tests) and ``judge`` (the paired estimates and the verdict).
"""

from __future__ import annotations

import functools
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from torchdoctor import stats
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.stats import Estimate, Quantity, estimates
from torchdoctor.compare.verdict import Verdict, decide

SideName = Literal["BASE", "NEW"]
RoundOrder = Literal["BASE NEW", "NEW BASE"]
"""Which side ran first in a round."""
RunStatus = Literal["stopped", "completed", "exited", "error", "interrupted", "timeout", "crash"]
"""How one process ended: stopped by the clock after its measured steps, completed (the script
ended by itself), exited (a non-zero ``sys.exit``), error (an exception), interrupted, timeout
(killed after ``timeout_s``), crash (no result: killed by a signal, or died in the interpreter)."""
StopReason = Literal["decided", "rounds", "time", "failed"]
"""Why the rounds stopped: the interval decided, ``rounds`` ran, ``max_s`` passed, a side failed."""
MIN_ROUNDS = 6
"""The fewest rounds with a 95% signed-rank interval (2/64 = 3% < 5%)."""


@dataclass(frozen=True)
class RerunOptions:
    """How an interleaved rerun measures (``compare --rerun``'s flags)."""

    rounds: int = 8
    """The most rounds (each: one fresh process of each side)."""
    warmup: int = 5
    """Steps per process before the steady window; their excess over steady steps, with the
    process's start-up and exit, is the one-time cost."""
    steps: int = 20
    """Steady-state steps per process after the warm-up (ignored with ``full``)."""
    full: bool = False
    """Let each process run to the script's end: every step after the warm-up counts, and the
    job's length is the runs' own."""
    job_steps: int | None = None
    """The job's length for the time-to-N cost (None: unknown, unless ``full``)."""
    min_rounds: int = MIN_ROUNDS
    """Stop as soon as the headline interval decides once this many rounds are in (more than
    ``rounds``: never stop early, as a noise measurement wants)."""
    seed: int = 0
    """Seed of the order's draw (the same seed, the same orders)."""
    timeout_s: float = 900.0
    """The most seconds one process may run before its process group is killed."""
    max_s: float | None = None
    """Start no new round after this many seconds (None: no limit)."""

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.steps < 1 or self.min_rounds < 1:
            raise ValueError("rounds, steps and min_rounds must be >= 1")
        if self.warmup < 0:
            raise ValueError("warmup must be >= 0")
        if self.job_steps is not None and self.job_steps < 1:
            raise ValueError("job_steps must be >= 1 (or None)")
        if self.timeout_s <= 0 or (self.max_s is not None and self.max_s <= 0):
            raise ValueError("timeout_s and max_s must be > 0")


@dataclass(frozen=True)
class Script:
    """One side: a Python script and its arguments."""

    path: str
    args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not os.path.isfile(self.path):
            from torchdoctor.errors import UserError

            raise UserError(f"{self.path}: no such script")


@dataclass(frozen=True)
class ChildRun:
    """One fresh process of one side."""

    side: SideName
    round: int
    """0-based round number."""
    status: RunStatus
    code: int
    """The script's exit status (-1 when the process died without a result)."""
    reason: str
    """Why it failed, in one line (empty when it did not)."""
    wall_s: float
    """From the process's start to its end, as the parent saw it."""
    cost: RunCost | None
    """What it measured (None when it failed before its measured steps ended)."""
    detail: dict[str, Any] = field(default_factory=dict)
    """The child's raw record (step source, compiles, loaders...)."""

    @property
    def ok(self) -> bool:
        """It measured what was asked."""
        return self.cost is not None


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
        return [get(b.cost) / get(n.cost) for b, n in self.rounds]  # type: ignore[union-attr]


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

    Each round runs both sides once, in ``round_order``; after ``options.min_rounds`` rounds it
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
    shuffle = random.Random(opts.seed)
    runs: list[ChildRun] = []
    orders: list[RoundOrder] = []
    started = time.monotonic()
    stopped: StopReason = "rounds"
    failure = ""
    job = opts.job_steps
    result_est: dict[Quantity, Estimate] = {}
    verdict: Verdict | None = None
    for rnd in range(opts.rounds):
        order = round_order(rnd, shuffle, orders[-1] if orders else None)
        orders.append("BASE NEW" if order[0] == "BASE" else "NEW BASE")
        for name in order:
            script = base if name == "BASE" else new
            run = runner(name, rnd, script, opts)
            runs.append(run)
            if on_run is not None:
                on_run(run)
            if not run.ok:
                failure = f"{name} ({script.path}) {run.reason}"
                break
        if failure:
            stopped = "failed"
            break
        done = _complete_rounds(runs)
        job = _full_job_steps(done, opts.job_steps)
        result_est, verdict = judge(done, job)
        if rnd + 1 >= opts.min_rounds and verdict.decided:
            stopped = "decided"
            break
        if opts.max_s is not None and time.monotonic() - started > opts.max_s:
            stopped = "time"
            break
    done = _complete_rounds(runs)
    if done and not result_est:
        result_est, verdict = judge(done, job)
    return RerunResult(
        base, new, opts, job, runs, orders, result_est,
        verdict if done else None, stopped, failure, _notes(runs, opts),
    )  # fmt: skip


def round_order(
    rnd: int, rng: random.Random, previous: RoundOrder | None
) -> tuple[SideName, SideName]:
    """Round ``rnd``'s order: drawn from ``rng`` for an even round, the reverse of the round
    before (``previous``) for an odd one. Each side runs first equally often, so whatever a
    process's position costs (the one after another process, a cache) cancels; a plain shuffle
    per round can put the same side first 7 rounds in 8."""
    order: list[SideName] = ["BASE", "NEW"]
    if rnd % 2 == 0:
        rng.shuffle(order)
    elif previous == "BASE NEW":
        order.reverse()
    return order[0], order[1]


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
