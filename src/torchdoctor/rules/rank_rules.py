"""Across ranks: a row per rank, the findings of the ``RanksRule`` families (the straggler every
collective waits for, ``rules/families/ranks.py``), and rank skew."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from typing import Any

from torchdoctor.analysis.cross_rank import CrossRank
from torchdoctor.analysis.rank_summary import RankSummary
from torchdoctor.rules import thresholds as th
from torchdoctor.rules.finding import Finding
from torchdoctor.rules.registry import spec
from torchdoctor.rules.spec import RanksRule


@dataclass(frozen=True)
class RankRow:
    """One rank's headline numbers (milliseconds per step) and its own breakdown."""

    rank: int
    path: str
    steps: int
    mean_step_ms: float
    gpu_busy_share: float
    exposed_comm_ms: float
    """Communication the rank waited for, per step: fast ranks wait for slow ones here."""
    status: str = "ok"
    """"ok", or "failed: <why>" for a rank that did not finish with the others."""
    wait_ms: float = 0.0
    """Waiting in any collective per step (GPU communication exposed, CPU collectives)."""
    work_ms: float = 0.0
    """Step time minus waiting: the rank's own work."""
    breakdown_ms: dict[str, float] = field(default_factory=dict)
    """The rank's step breakdown, ms per step (device parts, or CPU parts on a CPU trace)."""
    top_finding: str = ""
    """The rank's own most valuable finding id ('' when none)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rank_rows(summaries: list[RankSummary], cr: CrossRank) -> list[RankRow]:
    """A row per rank, failed ranks included, in rank order."""
    work = {w.rank: w for w in cr.ranks}
    rows = [_row(s, work.get(s.rank if s.rank is not None else -1)) for s in summaries]
    rows += [
        RankRow(f.rank, f.path, 0, 0.0, 0.0, 0.0, status=f"failed: {f.reason}")
        for f in cr.failed
        if f.rank not in {r.rank for r in rows}
    ]
    for i, r in enumerate(rows):
        reason = next((f.reason for f in cr.failed if f.rank == r.rank), None)
        if reason and r.status == "ok":
            rows[i] = RankRow(**{**r.to_dict(), "status": f"failed: {reason}"})
    return sorted(rows, key=lambda r: r.rank)


def _row(s: RankSummary, w: Any) -> RankRow:
    t = s.total
    parts = {**t.busy_ms, **t.idle_ms}
    actionable = [f for f in s.findings if f.get("severity") != "info"]
    return RankRow(
        rank=s.rank if s.rank is not None else -1,
        path=s.path,
        steps=s.n_steps,
        # over the steps every healthy rank has, like waiting and work (else all its steps)
        mean_step_ms=w.step_ms if w else round(s.mean_step_ms, 3),
        gpu_busy_share=round(t.share(t.gpu_busy_ms), 4),
        exposed_comm_ms=round(s.exposed_comm_ms, 3),
        wait_ms=w.wait_ms if w else round(float(s.wait_ms.mean()) if s.n_steps else 0.0, 3),
        work_ms=w.work_ms if w else round(float(s.work_ms.mean()) if s.n_steps else 0.0, 3),
        breakdown_ms={k: round(s.per_step(v), 3) for k, v in parts.items() if v > 0},
        top_finding=str(actionable[0]["id"]) if actionable else "",
    )


def ranks_findings(cr: CrossRank) -> list[Finding]:
    """The findings across the ranks (``RanksRule`` families: the straggler), each judged and
    worded by its registry entry; the step is the slowest rank's mean step."""
    from torchdoctor.rules.families import RANKS_FAMILY_RULES

    return [f for f in (_finding(r, cr) for r in RANKS_FAMILY_RULES) if f is not None]


def _finding(rule: RanksRule, cr: CrossRank) -> Finding | None:
    m = rule.measure(cr)
    if m is None or not rule.fires(m):
        return None
    m, s = m.complete(), rule.spec
    step = max(r.step_ms for r in cr.ranks)
    share = m.saving_ms / step if step > 0 else 0.0
    return Finding(
        id=s.id,
        title=s.format_title(**m.title),
        severity=s.severity.floored(m.severity(s.severity, share), share),
        saving_ms_per_step=round(m.saving_ms, 3),
        share_of_step=round(share, 4),
        evidence=m.evidence,
        fix=s.fix(**m.fix),
        explanation=s.explanation,
        doc_url=s.doc_url,
        where=list(m.where),
    )


def skew_or_comm(f: Finding, cr: CrossRank, rank: int) -> Finding:
    """An exposed-communication finding whose time is mostly this rank waiting for later
    arrivals is rank skew: retitled as such (same id), with the skew's numbers and the fix for
    uneven work; any other finding unchanged."""
    if f.id != "exposed-communication":
        return f
    me = next((r for r in cr.ranks if r.rank == rank), None)
    if me is None or me.skew_wait_ms < th.SKEW_SHARE_OF_COMM * f.saving_ms_per_step:
        return f
    late = max(cr.ranks, key=lambda r: r.caused_wait_ms)
    spread = [c.skew_ms for c in cr.skews] or [0.0]
    title = (
        f"Rank skew: rank {rank} waits {me.skew_wait_ms:.1f} ms per step in collectives for "
        f"later ranks (mostly rank {late.rank}; arrivals up to {max(spread):.1f} ms apart): "
        f"{min(me.skew_wait_ms, f.saving_ms_per_step):.1f} of the {f.saving_ms_per_step:.1f} ms "
        "of exposed communication is waiting, not transfer"
    )
    evidence = {**f.evidence, "skew_wait_ms_per_step": me.skew_wait_ms, "latest_rank": late.rank}
    return dataclasses.replace(
        f,
        title=title,
        evidence=evidence,
        fix=spec("straggler-rank").fix(),
        explanation="A collective starts when the last rank arrives; the ranks that arrive "
        "first wait. Their wait is the late rank's extra work, not the network: even the work "
        "out (data shards, per-rank extra work) instead of tuning communication.",
    )
