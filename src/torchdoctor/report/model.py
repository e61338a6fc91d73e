"""The report ``torchdoctor analyze`` builds: data only (building it is in ``build``, its JSON
form in ``serialize``, its text in ``render``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from torchdoctor.analysis.bundle import TraceAnalysis
from torchdoctor.rules.finding import Finding

if TYPE_CHECKING:  # only a folder of ranks builds these: one trace never imports their modules
    from torchdoctor.analysis.cross_rank import CrossRank
    from torchdoctor.rules.rank_rules import RankRow


@dataclass(frozen=True)
class Report:
    """What ``torchdoctor analyze`` found: one trace's analysis (the lowest rank's for a folder),
    the findings ranked by saving, and per-rank rows for a folder of traces."""

    analysis: TraceAnalysis
    findings: list[Finding]
    verdict: str
    ranks: list[RankRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cross_rank: CrossRank | None = None
    """For a folder of ranks: stragglers, collective skew, failed ranks (see commands/analyze/ranks.py)."""
