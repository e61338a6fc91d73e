"""CUDA-only collection, exercised with fake ``torch.cuda`` and ``pynvml`` modules."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from torchdoctor.capture import gpu_probe

GIB = 2**30


class FakeCuda:
    """Enough of ``torch.cuda`` for the probes: an 80 GiB sm90 device."""

    def __init__(self) -> None:
        self.memory = SimpleNamespace(_snapshot=self._snapshot)

    def memory_stats(self, device: int = 0) -> dict[str, int]:
        return {
            "allocated_bytes.all.current": 10 * GIB,
            "allocated_bytes.all.peak": 30 * GIB,
            "reserved_bytes.all.current": 40 * GIB,
            "reserved_bytes.all.peak": 60 * GIB,
            "num_alloc_retries": 2,
            "num_ooms": 1,
        }

    def get_device_properties(self, device: int = 0) -> Any:
        return SimpleNamespace(total_memory=80 * GIB)

    def get_device_capability(self, device: int = 0) -> tuple[int, int]:
        return (9, 0)

    def get_device_name(self, device: int = 0) -> str:
        return "NVIDIA H100"

    def device_count(self) -> int:
        return 1

    def memory_summary(self, device: int = 0) -> str:
        return "|  PyTorch CUDA memory summary  |"

    def _snapshot(self) -> dict[str, Any]:
        frames = [
            {"filename": "/x/torch/nn/functional.py", "line": 1},
            {"filename": "train.py", "line": 42},
        ]
        return {
            "segments": [
                {
                    "blocks": [
                        {"state": "active_allocated", "size": 8 * GIB, "frames": frames},
                        {"state": "inactive", "size": 20 * GIB},
                        {"state": "active_allocated", "size": GIB},
                    ]
                }
            ]
        }


OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of "
    "which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in "
    "use. Of the allocated memory 75.00 GiB is allocated by PyTorch, and 2.50 GiB is reserved by "
    "PyTorch but unallocated."
)


class OutOfMemoryError(RuntimeError):
    pass


def test_memory_record_and_fragmentation() -> None:
    mem = gpu_probe.memory_record(FakeCuda())
    assert mem["peak_allocated_bytes"] == 30 * GIB and mem["alloc_retries"] == 2
    assert mem["fragmentation"] == 0.5 and mem["total_bytes"] == 80 * GIB


def test_device_record() -> None:
    dev = gpu_probe.device_record(FakeCuda())
    assert dev == {
        "name": "NVIDIA H100",
        "capability": "9.0",
        "bf16_tensor_cores": True,
        "tf32_capable": True,
        "count": 1,
    }


def test_parse_oom_message() -> None:
    got = gpu_probe.parse_oom_message(OOM_MESSAGE)
    assert got["tried_bytes"] == 2 * GIB
    assert got["allocated_bytes"] == 75 * GIB
    assert got["reserved_unallocated_bytes"] == int(2.5 * GIB)
    assert got["free_bytes"] == int(1.23 * GIB)
    assert gpu_probe.is_oom(OutOfMemoryError(OOM_MESSAGE))
    assert not gpu_probe.is_oom(ValueError("shape mismatch"))


def test_oom_record_writes_summary_and_snapshot(tmp_path: Path) -> None:
    rec = gpu_probe.oom_record(FakeCuda(), OutOfMemoryError(OOM_MESSAGE), tmp_path)
    assert (tmp_path / "memory_summary.txt").read_text().startswith("|  PyTorch")
    snap = pickle.loads((tmp_path / "memory_snapshot.pickle").read_bytes())
    assert len(snap["segments"][0]["blocks"]) == 3
    assert rec["largest_blocks"] == [
        {"bytes": 8 * GIB, "where": "train.py:42"},  # first frame outside torch
        {"bytes": GIB, "where": ""},
    ]
    assert rec["tried_bytes"] == 2 * GIB and "collect_error" not in rec


def test_oom_record_keeps_partial_evidence(tmp_path: Path) -> None:
    cuda = FakeCuda()
    cuda.memory_summary = lambda device=0: (_ for _ in ()).throw(RuntimeError("driver"))  # type: ignore[method-assign]
    rec = gpu_probe.oom_record(cuda, OutOfMemoryError(OOM_MESSAGE), tmp_path)
    assert rec["memory"]["ooms"] == 1 and "driver" in rec["collect_error"]


class FakeNvml:
    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.calls = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        self.calls += 1
        return SimpleNamespace(gpu=40 + 20 * (self.calls % 2))

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return SimpleNamespace(used=self.calls * GIB)


def test_nvml_sampler_samples_in_background() -> None:
    nvml = FakeNvml()
    sampler = gpu_probe.NvmlSampler(nvml, index=0, interval_s=0.005)
    sampler.start()
    deadline = time.monotonic() + 2.0
    while nvml.calls < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    out = sampler.stop()
    assert out["samples"] >= 4 and out["gpu_util_max_pct"] == 60
    assert 40 <= out["gpu_util_mean_pct"] <= 60 and out["mem_used_peak_bytes"] >= 4 * GIB
    assert out["error"] is None


def test_nvml_failure_is_recorded_not_raised() -> None:
    sampler = gpu_probe.NvmlSampler(FakeNvml(fail_init=True))
    sampler.start()
    out = sampler.stop()
    assert out["samples"] == 0 and "NVML" in out["error"]


def test_nvml_handle_by_pci_bus_id() -> None:
    nvml = FakeNvml()
    seen: list[str] = []
    nvml.nvmlDeviceGetHandleByPciBusId_v2 = lambda bus: seen.append(bus) or "gpu-by-bus"  # type: ignore[attr-defined]
    props = SimpleNamespace(total_memory=GIB, pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    cuda = SimpleNamespace(get_device_properties=lambda device: props)
    bus = gpu_probe.pci_bus_id(cuda, 0)
    assert bus == "00000000:3B:00.0"
    sampler = gpu_probe.NvmlSampler(nvml, index=5, interval_s=0.01, pci_bus_id=bus)
    sampler.start()
    sampler.stop()
    assert seen == ["00000000:3B:00.0"]
    old = SimpleNamespace(get_device_properties=lambda device: SimpleNamespace(total_memory=GIB))
    assert gpu_probe.pci_bus_id(old, 0) is None
