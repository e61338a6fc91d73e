"""The session hands its ``gpu`` section over as the record's ``GpuInfo``: each probe's part
(the GPM counters, NVML's samples, the allocator's statistics, the device) under its key in one
order, and only the parts taken; ``null`` on a run that never used CUDA."""

from __future__ import annotations

from pathlib import Path

from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.session import Session
from torchdoctor.record.run import GpuInfo
from torchdoctor.record.typed import recorded


def test_the_session_hands_over_its_gpu_section_as_gpu_info(tmp_path: Path) -> None:
    session = Session(CheckOptions(), tmp_path, RankInfo())
    assert session._gpu_record() is None  # a run that never used CUDA: "gpu": null
    # a window reopened after the memory was read: the probes' parts in another order
    session.gpu.update(memory={"alloc_retries": 2}, device={"name": "H100"})
    session.gpu.update(nvml={"samples": 3}, gpm={"supported": False})
    gpu = session._gpu_record()
    assert isinstance(gpu, GpuInfo) and gpu.name == "H100"
    assert list(recorded(gpu)) == ["gpm", "nvml", "memory", "device"]
    session.gpu.pop("gpm")
    assert recorded(session._gpu_record()) == {
        "nvml": {"samples": 3},
        "memory": {"alloc_retries": 2},
        "device": {"name": "H100"},
    }
