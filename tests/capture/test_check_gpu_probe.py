"""CUDA-only collection on fakes built from the real ``torch.cuda`` and ``pynvml`` (see
tests/gpu_fakes.py): a name or signature the libraries lack fails here as it would on a GPU."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.gpu_fakes import GIB, FakeDevice, NvmlAnswers, fake_pynvml, install_fake_cuda
from torchdoctor.capture import gpu_probe

STATS = {
    "allocated_bytes.all.current": 10 * GIB,
    "allocated_bytes.all.peak": 30 * GIB,
    "reserved_bytes.all.current": 40 * GIB,
    "reserved_bytes.all.peak": 60 * GIB,
    "num_alloc_retries": 2,
    "num_ooms": 1,
}
TORCH_DIR = os.path.dirname(torch.__file__)
OUR_DIR = os.path.dirname(gpu_probe.__file__)
USER_FRAMES = [
    {"filename": f"{TORCH_DIR}/nn/functional.py", "line": 1},
    {"filename": f"{OUR_DIR}/session.py", "line": 9},
    {"filename": "/home/me/torch/train.py", "line": 42},  # a user's project folder named torch
]
SNAPSHOT = {
    "segments": [
        {
            "blocks": [
                {"state": "active_allocated", "size": 8 * GIB, "frames": USER_FRAMES},
                {"state": "inactive", "size": 20 * GIB},
                {"state": "active_allocated", "size": GIB},
            ]
        }
    ]
}
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB of "
    "which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory in "
    "use. Of the allocated memory 75.00 GiB is allocated by PyTorch, and 2.50 GiB is reserved by "
    "PyTorch but unallocated."
)


class OutOfMemoryError(RuntimeError):
    pass


@pytest.fixture
def two_gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """cuda:0 idle, cuda:1 (current, as rank 1 under torchrun) holding the memory."""
    devices = [FakeDevice(stats={"num_ooms": 0}), FakeDevice(stats=STATS, nvml_index=1)]
    state, mocks = install_fake_cuda(monkeypatch, devices, current=1)
    state.snapshot = SNAPSHOT
    return state, mocks


def test_memory_record_reads_the_current_device(two_gpus: Any) -> None:
    mem = gpu_probe.memory_record(torch.cuda, torch.cuda.current_device())
    assert mem["peak_allocated_bytes"] == 30 * GIB and mem["alloc_retries"] == 2
    assert mem["fragmentation"] == 0.5 and mem["total_bytes"] == 80 * GIB
    # the default is the current device too (torch's None), never device 0
    assert gpu_probe.memory_record(torch.cuda)["ooms"] == 1


def test_device_record(two_gpus: Any) -> None:
    dev = gpu_probe.device_record(torch.cuda, 1)
    assert dev == {
        "name": "NVIDIA H100 80GB HBM3",
        "capability": "9.0",
        "bf16_tensor_cores": True,
        "tf32_capable": True,
        "count": 2,
    }


def test_parse_oom_message() -> None:
    got = gpu_probe.parse_oom_message(OOM_MESSAGE)
    assert got["tried_bytes"] == 2 * GIB
    assert got["allocated_bytes"] == 75 * GIB
    assert got["reserved_unallocated_bytes"] == int(2.5 * GIB)
    assert got["free_bytes"] == int(1.23 * GIB)
    assert gpu_probe.oom_device(OOM_MESSAGE) == 1
    assert gpu_probe.is_oom(OutOfMemoryError(OOM_MESSAGE))
    assert not gpu_probe.is_oom(ValueError("shape mismatch"))


def test_oom_record_uses_the_device_the_message_names(
    two_gpus: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    state, _mocks = two_gpus
    state.current = 0  # the script switched devices; the message still says GPU 1
    rec = gpu_probe.oom_record(torch.cuda, OutOfMemoryError(OOM_MESSAGE), tmp_path)
    assert rec["device"] == 1 and rec["memory"]["ooms"] == 1
    assert "device ID 1" in (tmp_path / "memory_summary.txt").read_text()
    snap = pickle.loads((tmp_path / "memory_snapshot.pickle").read_bytes())
    assert len(snap["segments"][0]["blocks"]) == 3
    assert rec["largest_blocks"] == [
        {"bytes": 8 * GIB, "where": "/home/me/torch/train.py:42"},
        {"bytes": GIB, "where": ""},
    ]
    assert rec["tried_bytes"] == 2 * GIB and "collect_error" not in rec


def test_oom_record_keeps_partial_evidence(two_gpus: Any, tmp_path: Path) -> None:
    _state, mocks = two_gpus
    mocks["memory_summary"].side_effect = RuntimeError("driver")
    rec = gpu_probe.oom_record(torch.cuda, OutOfMemoryError(OOM_MESSAGE), tmp_path)
    assert rec["memory"]["ooms"] == 1 and "driver" in rec["collect_error"]


def test_user_frame_skips_cpp_cpython_and_library_frames() -> None:
    # What a stacks="all" snapshot holds: C++ and interpreter frames first, then Python.
    frames = [
        {"filename": "??", "line": 0, "name": "0x7f01"},
        {"filename": "/opt/conda/include/c10/cuda/CUDACachingAllocator.cpp", "line": 9},
        {"filename": "Python/ceval.c", "line": 4000},
        {"filename": f"{TORCH_DIR}/nn/modules/linear.py", "line": 125},
        {"filename": f"{os.path.dirname(OUR_DIR)}/runtime/module.py", "line": 50},
        {"filename": "<frozen runpy>", "line": 1},
        {"filename": "/work/model.py", "line": 77},
        {"filename": "/work/train.py", "line": 12},
    ]
    assert gpu_probe.user_frame(frames) == "/work/model.py:77"
    assert gpu_probe.user_frame(frames[:6]) == ""


@pytest.mark.parametrize(
    "user_file",
    ["/home/me/torch/train.py", "/srv/torchdoctor/experiments/run.py", "/data/torch/x/torch/m.py"],
)
def test_user_frame_keeps_user_folders_named_like_the_libraries(user_file: str) -> None:
    # Only the installed packages are library code, not any folder called torch or torchdoctor.
    frames = [
        {"filename": f"{TORCH_DIR}/_tensor.py", "line": 3},
        {"filename": user_file, "line": 5},
    ]
    assert gpu_probe.user_frame(frames) == f"{user_file}:5"


class TestOomWatch:
    def test_snapshot_taken_at_a_caught_oom(self, two_gpus: Any, tmp_path: Path) -> None:
        state, mocks = two_gpus
        watch = gpu_probe.OomWatch(torch.cuda, tmp_path, gpu_probe.snapshot_name(3))
        assert gpu_probe.attach_oom_watch(torch._C, watch)
        assert len(state.observers) == 1
        state.raise_oom(1, 2 * GIB, free_bytes=GIB)  # the allocator's four arguments
        assert (tmp_path / "memory_snapshot_rank3.pickle").exists()
        rec = watch.record()
        assert rec["observed_ooms"] == 1 and rec["snapshot_at"] == "oom observer"
        assert rec["observed"] == [
            {
                "device": 1,
                "tried_bytes": 2 * GIB,
                "device_limit_bytes": state.devices[1].total_bytes,  # not what is allocated
                "device_free_bytes": GIB,
            }
        ]
        assert rec["largest_blocks"][0]["where"] == "/home/me/torch/train.py:42"
        # a later crash keeps the snapshot taken at the OOM instead of taking another
        mocks["_snapshot"].reset_mock()
        out = gpu_probe.oom_record(
            torch.cuda, OutOfMemoryError(OOM_MESSAGE), tmp_path, observed=watch
        )
        assert out["snapshot_file"] == "memory_snapshot_rank3.pickle"
        mocks["_snapshot"].assert_not_called()

    def test_retries_snapshot_a_few_times_then_only_count(
        self, two_gpus: Any, tmp_path: Path
    ) -> None:
        _state, mocks = two_gpus
        watch = gpu_probe.OomWatch(torch.cuda, tmp_path)
        for _ in range(10):
            watch(0, GIB, 0, 0)
        assert watch.count == 10 and mocks["_snapshot"].call_count == watch.max_snapshots
        watch.close()
        watch(0, GIB, 0, 0)  # torch cannot detach an observer: after close it does nothing
        assert watch.count == 10

    def test_snapshot_failure_never_raises(self, two_gpus: Any, tmp_path: Path) -> None:
        _state, mocks = two_gpus
        mocks["_snapshot"].side_effect = RuntimeError("no history")
        watch = gpu_probe.OomWatch(torch.cuda, tmp_path)
        watch(0, GIB, 0, 0)
        assert watch.snapshot_file is None and "no history" in watch.record()["observer_error"]

    def test_torch_without_the_hook(self, tmp_path: Path) -> None:
        watch = gpu_probe.OomWatch(torch.cuda, tmp_path)
        assert not gpu_probe.attach_oom_watch(object(), watch)


# -- NVML ------------------------------------------------------------------------------------


def _sample(sampler: gpu_probe.NvmlSampler, answers: NvmlAnswers) -> dict[str, Any]:
    sampler.start()
    deadline = time.monotonic() + 5.0
    while answers.calls < 4 and sampler.error is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return sampler.stop()


def test_nvml_samples_the_device_found_by_bus_id() -> None:
    devices = [FakeDevice(nvml_index=0, pci_bus=0x1A), FakeDevice(nvml_index=1, pci_bus=0x3B)]
    answers = NvmlAnswers(devices)
    nvml = fake_pynvml(answers)
    sampler = gpu_probe.NvmlSampler(nvml, index=0, interval_s=0.005, pci_bus_id="00000000:3B:00.0")
    out = _sample(sampler, answers)
    assert out["error"] is None and out["samples"] >= 4
    assert out["gpu_util_max_pct"] == 60 and 40 <= out["gpu_util_mean_pct"] <= 60
    nvml.nvmlDeviceGetHandleByPciBusId.assert_called_once_with("00000000:3B:00.0")
    handle = nvml.nvmlDeviceGetUtilizationRates.call_args.args[0]
    assert handle is devices[1]
    nvml.nvmlDeviceGetHandleByIndex.assert_not_called()


def test_nvml_by_uuid_when_torch_has_no_bus_id(monkeypatch: pytest.MonkeyPatch) -> None:
    # CUDA_VISIBLE_DEVICES=2: CUDA's device 0 is NVML's index 2. torch without PCI fields.
    visible = FakeDevice(nvml_index=2)
    _state, _ = install_fake_cuda(monkeypatch, [visible])
    props = visible.properties()
    del props.pci_bus_id
    monkeypatch.setattr(visible, "properties", lambda: props)
    answers = NvmlAnswers([FakeDevice(nvml_index=0), FakeDevice(nvml_index=1), visible])
    nvml = fake_pynvml(answers)
    sampler = gpu_probe.nvml_sampler(nvml, torch.cuda, 0, 0.005, visible="2")
    assert sampler.pci_bus_id is None
    out = _sample(sampler, answers)
    assert out["error"] is None
    nvml.nvmlDeviceGetHandleByUUID.assert_called_once_with(visible.nvml_uuid)
    assert nvml.nvmlDeviceGetUtilizationRates.call_args.args[0] is visible


def test_nvml_mig_uuid(monkeypatch: pytest.MonkeyPatch) -> None:
    slice_ = FakeDevice(name="NVIDIA A100-SXM4-40GB MIG 1g.5gb", mig=True)
    install_fake_cuda(monkeypatch, [slice_])
    assert gpu_probe.nvml_uuids(torch.cuda, 0) == (f"GPU-{slice_.uuid}", slice_.nvml_uuid)
    parent = FakeDevice(name="NVIDIA A100-SXM4-40GB", pci_bus=slice_.pci_bus)  # same bus id
    answers = NvmlAnswers([parent, slice_])
    nvml = fake_pynvml(answers)
    sampler = gpu_probe.nvml_sampler(nvml, torch.cuda, 0, 0.005, None)
    _sample(sampler, answers)
    nvml.nvmlDeviceGetHandleByPciBusId.assert_not_called()
    assert nvml.nvmlDeviceGetUtilizationRates.call_args.args[0] is slice_


@pytest.mark.parametrize(
    ("ordinal", "visible", "want"),
    [(0, None, 0), (1, "", 1), (0, "3,1", 3), (1, "3,1", 1), (0, "GPU-8b7e", 0), (2, "3,1", 2)],
)
def test_nvml_index_follows_cuda_visible_devices(ordinal: int, visible: str, want: int) -> None:
    assert gpu_probe.nvml_index(ordinal, visible) == want


def test_nvml_failure_is_recorded_not_raised() -> None:
    answers = NvmlAnswers([FakeDevice()], fail_init=True)
    sampler = gpu_probe.NvmlSampler(fake_pynvml(answers))
    sampler.start()
    out = sampler.stop()
    assert out["samples"] == 0 and "NVML Shared Library Not Found" in out["error"]


def test_nvml_unknown_device_is_recorded() -> None:
    answers = NvmlAnswers([FakeDevice(nvml_index=0, pci_bus=0x1A)])
    sampler = gpu_probe.NvmlSampler(fake_pynvml(answers), index=7, pci_bus_id="00000000:99:00.0")
    sampler.start()
    out = sampler.stop()
    assert out["samples"] == 0 and out["error"] == "NVMLError_NotFound: Not Found"


def test_pci_bus_id_format(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_cuda(monkeypatch, [FakeDevice(pci_bus=0x3B)])
    assert gpu_probe.pci_bus_id(torch.cuda, 0) == "00000000:3B:00.0"
