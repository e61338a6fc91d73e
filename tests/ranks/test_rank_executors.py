"""The same per-rank tasks in this process, in a local pool, and on a Dask cluster: one answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import corpus_file
from tests.ranks.rank_synth import write_job
from torchdoctor.commands.analyze.executors import (
    DaskExecutor,
    LocalPool,
    SerialExecutor,
    make_executor,
)
from torchdoctor.commands.analyze.trace import analyze_path
from torchdoctor.report.serialize import report_dict


def _job(folder: Path) -> Path:
    write_job(folder, [[1000.0, 1400.0, 1000.0, 2600.0], [1200.0, 1000.0, 1000.0, 2500.0]] * 2)
    return folder


def _comparable(path: Path, **kw: Any) -> dict[str, Any]:
    """The JSON report minus the line saying how many workers ran it."""
    d = json.loads(json.dumps(report_dict(analyze_path(path, **kw)), default=str))
    d["notes"] = [n.split(", analysed by")[0] for n in d["notes"]]
    return d


def test_pool_of_two_equals_one_process(tmp_path: Path) -> None:
    folder = _job(tmp_path)
    serial = _comparable(folder, jobs=1)
    assert serial == _comparable(folder, jobs=2)
    assert serial["cross_rank"]["slowest_rank"] == 3


@pytest.mark.slow
def test_local_dask_cluster_equals_local_run(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    # real traces (ranks 3 and 1 of two jobs), so the tasks ship real summaries and the detail
    # rank's real table back from the cluster
    (tmp_path / "a.json.gz").symlink_to(corpus_file("a100_recsys_train_rank3"))
    (tmp_path / "b.json.gz").symlink_to(corpus_file("v100_recsys_train_rank1"))
    local = _comparable(tmp_path, jobs=2)
    assert local["cross_rank"]["slowest_rank"] == 1
    assert _comparable(tmp_path, jobs=2, dask=True) == local


def test_executor_choice() -> None:
    assert isinstance(make_executor(4, None, False, tasks=1), SerialExecutor)
    assert isinstance(make_executor(1, None, False, tasks=9), SerialExecutor)
    pool = make_executor(3, None, False, tasks=9)
    try:
        assert isinstance(pool, LocalPool) and pool.workers == 3
    finally:
        pool.close()
    pool = make_executor(8, None, False, tasks=2)  # never more workers than ranks
    try:
        assert pool.workers == 2
    finally:
        pool.close()


@pytest.mark.slow
def test_default_path_never_imports_dask(tmp_path: Path) -> None:
    folder = _job(tmp_path)
    code = (
        "import sys; from torchdoctor.commands.analyze.trace import analyze_path; "
        f"analyze_path({str(folder)!r}, jobs=2); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_unreachable_scheduler_is_one_line_and_exit_2(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    folder = _job(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "torchdoctor",
        "analyze",
        str(folder),
        "--scheduler",
        "tcp://127.0.0.1:9",
    ]
    # Dask's own connect timeout, 1 s instead of the command's 10 s: nothing listens there.
    env = {**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "1s"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert proc.stderr.startswith("torchdoctor: error: cannot reach the Dask scheduler")
    assert "after 1 s" in proc.stderr  # Dask waited the timeout the environment set
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stdout == ""


def test_dask_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if not installed
    from torchdoctor.errors import UserError

    with pytest.raises(UserError, match=r"pip install 'torchdoctor\[dask\]'"):
        DaskExecutor(None, 1)


@pytest.mark.slow
def test_a_task_returns_a_summary_not_the_trace() -> None:
    import pickle

    from torchdoctor.commands.analyze.ranks import summarize_file

    trace = corpus_file("v100_ddp_compiled_rank1")  # 54 MB of JSON, 216k events
    outcome = summarize_file(str(trace))
    assert outcome.summary is not None and outcome.summary.n_steps == 5
    sent = len(pickle.dumps(outcome))
    assert sent < 200_000  # about 58 kB: what crosses the process boundary, per rank
    assert len(outcome.summary.collectives) > 0 and outcome.summary.findings
