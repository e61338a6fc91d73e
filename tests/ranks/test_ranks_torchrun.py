"""Real gloo jobs under torchrun (CPU): one rank slowed on purpose is named; one crashed rank is
reported as failed and the rank left waiting for it is never called a straggler."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from torchdoctor.commands.analyze.trace import Report, analyze_path

WORKER = Path(__file__).with_name("ddp_ranks_worker.py")


def _torchrun(out: Path, *args: str, ok: bool = True) -> Path:
    with socket.socket() as s:  # a free port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
        f"--master_port={port}", str(WORKER), str(out), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert (proc.returncode == 0) == ok, proc.stderr[-3000:]
    return out


def _straggler_rank(report: Report) -> int | None:
    f = next((f for f in report.findings if f.id == "straggler-rank"), None)
    return None if f is None else int(f.evidence["rank"])


@pytest.mark.slow
def test_rank_slowed_on_purpose_is_named(tmp_path: Path) -> None:
    # rank 0 (not the last rank, not the one printed first by position alone) does 40 ms more
    folder = _torchrun(tmp_path / "run", "--slow-rank", "0", "--slow-ms", "40")
    report = analyze_path(folder, jobs=2)
    assert _straggler_rank(report) == 0
    cr = report.cross_rank
    assert cr is not None and cr.slowest_rank == 0 and cr.failed == ()
    assert sum(s.rank == 0 for s in cr.stragglers) >= len(cr.stragglers) - 1
    work = {w.rank: w for w in cr.ranks}
    # the fast rank spends the difference waiting in gloo collectives (CPU ones)
    assert work[1].wait_ms > work[0].wait_ms + 20
    assert report.analysis.table.meta.backend == "gloo"


@pytest.mark.slow
def test_crashed_rank_is_failed_and_the_waiting_rank_no_straggler(tmp_path: Path) -> None:
    # rank 1 raises inside step 3 (its trace is written on the way out, and ends there)
    folder = _torchrun(tmp_path / "run", "--crash-rank", "1", "--crash-step", "3", ok=False)
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.json", "rank1.json"]
    report = analyze_path(folder, jobs=2)
    cr = report.cross_rank
    assert cr is not None and [f.rank for f in cr.failed] == [1]
    assert _straggler_rank(report) is None
    assert report.verdict.startswith("1 rank(s) failed (rank 1")
    assert report.ranks[0].status == "ok" and report.ranks[1].status.startswith("failed")


@pytest.mark.slow
def test_rank_that_died_without_a_trace_is_failed(tmp_path: Path) -> None:
    folder = _torchrun(tmp_path / "run", "--crash-rank", "1", "--crash-hard", ok=False)
    assert [p.name for p in folder.iterdir()] == ["rank0.json"]
    report = analyze_path(folder, jobs=1)
    cr = report.cross_rank
    assert cr is not None and [(f.rank, f.reason[:8]) for f in cr.failed] == [(1, "no trace")]
    assert _straggler_rank(report) is None
