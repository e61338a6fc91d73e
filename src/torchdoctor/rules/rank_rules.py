"""Rules across ranks: per-rank step time and the straggler that every collective waits for."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec


@dataclass(frozen=True)
class RankRow:
    """One rank's headline numbers (milliseconds per step)."""

    rank: int
    path: str
    steps: int
    mean_step_ms: float
    gpu_busy_share: float
    exposed_comm_ms: float
    """Communication the rank waited for, per step: fast ranks wait for slow ones here."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_rows(analyses: list[TraceAnalysis]) -> list[RankRow]:
    """A row per rank (rank numbers from the trace, else the position in the folder)."""
    rows = []
    for i, a in enumerate(analyses):
        rank = a.table.meta.rank if a.table.meta.rank is not None else i
        rows.append(
            RankRow(
                rank=rank,
                path=a.table.meta.path,
                steps=a.n_steps,
                mean_step_ms=round(a.mean_step_ms, 3),
                gpu_busy_share=round(a.total.share(a.total.gpu_busy_ms), 4),
                exposed_comm_ms=round(a.per_step_ms(a.comm.exposed_ms), 3),
            )
        )
    return rows


def straggler(primary: TraceAnalysis, rows: list[RankRow]) -> Finding | None:
    """The rank whose own work (step minus waiting in collectives) is slowest, if it stands out.

    Waiting in collectives is how fast ranks absorb a slow one, so the straggler is the rank with
    the most non-waiting time, not necessarily the longest step.
    """
    if len(rows) < 2:
        return None
    work = np.array([r.mean_step_ms - r.exposed_comm_ms for r in rows])
    median = float(np.median(work))
    k = int(np.argmax(work))
    excess = float(work[k] - median)
    if median <= 0 or excess / median < th.STRAGGLER:
        return None
    step = max(r.mean_step_ms for r in rows)
    s = spec("straggler-rank")
    saving = min(excess, step)
    return Finding(
        id="straggler-rank",
        title=s.format_title(rank=rows[k].rank, excess=excess, ratio=excess / median),
        severity=s.severity.grade(excess / median),
        saving_ms_per_step=round(saving, 3),
        share_of_step=round(saving / step, 4) if step > 0 else 0.0,
        evidence={
            "rank": rows[k].rank,
            "work_ms_per_rank": {
                r.rank: round(float(w), 3) for r, w in zip(rows, work, strict=True)
            },
            "median_work_ms": round(median, 3),
        },
        fix=s.fix(),
        explanation=s.explanation,
        doc_url=s.doc_url,
        where=[rows[k].path],
    )
