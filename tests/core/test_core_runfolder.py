"""``torchdoctor analyze`` on a ``check`` run folder analyses its trace(s), not its JSON records."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.core.synth import annotation, launched, write_trace
from torchdoctor.cli import cli
from torchdoctor.commands.analyze.trace import analyze_path


def _trace(path: Path, rank: int) -> Path:
    ev = [annotation("ProfilerStep#1", 0, 1000), *launched("gemm", 10, 20, 500 + 100 * rank, 1)]
    return write_trace(path, ev, distributedInfo={"rank": rank, "world_size": 2})


def _records(folder: Path) -> None:
    (folder / "run.json").write_text(json.dumps({"schema": "torchdoctor.run", "steps": {}}))
    (folder / "report.json").write_text(json.dumps({"findings": []}))


def test_single_process_run_folder(tmp_path: Path) -> None:
    _records(tmp_path)
    _trace(tmp_path / "trace.json.gz", 0)
    r = analyze_path(tmp_path)
    assert r.analysis.table.meta.path.endswith("trace.json.gz")
    assert r.analysis.total.busy_ms["compute"] == pytest.approx(0.5)


def test_torchrun_run_folder_reads_the_rank_traces(tmp_path: Path) -> None:
    _records(tmp_path)
    (tmp_path / "ranks").mkdir()
    (tmp_path / "ranks" / "rank0.json").write_text("{}")
    (tmp_path / "traces").mkdir()
    for rank in (0, 1):
        _trace(tmp_path / "traces" / f"rank{rank}.json.gz", rank)
    r = analyze_path(tmp_path)
    assert [row.rank for row in r.ranks] == [0, 1]


def test_run_folder_without_trace_is_one_line_exit_2(tmp_path: Path) -> None:
    _records(tmp_path)
    result = CliRunner().invoke(cli, ["analyze", str(tmp_path)])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert "check run folder without a trace" in line


@pytest.mark.slow
def test_a_real_check_run_folder(shared_check: Callable[..., Any]) -> None:
    """``check`` on an example script, then ``analyze`` on the folder it wrote."""
    pytest.importorskip("torch")
    from tests.capture.check_helpers import EXAMPLES

    run = shared_check(EXAMPLES / "item_per_step.py")
    assert run.folder is not None, run.stderr
    result = CliRunner().invoke(cli, ["analyze", "--json", str(run.folder)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["breakdown"]["total"]["step_ms"] > 0
    assert Path(doc["source"]["path"]).name == "trace.json.gz"
