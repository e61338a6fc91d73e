"""The ranks family (``rules/families/ranks.py``): the straggler rank, whose own work (step less
waiting in collectives) stands out from the median rank's, on hand-written rank comparisons."""

from __future__ import annotations

from torchdoctor.analysis.cross_rank import CrossRank, RankWork
from torchdoctor.rules.families import ranks
from torchdoctor.rules.rank_rules import ranks_findings
from torchdoctor.rules.registry import spec

(RULE,) = ranks.RULES


def _ranks(work: list[float], step: float) -> CrossRank:
    """Ranks of ``step`` ms per step, each with ``work`` ms of its own (the rest waiting)."""
    rows = tuple(
        RankWork(i, step, step - w, w, 0.0, straggler_steps=0, last_arrivals=0, caused_wait_ms=0)
        for i, w in enumerate(work)
    )
    return CrossRank(rows, (1, 2, 3), (), (), 6, int(max(range(len(work)), key=work.__getitem__)))


def test_the_rank_with_most_work_is_the_straggler() -> None:
    (f,) = ranks_findings(_ranks([10.0, 10.0, 10.0, 14.0], step=15.0))
    assert f.id == "straggler-rank" and f.where == ["rank 3"]
    assert f.title == "Straggler: rank 3 works 4.0 ms per step longer than the median rank (40%)"
    assert f.severity == "critical"  # 40% over the median: STRAGGLER_CRITICAL's 30%
    assert f.saving_ms_per_step == 4.0 and f.share_of_step == round(4 / 15, 4)
    assert f.evidence["median_work_ms"] == 10.0 and f.evidence["straggler_in_steps"] == "0 of 3"
    assert spec("straggler-rank") is RULE.spec


def test_a_large_share_of_a_tiny_step_share_is_info() -> None:
    (f,) = ranks_findings(_ranks([1.0, 1.0, 1.5], step=100.0))  # 50% of the work, 0.5% of a step
    assert f.severity == "info"


def test_even_ranks_and_a_lone_rank_have_no_straggler() -> None:
    assert ranks_findings(_ranks([10.0, 10.0, 10.0, 10.5], step=15.0)) == []  # 5% < 10%
    assert ranks_findings(_ranks([10.0], step=15.0)) == []
