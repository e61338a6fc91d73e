"""Interleaved A/B of two scripts in fresh processes: ``compare --rerun`` and ``fix --prove``.

Each round runs both sides once, each in a new Python process, in a seeded random order that is
reversed in the next round (each side first equally often), so a change in the machine's load
hits both sides of a round alike and a process's position in the round cancels out. Every process runs
its script under ``check``'s step clock with the profiler off (``rerun_child.py``), stops after
``warmup + steps`` steps (or runs to the end with ``full``), and reports its step times, its
start-up and its compile time. The decision is made on per-round ratios: the Wilcoxon
signed-rank interval of ``base / new`` per round, for each cost (mean step, one-time cost, time
to the job's length), exactly as ``tune`` decides between configurations.

    from torchdoctor.compare.rerun import Script, run_interleaved

    result = run_interleaved(Script("train.py"), Script("train_fixed.py"), rounds=8)
    result.verdict.text          # "NEW is faster: mean step 41.2 -> 30.5 ms (...)"
    result.speedup               # RatioInterval of the headline cost, base / new
    result.ratios("mean_step")   # per-round speed-ups
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from torchdoctor import stats
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.stats import Estimate, Quantity, estimates
from torchdoctor.compare.verdict import Verdict, decide

SideName = Literal["BASE", "NEW"]
MIN_ROUNDS = 6
"""The fewest rounds with a 95% signed-rank interval (2/64 = 3% < 5%)."""
StopReason = Literal["decided", "rounds", "time", "failed"]


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
    status: str
    """stopped (after the measured steps), completed, exited, error, timeout, crash."""
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
    warmup: int
    steps: int
    full: bool
    job_steps: int | None
    """The job length the time-to-N cost is for (the runs' own length with ``full``)."""
    runs: list[ChildRun]
    """Every process, in the order it ran."""
    orders: list[str]
    """Per round, which side ran first ("BASE NEW" or "NEW BASE")."""
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
        """(BASE, NEW) of each round where both measured."""
        by_round: dict[int, dict[str, ChildRun]] = {}
        for r in self.runs:
            by_round.setdefault(r.round, {})[r.side] = r
        return [
            (d["BASE"], d["NEW"])
            for _, d in sorted(by_round.items())
            if "BASE" in d and "NEW" in d and d["BASE"].ok and d["NEW"].ok
        ]

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


def run_interleaved(
    base: Script,
    new: Script,
    rounds: int = 8,
    warmup: int = 5,
    steps: int = 20,
    *,
    full: bool = False,
    job_steps: int | None = None,
    min_rounds: int = MIN_ROUNDS,
    seed: int = 0,
    timeout_s: float = 900.0,
    max_s: float | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    on_run: Callable[[ChildRun], None] | None = None,
) -> RerunResult:
    """Run ``base`` and ``new`` alternately in fresh processes and decide on per-round ratios.

    ``rounds`` is the most rounds; after ``min_rounds`` it stops as soon as the headline cost's
    interval decides (excludes 1). ``warmup`` steps absorb compile and start-up; ``steps`` steps
    after them are the steady window (``full``: the script runs to its end and every step after
    the warm-up counts; the job length is then the runs' own). ``job_steps`` sets the job length
    for the time-to-N cost. ``timeout_s`` bounds one process; ``max_s`` stops starting rounds
    after that many seconds. ``env`` adds environment variables; ``on_run`` sees each process as
    it ends. Never raises for a failing script: the result says which side failed and why.
    """
    if rounds < 1 or warmup < 0 or steps < 1:
        raise ValueError("rounds and steps must be >= 1, warmup >= 0")
    shuffle = random.Random(seed)
    runs: list[ChildRun] = []
    orders: list[str] = []
    started = time.monotonic()
    stopped: StopReason = "rounds"
    failure = ""
    job = job_steps
    result_est: dict[Quantity, Estimate] = {}
    verdict: Verdict | None = None
    for rnd in range(rounds):
        order = _order(rnd, shuffle, base, new, orders)
        orders.append(" ".join(name for name, _ in order))
        for name, script in order:
            run = _with_job(_run_one(name, rnd, script, warmup, steps, full, timeout_s, env, cwd))
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
        job = _full_job_steps(done, job_steps)
        result_est, verdict = _judge(done, job)
        if rnd + 1 >= min_rounds and verdict is not None and verdict.decided:
            stopped = "decided"
            break
        if max_s is not None and time.monotonic() - started > max_s:
            stopped = "time"
            break
    done = _complete_rounds(runs)
    if done and not result_est:
        result_est, verdict = _judge(done, job)
    return RerunResult(
        base, new, warmup, steps, full, job, runs, orders, result_est,
        verdict if done else None, stopped, failure, _notes(runs, steps, full),
    )  # fmt: skip


def _order(
    rnd: int, shuffle: random.Random, base: Script, new: Script, orders: list[str]
) -> list[tuple[SideName, Script]]:
    """This round's order: drawn at random for an even round, the reverse of the round before
    for an odd one. Each side runs first equally often, so whatever a process's position costs
    (the one after another process, a cache) cancels; a plain shuffle per round can put the same
    side first 7 rounds in 8."""
    order: list[tuple[SideName, Script]] = [("BASE", base), ("NEW", new)]
    if rnd % 2 == 0:
        shuffle.shuffle(order)
    elif orders and orders[-1].startswith("BASE"):
        order.reverse()
    return order


def _complete_rounds(runs: list[ChildRun]) -> list[tuple[RunCost, RunCost]]:
    by_round: dict[int, dict[str, ChildRun]] = {}
    for r in runs:
        by_round.setdefault(r.round, {})[r.side] = r
    out = []
    for _, d in sorted(by_round.items()):
        b, n = d.get("BASE"), d.get("NEW")
        if b is not None and n is not None and b.cost is not None and n.cost is not None:
            out.append((b.cost, n.cost))
    return out


def _full_job_steps(done: list[tuple[RunCost, RunCost]], given: int | None) -> int | None:
    """The job length: ``given``, else what the runs that went to their end did (the smaller
    side's, if unequal)."""
    if given:
        return given
    lengths = [c.job_steps for pair in done for c in pair if c.job_steps]
    return min(lengths) if lengths else None


def _judge(
    done: list[tuple[RunCost, RunCost]], job: int | None
) -> tuple[dict[Quantity, Estimate], Verdict]:
    est = estimates([b for b, _ in done], [n for _, n in done], paired=True, job_steps=job)
    return est, decide(est, job)


def _notes(runs: list[ChildRun], steps: int, full: bool) -> list[str]:
    """What a reader should know about the window (an epoch longer than it, no step found)."""
    out = []
    for r in runs[:2]:
        loaders = r.detail.get("loaders") or []
        if full or not loaders:
            continue
        d = loaders[0]
        if d.get("dataset_len") and d.get("batch_size"):
            per_epoch = -(-int(d["dataset_len"]) // int(d["batch_size"]))
            if per_epoch > steps:
                out.append(
                    f"{r.side}: an epoch is {per_epoch} steps and the window {steps}: epoch-start "
                    f"costs (DataLoader worker start-up) may fall outside it; --steps "
                    f"{per_epoch} or --full counts them"
                )
    return out


def _spec(script: Script, warmup: int, steps: int, full: bool, result: Path) -> dict[str, Any]:
    return {
        "script": os.path.abspath(script.path),
        "args": list(script.args),
        "warmup": warmup,
        "steps": steps,
        "full": full,
        "result_path": str(result),
    }


def _run_one(
    side: SideName,
    rnd: int,
    script: Script,
    warmup: int,
    steps: int,
    full: bool,
    timeout_s: float,
    env: dict[str, str] | None,
    cwd: str | None,
) -> ChildRun:
    with tempfile.TemporaryDirectory(prefix="td-rerun-") as tmp:
        result_path = Path(tmp) / "result.json"
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(_spec(script, warmup, steps, full, result_path)))
        cmd = [sys.executable, "-m", "torchdoctor.compare.rerun_child", str(spec_path)]
        t_spawn = time.monotonic()
        # Own session: on timeout the whole group goes (DataLoader workers, compile workers).
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            wall = time.monotonic() - t_spawn
            return ChildRun(side, rnd, "timeout", -1, f"ran past {timeout_s:.0f} s", wall, None)
        wall = time.monotonic() - t_spawn
        _kill_group(proc)  # workers a run leaked must not steal CPU from the next run
        return _read(side, rnd, proc.returncode, result_path, err, t_spawn, wall, warmup, steps)


def _with_job(run: ChildRun) -> ChildRun:
    """A run that went to its end: its whole time is what the parent saw, exit included."""
    from dataclasses import replace

    if run.cost is None or run.cost.job_steps is None:
        return run
    return replace(run, cost=replace(run.cost, job_s=run.wall_s))


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _read(
    side: SideName,
    rnd: int,
    returncode: int,
    path: Path,
    stderr: bytes,
    t_spawn: float,
    wall: float,
    warmup: int,
    steps: int,
) -> ChildRun:
    tail = " | ".join(stderr.decode("utf-8", "replace").strip().splitlines()[-3:])[:400]
    if not path.exists():
        why = f"exited with status {returncode} without a result"
        if returncode < 0:
            why = f"was killed by {signal.Signals(-returncode).name}"
        return ChildRun(side, rnd, "crash", -1, f"{why}: {tail}", wall, None)
    doc = json.loads(path.read_text(encoding="utf-8"))
    cost, why = _cost(doc, t_spawn, t_spawn + wall, warmup, steps)
    status, code = str(doc.get("status")), int(doc.get("code") or 0)
    if cost is None:
        exc = doc.get("exception") or tail
        why = f"{why} (the script {status}, status {code}{': ' + exc if exc else ''})"
    return ChildRun(side, rnd, status, code, why, wall, cost, doc)


def _startup_s(doc: dict[str, Any], t_spawn: float, warm: np.ndarray) -> float:
    """Everything before the steady window that is not a warm-up step: the interpreter, imports
    and the script's own set-up. Taken from the instant the warm-up ended, not from the clock's
    first step: when an optimizer step takes over from DataLoader batches as the step signal,
    the clock's first step starts at the first batch, and what ran before it would be lost."""
    start = doc.get("t_measure") or doc["t_begin"]
    return max(0.0, float(start) - t_spawn - float(np.sum(warm)) / 1000.0)


def _cost(
    doc: dict[str, Any], t_spawn: float, t_exit: float, warmup: int, steps: int
) -> tuple[RunCost | None, str]:
    """The run's costs, or None and why (too few steps, no step signal)."""
    step_ms = np.asarray(doc.get("step_ms") or [], dtype=np.float64)
    if doc.get("status") not in ("stopped", "completed") or (doc.get("code") or 0) != 0:
        return None, "failed"
    if len(step_ms) < warmup + 1:
        return None, (
            f"ran {len(step_ms)} steps, fewer than --warmup {warmup} + 1 (no optimizer step, "
            "DataLoader batch or torchdoctor.step() marker seen?)"
        )
    warm, steady = step_ms[:warmup], step_ms[warmup:]
    window = None
    t_measure, t_window_end = doc.get("t_measure"), doc.get("t_window_end")
    if doc.get("status") == "stopped" and t_measure is not None and t_window_end is not None:
        steady = steady[:steps]
        window = (float(t_window_end) - float(t_measure)) * 1e3 / len(steady)
    loaders = doc.get("loaders") or []
    batch = next((d.get("batch_size") for d in loaders if d.get("batch_size")), None)
    completed = doc.get("status") == "completed"
    return (
        RunCost(
            step_ms=steady,
            warmup_ms=warm,
            startup_s=_startup_s(doc, t_spawn, warm),
            # A stopped run exits with what a finished one holds (modules, threads, objects)
            exit_s=max(0.0, t_exit - float(doc["t_end"])),
            compile_s=float(doc.get("compile_s") or 0.0) or None,
            job_steps=len(step_ms) if completed else None,
            window_mean_ms=window,
            samples_per_step=float(batch) if batch else None,
        ),
        "",
    )
