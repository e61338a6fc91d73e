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
from typing import cast, get_args

import numpy as np

from torchdoctor.ab import child
from torchdoctor.capture import script_arm
from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.rerun_types import ChildRun, RerunOptions, RunStatus, Script, SideName

_STATUSES = frozenset(get_args(RunStatus))


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
    (``options.timeout_s``) and after the script's end.
    """
    spec = {
        "script": os.path.abspath(script.path),
        "args": list(script.args),
        "warmup": options.warmup,
        "steps": options.steps,
        "full": options.full,
    }
    got = child.run_child(child.Arm(side, script_arm.ARGV, spec, env or {}, cwd), options.timeout_s)
    arm = script_arm.read(got)
    cost, why = cost_of(arm, options.steps)
    status = cast(RunStatus, arm.status if arm.status in _STATUSES else "crash")
    return ChildRun(side, rnd, status, arm.code, why, got.wall_s, cost, got.result or {})


def cost_of(arm: script_arm.ArmResult, steps: int) -> tuple[RunCost | None, str]:
    """One process's record as the run's costs (seconds; steps in ms), or None and why (the
    script failed, too few steps, no step signal, no result). A run that went to its end
    (``--full``) has its whole time, exit included, as the parent saw it."""
    split, why = arm.split(steps)
    if split is None:
        return None, why
    completed = arm.status == "completed"
    cost = RunCost(
        step_ms=np.asarray(split.measured_ms, dtype=np.float64),
        warmup_ms=np.asarray(split.warmup_ms, dtype=np.float64),
        startup_s=arm.startup_s,
        exit_s=arm.exit_s,
        compile_s=arm.compile_s or None,
        job_steps=len(arm.step_ms) if completed else None,
        window_mean_ms=split.window_mean_ms,
        samples_per_step=float(arm.batch_size) if arm.batch_size else None,
        job_s=arm.wall_s if completed else None,
    )
    return cost, ""
