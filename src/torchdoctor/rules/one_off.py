"""Costs paid once per job or once per epoch, not every step: a compile the job does not
repay, an evaluation at iteration 0, a warm-up, workers starting with each epoch's iterator.

Such a cost is kept in its own unit (``Finding.one_off_ms``, ``cost_unit`` ``job`` or
``epoch``) and printed as seconds of the job, never as a share of a step. To rank it against
per-step costs it is spread over the steps it is paid for (``saving_ms_per_step``): the job's
steps (the run's own count when it ran to its end, else the length the script names, else
``ONE_OFF_ASSUMED_JOB_STEPS``), or an epoch's batches. Spread that way its share of the step is
its share of the job, which is what a per-step cost's share is too.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from torchdoctor.record.run import RunRecord
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.spec import Once

Per = Literal["job", "epoch"]


def job_steps(run: RunRecord) -> tuple[int, str] | None:
    """The job's length in steps, and how it is known: the script's step count, or its epoch
    count times the feeding loader's batches per epoch; None when the script names neither."""
    job = run.job
    value = job.get("value")
    if not isinstance(value, int) or value <= 0:
        return None
    if job.get("unit") == "steps":
        return value, f"{job['name']} = {value}"
    per_epoch = batches_per_epoch(run)
    if per_epoch:
        return value * per_epoch, f"{job['name']} = {value} epochs of {per_epoch} batches"
    return None


def batches_per_epoch(run: RunRecord) -> int | None:
    """Batches per epoch of the first DataLoader whose dataset length and batch size are known."""
    for dl in run.config.dataloaders:
        n, batch = dl.dataset_len, dl.batch_size
        if n and batch:
            return -(-n // int(batch))
    return None


def spread_over(run: RunRecord) -> tuple[int, str]:
    """The steps a once-per-job cost is spread over, and where that number comes from."""
    if run.completed and run.steps.count:
        return run.steps.count, f"{run.steps.count} steps run"
    known = job_steps(run)
    if known is not None:
        return known
    assumed = int(th.ONE_OFF_ASSUMED_JOB_STEPS)
    return assumed, f"job length unknown: ranked as a job of {assumed} steps"


def spread(run: RunRecord, once: Once) -> tuple[float, int, str]:
    """What the fix saves per step (the saving spread over the steps it is paid for), those
    steps, and where their number comes from."""
    if once.per == "epoch" and once.epoch_steps:
        steps, basis = once.epoch_steps, f"an epoch of {once.epoch_steps} batches"
    else:
        steps, basis = spread_over(run)
    saved = once.cost_ms if once.saved_ms is None else once.saved_ms
    if saved <= 0 and basis.startswith("job length unknown"):
        basis = "job length unknown"  # nothing to rank: no length was assumed
    return max(0.0, saved) / steps, steps, basis


def marked(run: RunRecord, f: Finding, once: Once, steps: int, basis: str) -> Finding:
    """``f`` with its one-off cost in its own unit (``spread``'s steps and basis)."""
    per: Per = "epoch" if once.per == "epoch" and once.epoch_steps else "job"
    step = run.step_ms
    return dataclasses.replace(
        f,
        cost_unit=per,
        one_off_ms=round(once.cost_ms, 3),
        spread_steps=steps,
        spread_basis=basis,
        break_even_steps=None if once.break_even_steps is None else round(once.break_even_steps, 1),
        period_ms=round(steps * step, 3) if per == "epoch" and step else None,
    )
