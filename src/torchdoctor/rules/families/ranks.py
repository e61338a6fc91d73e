"""Across a folder of ranks (``analyze`` on one): the straggler rank every collective waits
for. Measured on the ranks' comparison (``analysis/cross_rank.py``): each rank's own work, its
step less its waits in collectives (waiting is how fast ranks absorb a slow one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchdoctor.rules import fixes as fx
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.spec import FindingSpec, Measured, RanksRule, SeverityPolicy, static

if TYPE_CHECKING:
    from torchdoctor.analysis.cross_rank import CrossRank

SPEC = FindingSpec(
    id="straggler-rank",
    label="a straggler rank",
    title="Straggler: rank {rank} works {excess:.1f} ms per step longer than the median rank "
    "({ratio:.0%})",
    severity=SeverityPolicy(th.STRAGGLER, th.STRAGGLER_CRITICAL, floor="warning"),
    threshold=th.STRAGGLER,
    fix=static(fx.STRAGGLER),
    explanation="Collectives wait for the slowest rank, so every rank runs at its speed.",
    doc_url=f"{fx.DOCS}/notes/ddp.html",
)


def measure(cr: CrossRank) -> Measured | None:
    """The rank with the most work, its excess over the median rank's as a share of it
    (severity graded on that share); saving: the excess, at most a step. A saving under
    ``WARNING_SHARE`` of the step is info, whatever the share. Failed ranks are never compared
    (the others spent their last step waiting for them)."""
    if len(cr.ranks) < 2:
        return None
    import numpy as np

    work = np.array([r.work_ms for r in cr.ranks])
    median = float(np.median(work))
    if median <= 0:
        return None
    k = int(np.argmax(work))
    excess = float(work[k] - median)
    slow = cr.ranks[k]
    step = max(r.step_ms for r in cr.ranks)
    saving = min(excess, step)
    return Measured(
        value=excess / median,
        saving_ms=saving,
        share=excess / median,
        title={"rank": slow.rank, "excess": excess, "ratio": excess / median},
        evidence={
            "rank": slow.rank,
            "work_ms_per_rank": {r.rank: r.work_ms for r in cr.ranks},
            "median_work_ms": round(median, 3),
            "straggler_in_steps": f"{slow.straggler_steps} of {len(cr.common_steps)}",
            "last_to_arrive_in_collectives": f"{slow.last_arrivals} of {cr.matched_collectives}",
        },
        where=(f"rank {slow.rank}",),
        most="info" if step <= 0 or saving / step < th.WARNING_SHARE else None,
    )


RULES = (RanksRule(SPEC, measure),)
