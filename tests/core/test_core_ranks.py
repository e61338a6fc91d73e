"""A folder of per-rank traces: per-rank rows, straggler, rank numbers from the trace or name."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import corpus_file
from tests.core.synth import annotation, launched, write_trace
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.errors import TraceError


def _link(folder: Path, name: str, target: str) -> None:
    (folder / name).symlink_to(corpus_file(target))


@pytest.mark.slow
def test_folder_of_ranks_reports_each_rank_and_the_straggler(tmp_path: Path) -> None:
    _link(tmp_path, "a.json.gz", "a100_recsys_train_rank3")  # distributedInfo says rank 3
    _link(tmp_path, "b.json.gz", "v100_recsys_train_rank1")  # rank 1, on slower V100s
    report = analyze_path(tmp_path)
    assert [r.rank for r in report.ranks] == [1, 3]
    assert report.analysis.table.meta.rank == 1  # details are for the lowest rank
    slow = next(f for f in report.findings if f.id == "straggler-rank")
    assert slow.evidence["rank"] == 1
    by_rank = {r.rank: r.mean_step_ms for r in report.ranks}
    assert by_rank[1] > by_rank[3]


def test_rank_from_file_name_when_trace_has_none(tmp_path: Path) -> None:
    for rank, dur in ((0, 100.0), (1, 300.0)):
        ev = [annotation("ProfilerStep#1", 0, 1000), *launched("gemm", 5, 10, dur, corr=1)]
        write_trace(tmp_path / f"worker_rank{rank}.json", ev)
    report = analyze_path(tmp_path)
    assert [r.rank for r in report.ranks] == [0, 1]


def test_two_files_claiming_one_rank_is_an_error(tmp_path: Path) -> None:
    _link(tmp_path, "a.json.gz", "a100_recsys_train_rank3")
    _link(tmp_path, "b.json.gz", "a100_recsys_train_rank3")
    with pytest.raises(TraceError, match="same rank"):
        analyze_path(tmp_path)


def test_empty_folder_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no \.json"):
        analyze_path(tmp_path)
