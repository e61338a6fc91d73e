"""The memory columns reach the record, and with ``--memory`` a device leak takes the
allocator's snapshot (capture/runner.py's ``_memory_steps``), with fakes for CUDA."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from torchdoctor.capture import runner
from torchdoctor.capture.step_memory import StepMemory
from torchdoctor.record.write import RunEnd

MIB = 2**20
SCHEDULE = {"clean": [4, 11], "profiled": [13, 16], "after": [17, 21]}


class _Memory(StepMemory):
    def __init__(self, cuda: list[int]) -> None:
        super().__init__()
        self.cuda_bytes.extend(cuda)
        self.rss_bytes.extend([300 * MIB] * len(cuda))


def _session(tmp_path: Path, cuda: list[int], history: bool) -> Any:
    log = SimpleNamespace(memory=_Memory(cuda))
    return SimpleNamespace(
        clock=SimpleNamespace(log=log),
        memory_history=history,
        folder=tmp_path,
        snapshot_file="memory_snapshot.pickle",
    )


def _record() -> dict[str, Any]:
    return {"steps": {"schedule": SCHEDULE}, "gpu": {"memory": {"total_bytes": 80 * 2**30}}}


def _measure(session: Any, record: dict[str, Any]) -> dict[str, Any]:
    """The ``memory_steps`` section ``_memory_steps`` builds, the record left as it is."""
    before = repr(record)
    measured: list[dict[str, Any]] = []
    runner._memory_steps(session, record, RunEnd(None), measured)
    assert repr(record) == before
    return measured[-1]


@pytest.fixture
def snapshots(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    taken: list[Path] = []
    from torchdoctor.capture import gpu_probe
    from torchdoctor.memory import headline

    def write(cuda: Any, path: Path) -> dict[str, Any]:
        taken.append(path)
        return {}

    monkeypatch.setattr(gpu_probe, "write_snapshot", write)
    monkeypatch.setattr(
        headline,
        "snapshot_headline",
        lambda path: {"top_holders": [{"where": "train.py:9 forward", "bytes": 64 * MIB}]},
    )
    return taken


def test_a_device_leak_under_memory_takes_the_snapshot(
    tmp_path: Path, snapshots: list[Path]
) -> None:
    record = _record()
    leak = [100 * MIB + 8 * MIB * i for i in range(24)]
    m = _measure(_session(tmp_path, leak, history=True), record)
    assert m["cuda_allocated_bytes"] == leak and m["device_total_bytes"] == 80 * 2**30
    assert snapshots == [tmp_path / "memory_snapshot.pickle"]
    assert m["snapshot"]["top_holders"][0]["where"] == "train.py:9 forward"


def test_no_snapshot_without_a_leak_or_without_memory(
    tmp_path: Path, snapshots: list[Path]
) -> None:
    flat = [100 * MIB] * 24
    m = _measure(_session(tmp_path, flat, history=True), _record())
    assert m["rss_bytes"] == [300 * MIB] * 24
    leak = [100 * MIB + 8 * MIB * i for i in range(24)]
    m = _measure(_session(tmp_path, leak, history=False), _record())
    assert snapshots == [] and "snapshot" not in m and m["cuda_allocated_bytes"] == leak


def test_a_failing_snapshot_keeps_the_steps_measured_before_it(
    tmp_path: Path, snapshots: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchdoctor.memory import headline

    def broken(path: Path) -> dict[str, Any]:
        raise OSError("unreadable")

    monkeypatch.setattr(headline, "snapshot_headline", broken)
    measured: list[dict[str, Any]] = []
    leak = [100 * MIB + 8 * MIB * i for i in range(24)]
    with pytest.raises(OSError):
        runner._memory_steps(
            _session(tmp_path, leak, history=True), _record(), RunEnd(None), measured
        )
    assert measured[-1]["cuda_allocated_bytes"] == leak
    assert measured[-1]["snapshot_file"] == "memory_snapshot.pickle"
    assert "snapshot" not in measured[-1]
