"""Cross-rank analysis on synthetic jobs whose exact answers are known by construction."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ranks.rank_synth import COMM_US, WORK_MARGIN_US, write_job
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.errors import TraceError


def _straggler(report):  # type: ignore[no-untyped-def]
    return next((f for f in report.findings if f.id == "straggler-rank"), None)


def test_the_rank_with_most_own_work_is_named_per_step_and_overall(tmp_path: Path) -> None:
    # rank 2 computes 3 ms, the others 1 ms; rank 0's step looks just as long (it waits)
    write_job(tmp_path, [[1000.0, 1000.0, 3000.0, 1000.0]] * 4)
    report = analyze_path(tmp_path, jobs=1)
    cr = report.cross_rank
    assert cr is not None and cr.slowest_rank == 2
    assert [s.rank for s in cr.stragglers] == [2, 2, 2, 2]
    expected_work_ms = (3000.0 + WORK_MARGIN_US) / 1000.0
    assert cr.stragglers[0].work_ms == pytest.approx(expected_work_ms, abs=1e-3)
    waits = {w.rank: w.wait_ms for w in cr.ranks}
    assert waits[0] == pytest.approx((2000.0 + COMM_US) / 1000.0, abs=1e-3)  # waits for rank 2
    assert waits[2] == pytest.approx(COMM_US / 1000.0, abs=1e-3)
    slow = _straggler(report)
    assert slow is not None and slow.evidence["rank"] == 2
    assert report.analysis.table.meta.rank == 2  # the detail is the slowest rank's
    # every rank gets its own breakdown (ms per step), not only the detailed one
    compute = [r.breakdown_ms["compute"] for r in report.ranks]
    assert compute == pytest.approx([1.0, 1.0, 3.0, 1.0], abs=1e-3)
    assert (
        report.ranks[0].breakdown_ms["communication"]
        > report.ranks[2].breakdown_ms["communication"]
    )


def test_terminal_report_shows_ranks_stragglers_and_failures(tmp_path: Path) -> None:
    write_job(tmp_path, [[1000.0, 1000.0, 1500.0]] * 4, stop_after={1: 2})
    proc = subprocess.run(
        [sys.executable, "-m", "torchdoctor", "analyze", str(tmp_path), "--jobs", "2"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "Verdict: 1 rank(s) failed (rank 1: trace stops at step 2" in out
    assert "Most work per step (the rank the others wait for): step 0: rank 2" in out
    assert "failed: trace stops at step 2" in out


def test_collective_skew_names_who_arrives_last_and_what_it_costs(tmp_path: Path) -> None:
    # a different rank is late in each step, by a different amount
    write_job(
        tmp_path, [[1000.0, 1500.0, 1000.0], [2500.0, 1000.0, 1000.0], [1000.0, 1000.0, 1200.0]]
    )
    cr = analyze_path(tmp_path, jobs=1).cross_rank
    assert cr is not None
    by_step = {c.step: c for c in cr.skews}
    assert (by_step[0].last_rank, by_step[0].skew_ms, by_step[0].others_wait_ms) == (1, 0.5, 1.0)
    assert (by_step[1].last_rank, by_step[1].skew_ms, by_step[1].others_wait_ms) == (0, 1.5, 3.0)
    assert (by_step[2].last_rank, by_step[2].skew_ms) == (2, 0.2)
    assert [s.rank for s in cr.stragglers] == [1, 0, 2]
    assert cr.skews[0].step == 1  # largest first


def test_clocks_of_different_hosts_are_aligned_on_collective_ends(tmp_path: Path) -> None:
    # rank 1's host clock is 10 s ahead: raw starts would make it "last" everywhere
    write_job(tmp_path, [[1000.0, 1000.0, 1800.0]] * 3, clock_us={1: 10e6})
    report = analyze_path(tmp_path, jobs=1)
    cr = report.cross_rank
    assert cr is not None
    assert {c.last_rank for c in cr.skews} == {2}
    assert all(c.skew_ms == pytest.approx(0.8, abs=1e-3) for c in cr.skews)
    assert any("clocks differ by up to 10000.0 ms" in n for n in report.notes)


def test_no_straggler_when_ranks_work_alike(tmp_path: Path) -> None:
    write_job(tmp_path, [[1000.0, 1020.0, 1010.0]] * 3)
    assert _straggler(analyze_path(tmp_path, jobs=1)) is None


def test_rank_that_stopped_is_failed_and_the_waiting_ranks_are_not_stragglers(
    tmp_path: Path,
) -> None:
    # rank 1 dies after step 2; ranks 0 and 2 stall 50 ms in step 3's AllReduce. Rank 2 is a bit
    # slower than rank 0 throughout, within the noise floor.
    write_job(tmp_path, [[1000.0, 1000.0, 1050.0]] * 4, stop_after={1: 2})
    report = analyze_path(tmp_path, jobs=1)
    cr = report.cross_rank
    assert cr is not None
    assert [(f.rank, f.reason.split(";")[0]) for f in cr.failed] == [(1, "trace stops at step 2")]
    assert 3 not in cr.common_steps  # the stalled step is not compared
    assert _straggler(report) is None
    assert report.verdict.startswith("1 rank(s) failed (rank 1")
    assert [r.status.startswith("failed") for r in report.ranks] == [False, True, False]


def test_rank_with_no_trace_fails_only_when_the_others_stalled(tmp_path: Path) -> None:
    stalled = tmp_path / "stalled"
    stalled.mkdir()
    write_job(stalled, [[1000.0, 1000.0, 1000.0]] * 3, stop_after={2: 1})
    (stalled / "rank2.json").unlink()  # died without writing its trace
    cr = analyze_path(stalled, jobs=1).cross_rank
    assert cr is not None and [f.rank for f in cr.failed] == [2]
    assert "no trace" in cr.failed[0].reason
    calm = tmp_path / "calm"
    calm.mkdir()
    write_job(calm, [[1000.0, 1000.0, 3000.0]] * 3)
    (calm / "rank1.json").unlink()  # only some ranks were profiled: not a failure
    report = analyze_path(calm, jobs=1)
    assert report.cross_rank is not None and report.cross_rank.failed == ()
    assert any("no trace for 1 of 3 ranks (1)" in n for n in report.notes)
    slow = _straggler(report)
    assert slow is not None and slow.evidence["rank"] == 2


def test_files_that_are_no_trace_are_skipped_with_a_note_never_a_rank(tmp_path: Path) -> None:
    write_job(tmp_path, [[1000.0, 2000.0]] * 3)
    (tmp_path / "numbers.json").write_text("[1, 2, 3]")
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    (tmp_path / "config.json").write_text('{"lr": 0.1}')
    report = analyze_path(tmp_path, jobs=2)
    assert [r.rank for r in report.ranks] == [0, 1]
    skipped = sorted(n.split(":")[0] for n in report.notes if n.startswith("skipped"))
    assert skipped == ["skipped config.json", "skipped empty.json", "skipped numbers.json"]


def test_a_truncated_rank_trace_is_a_failed_rank(tmp_path: Path) -> None:
    write_job(tmp_path, [[1000.0, 1000.0, 1000.0]] * 3)
    whole = (tmp_path / "rank2.json").read_bytes()
    (tmp_path / "rank2.json").unlink()
    (tmp_path / "rank2.json.gz").write_bytes(gzip.compress(whole[: len(whole) // 2]))
    report = analyze_path(tmp_path, jobs=1)
    assert report.cross_rank is not None
    assert [(f.rank, f.reason[:16]) for f in report.cross_rank.failed] == [(2, "unreadable trace")]


def test_ranks_from_file_order_when_traces_do_not_say(tmp_path: Path) -> None:
    write_job(tmp_path, [[1000.0, 3000.0]] * 3, names=["a.json", "b.json"], dist_info=False)
    report = analyze_path(tmp_path, jobs=1)
    assert [r.rank for r in report.ranks] == [0, 1]
    slow = _straggler(report)
    assert slow is not None and slow.evidence["rank"] == 1


def test_a_folder_of_nothing_readable_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[1, 2, 3]")
    with pytest.raises(TraceError, match="no readable trace"):
        analyze_path(tmp_path, jobs=1)
