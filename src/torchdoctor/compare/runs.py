"""Several runs a side: ``compare A1 A2 A3 -- B1 B2 B3``, or a folder of ``check`` run folders,
and the cost of each run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from torchdoctor.compare.cost import RunCost
from torchdoctor.compare.sides import Side, load_side
from torchdoctor.record import layout


def run_paths(path: str) -> list[str]:
    """The runs a path stands for: itself, or each run folder directly inside a folder that is
    not itself a run folder (``torchdoctor-runs/`` after several ``check`` runs), in name order."""
    p = Path(path)
    if p.is_dir() and not layout.is_run_folder(p):
        subs = sorted(d for d in p.iterdir() if d.is_dir() and layout.is_run_folder(d))
        if subs:
            return [str(d) for d in subs]
    return [path]


def load_runs(paths: Sequence[str]) -> list[Side]:
    """Every run of one side, loaded (see :func:`run_paths`)."""
    return [load_side(r) for p in paths for r in run_paths(p)]


def run_cost(side: Side) -> RunCost:
    """What one run cost, from what its side recorded."""
    return RunCost(
        step_ms=np.asarray(side.step_ms, dtype=np.float64),
        warmup_ms=np.asarray(side.warmup_ms, dtype=np.float64),
        startup_s=side.one_time_s or 0.0,
        compile_s=side.compile_s,
        job_steps=side.job_steps,
        samples_per_step=side.samples_per_step
        or (float(side.batch_size) if side.batch_size else None),
    )
