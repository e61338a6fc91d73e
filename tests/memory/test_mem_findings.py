"""Findings that point at `torchdoctor memory`, and check's OOM step that runs the analysis."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

from tests.memory import synth
from torchdoctor.capture import runner
from torchdoctor.memory.headline import snapshot_headline
from torchdoctor.rules.registry import spec
from torchdoctor.rules.run_rules import run_findings


def _record(**parts: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "exit": {"status": "error", "code": 1},
        "steps": {
            "count": 3,
            "measured_steps": 0,
            "mean_step_ms": 20.0,
            "mean_data_wait_ms": 0.0,
            "step_ms": [20.0] * 3,
        },
        "compile": {"compiles": 0, "recompiles": 0, "graph_breaks": []},
        "config": {"dataloaders": [], "autocast": [], "grad_scalers": [], "optimizers": []},
        "syncs": {"host_syncs": [], "unpinned_non_blocking": [], "sync_debug": []},
        "gpu": None,
        "ops": None,
    }
    return {**base, **parts}


def test_memory_findings_link_the_command() -> None:
    for finding in ("memory-pressure", "memory-fragmentation", "out-of-memory"):
        assert "torchdoctor memory" in spec(finding).explanation, finding


def test_oom_finding_carries_the_snapshot_analysis(tmp_path: Path) -> None:
    headline = snapshot_headline(synth.fragmented_oom(tmp_path / "memory_snapshot.pickle"))
    oom = {"tried_bytes": 256 << 20, "allocated_bytes": 1 << 30, "memory_analysis": headline}
    (f,) = [f for f in run_findings(_record(oom=oom)) if f.id == "out-of-memory"]
    assert "OOM asking 256 MiB with 2 MiB free and 1 GiB cached but unallocated" in f.explanation
    assert f.where == ["model.py:41 (forward)"]


def test_unreadable_snapshot_gives_an_error_entry_not_an_exception(tmp_path: Path) -> None:
    bad = tmp_path / "memory_snapshot.pickle"
    bad.write_bytes(b"\x80\x04garbage")
    out = snapshot_headline(bad)
    assert "error" in out and out["text"].startswith("snapshot unreadable")


class OutOfMemoryError(RuntimeError):
    pass


def test_check_runs_the_analysis_on_the_oom_snapshot(tmp_path: Path) -> None:
    synth.fragmented_oom(tmp_path / "memory_snapshot.pickle")
    session = mock.Mock()
    session.folder = tmp_path
    session.rank.distributed = False
    session.profiler.export.return_value = None
    session.record.return_value = _record()
    outcome = runner.Outcome(
        "error", 1, OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB")
    )
    fake_oom = {"tried_bytes": 256 << 20, "snapshot_file": "memory_snapshot.pickle"}
    with mock.patch.object(runner, "_oom", autospec=True, return_value=fake_oom):
        rec = runner.finish_record(session, outcome, "train.py", [])
    analysis = rec["oom"]["memory_analysis"]
    assert analysis["command"] == f"torchdoctor memory {tmp_path / 'memory_snapshot.pickle'}"
    assert analysis["fixes"][0] == "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    (f,) = [f for f in rec["findings"] if f["id"] == "out-of-memory"]
    assert "torchdoctor memory" in f["explanation"]
