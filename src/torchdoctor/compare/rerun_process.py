"""One fresh process of one side of an interleaved rerun, and its record as costs.

The process (``ab.child``: a session of its own, bounded, its group killed at the end) runs
``capture/script_arm.py`` (the script under ``check``'s step clock, profiler off), which writes
its step times and clock instants as its result; this module turns that record and the wall
time the parent saw into a ``RunCost``. Every failure of the script (an exception, a non-zero
exit, too few steps, a timeout, a crash) comes back as a ``ChildRun`` with a one-line reason,
never as an exception.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import Any, get_args

import numpy as np

from torchdoctor.ab import child
from torchdoctor.capture.timed_window import measured_step_ms
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.rerun_types import ChildRun, RerunOptions, RunStatus, Script, SideName

_STATUSES = frozenset(get_args(RunStatus))
CHILD = (sys.executable, "-m", "torchdoctor.capture.script_arm")


def run_child(
    side: SideName,
    rnd: int,
    script: Script,
    options: RerunOptions,
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
) -> ChildRun:
    """Run ``script`` once in a fresh process (``ab.child``) and return what it measured.

    ``env`` adds variables to this process's environment; the process group goes on timeout
    (``options.timeout_s``) and after the script's end. A run that went to its end
    (``options.full``) has its whole time, exit included, as the parent saw it.
    """
    spec = {
        "script": os.path.abspath(script.path),
        "args": list(script.args),
        "warmup": options.warmup,
        "steps": options.steps,
        "full": options.full,
    }
    got = child.run_child(child.Arm(side, CHILD, spec, env or {}, cwd), options.timeout_s)
    if got.ending == "timeout":
        why = f"ran past {options.timeout_s:.0f} s"
        return ChildRun(side, rnd, "timeout", -1, why, got.wall_s, None)
    if got.result is None:
        why = f"{got.why}: {got.tail()}"
        return ChildRun(side, rnd, "crash", -1, why, got.wall_s, None)
    doc = got.result
    cost, why = cost_of(doc, got.t_spawn, got.t_spawn + got.wall_s, options.warmup, options.steps)
    status, code = _status(doc.get("status")), int(doc.get("code") or 0)
    if cost is None:
        exc = doc.get("exception") or got.tail()
        why = f"{why} (the script {status}, status {code}{': ' + exc if exc else ''})"
    return _with_job(ChildRun(side, rnd, status, code, why, got.wall_s, cost, doc))


def _with_job(run: ChildRun) -> ChildRun:
    """A run that went to its end: its whole time is what the parent saw, exit included."""
    if run.cost is None or run.cost.job_steps is None:
        return run
    return replace(run, cost=replace(run.cost, job_s=run.wall_s))


def _status(value: object) -> RunStatus:
    text = str(value)
    return text if text in _STATUSES else "crash"  # type: ignore[return-value]


def _startup_s(doc: dict[str, Any], t_spawn: float, warm: np.ndarray) -> float:
    """Everything before the steady window that is not a warm-up step: the interpreter, imports
    and the script's own set-up. Taken from the instant the warm-up ended, not from the clock's
    first step: when an optimizer step takes over from DataLoader batches as the step signal,
    the clock's first step starts at the first batch, and what ran before it would be lost."""
    start = doc.get("t_measure") or doc["t_begin"]
    return max(0.0, float(start) - t_spawn - float(np.sum(warm)) / 1000.0)


def cost_of(
    doc: dict[str, Any], t_spawn: float, t_exit: float, warmup: int, steps: int
) -> tuple[RunCost | None, str]:
    """A child's record as the run's costs (times on the parent's monotonic clock, seconds), or
    None and why (the script failed, too few steps, no step signal)."""
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
        gpu = measured_step_ms(doc)  # the steps on the GPU's clock (CUDA events), as check's
        if gpu is not None and len(gpu) == len(steady):
            steady = np.asarray(gpu, dtype=np.float64)
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
