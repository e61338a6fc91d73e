"""Run one trial in its own process (``ab.child``), with a timeout, and turn whatever happens into
a result.

A child process per trial isolates what a configuration can do to the process it runs in: an
out-of-memory, a segfault in a compiled kernel, a deadlocked DataLoader worker, or torch.compile's
global caches and thread pools leaking into the next trial's timing.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchdoctor import ab
from torchdoctor.ab.child import Arm, ChildExit, run_child
from torchdoctor.tune.options import TuneOptions
from torchdoctor.tune.space import to_config
from torchdoctor.tune.trial import Trial, TrialResult


@dataclass
class TrialRunner:
    """Runs trials of one workload file as ``python -m torchdoctor.tune.worker`` children."""

    workload: str
    """Path of the workload file."""
    opts: TuneOptions = field(default_factory=TuneOptions)
    """The tuning run's options: function, warm-up, steps, rounds, gain, seed, trial timeout and
    processes per trial (above 1 each trial runs under ``torch.distributed.run``, DDP)."""
    batch_size: int | None = None
    """The workload's global batch (learned from the baseline's probe); None until known."""
    min_rounds: int = ab.FEWEST_ROUNDS
    """Rounds before a trial may stop (the fewest with a 95% interval)."""
    workdir: str | None = None
    """Where traces and scratch files go (a temporary folder when None)."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for the children."""

    def spec(self, trial: Trial) -> dict[str, Any]:
        """The JSON the child reads: workload, arms, steps, rounds, seed."""
        # Absolute: the worker imports the workload, which may change its working directory
        # before the baseline's trace is written.
        wd = Path(self.workdir or tempfile.gettempdir()).absolute()
        o = self.opts
        baseline = trial.phase == "baseline"
        arms = [
            {
                "label": label,
                "config": to_config(a, batch_size=self.batch_size, seed=o.seed).to_dict(),
            }
            for label, a in trial.arms()
        ]
        return {
            "workload": str(Path(self.workload).resolve()),
            "function": o.function,
            "arms": arms,
            "warmup": o.warmup,
            "steps": o.steps,
            "min_rounds": self.min_rounds,
            "max_rounds": o.max_rounds,
            # Leave a margin before the trial timeout for warm-up and start-up.
            "max_rounds_s": 0.6 * o.trial_timeout_s,
            "min_gain": o.min_gain,
            "seed": o.seed,
            "parent_pid": os.getpid(),  # the trial ends (and cleans up) if the tuner dies
            "probe": baseline,
            "trace_path": str(wd / "baseline-trace.json") if baseline else None,
        }

    def __call__(self, trial: Trial) -> TrialResult:
        """Run ``trial`` to completion, failure or timeout; never raises for a failed trial."""
        argv: tuple[str, ...] = (sys.executable,)
        if self.opts.nproc > 1:
            # --standalone: a local rendezvous on a free port, so trials never collide on one.
            argv += (
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc_per_node={self.opts.nproc}",
            )
        arm = Arm(trial.key, (*argv, "-m", "torchdoctor.tune.worker"), self.spec(trial), self.env)
        got = run_child(arm, self.opts.trial_timeout_s)
        result = _result(got)
        result.wall_s = got.wall_s
        if result.probe and self.batch_size is None:
            self.batch_size = int(result.probe.get("batch_size") or 0) or None
        return result


def _result(got: ChildExit) -> TrialResult:
    if got.ending == "timeout":
        return TrialResult(status="timeout", reason=f"{got.why} (hang?)")
    if got.ending == "signal":
        return TrialResult(status="crash", reason=got.why)
    if got.result is None:
        return TrialResult(status="error", reason=f"{got.why}: {got.tail()}")
    return TrialResult.from_dict(got.result)
