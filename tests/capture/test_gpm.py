"""GPM counters over a window (capture/gpm.py) against a fake NVML: ``create_autospec`` of the
installed pynvml (tests/gpu_fakes.py) whose GPM functions answer from ``GpmAnswers``, with
nvidia-ml-py's own constants, ctypes structures and exception classes."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import pynvml
import pytest

from tests.gpu_fakes import FakeDevice, NvmlAnswers, fake_pynvml, install_fake_cuda
from torchdoctor.capture import gpm

VALUES = {
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": 41.2,
    "NVML_GPM_METRIC_DRAM_BW_UTIL": 63.0,
    "NVML_GPM_METRIC_FP32_UTIL": 2.4,
    "NVML_GPM_METRIC_FP16_UTIL": 7.0,
    "NVML_GPM_METRIC_SM_UTIL": 88.0,
    "NVML_GPM_METRIC_SM_OCCUPANCY": 35.5,
}
"""Distinct values, so a metric read into the wrong key shows."""

GPM_FUNCTIONS = (
    "nvmlGpmQueryDeviceSupport",
    "nvmlGpmSampleAlloc",
    "nvmlGpmSampleGet",
    "nvmlGpmMetricsGet",
    "nvmlGpmSampleFree",
)


@dataclass
class GpmAnswers:
    """What the fake GPM answers, and what it saw."""

    supported: bool = True
    values: dict[str, float] = field(default_factory=lambda: dict(VALUES))
    returns: dict[str, int] = field(default_factory=dict)
    """Per metric constant: a return code other than success."""
    raises: dict[str, BaseException] = field(default_factory=dict)
    """Per function name: the exception it raises."""
    allocated: list[int] = field(default_factory=list)
    sampled: list[tuple[Any, int]] = field(default_factory=list)
    """(handle, sample address) in the order sampled."""
    freed: list[int] = field(default_factory=list)


def _address(sample: Any) -> int:
    return ctypes.addressof(sample.contents)


def fake_gpm(answers: GpmAnswers, devices: list[FakeDevice] | None = None) -> Any:
    nvml = fake_pynvml(NvmlAnswers(devices or [FakeDevice()]))
    # Constants and structures are the real ones: the code under test fills real ctypes fields.
    for name in dir(pynvml):
        if name.startswith("NVML_") and isinstance(getattr(pynvml, name), int):
            setattr(nvml, name, getattr(pynvml, name))
    for name in ("c_nvmlGpmMetricsGet_t", "c_nvmlGpmSample_t", "c_nvmlGpmSupport_t"):
        setattr(nvml, name, getattr(pynvml, name))
    ids = {getattr(pynvml, name): name for name in VALUES}
    keep: list[Any] = []  # the structs the fake samples point at stay alive

    def guard(name: str) -> None:
        if name in answers.raises:
            raise answers.raises[name]

    def support(handle: Any) -> Any:
        guard("nvmlGpmQueryDeviceSupport")
        return pynvml.c_nvmlGpmSupport_t(version=1, isSupportedDevice=int(answers.supported))

    def alloc() -> Any:
        guard("nvmlGpmSampleAlloc")
        keep.append(pynvml.struct_c_nvmlGpmSample_t())
        sample = pynvml.c_nvmlGpmSample_t(keep[-1])
        answers.allocated.append(_address(sample))
        return sample

    def sample_get(handle: Any, sample: Any) -> Any:
        guard("nvmlGpmSampleGet")
        answers.sampled.append((handle, _address(sample)))
        return sample

    def metrics_get(request: Any) -> Any:
        guard("nvmlGpmMetricsGet")
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        order = [address for _, address in answers.sampled]
        # NVML computes sample2 minus sample1: both must be taken, the first one first.
        assert order.index(_address(request.sample1)) < order.index(_address(request.sample2))
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            name = ids[metric.metricId]
            metric.nvmlReturn = answers.returns.get(name, pynvml.NVML_SUCCESS)
            metric.value = answers.values[name]
        return request

    def free(sample: Any) -> None:
        answers.freed.append(_address(sample))
        guard("nvmlGpmSampleFree")

    nvml.nvmlGpmQueryDeviceSupport.side_effect = support
    nvml.nvmlGpmSampleAlloc.side_effect = alloc
    nvml.nvmlGpmSampleGet.side_effect = sample_get
    nvml.nvmlGpmMetricsGet.side_effect = metrics_get
    nvml.nvmlGpmSampleFree.side_effect = free
    return nvml


def clock(*times: float) -> Any:
    it = iter(times)
    return lambda: next(it)


def test_supported_window_reads_each_metric_into_its_key() -> None:
    answers = GpmAnswers()
    device = FakeDevice()
    window = gpm.GpmWindow(fake_gpm(answers), device, clock=clock(10.0, 12.5))
    window.start()
    assert len(answers.sampled) == 1
    record = window.stop()
    assert record["supported"] is True
    assert record["metrics"] == {
        "tensor_util_pct": 41.2,
        "dram_bw_util_pct": 63.0,
        "fp32_util_pct": 2.4,
        "fp16_util_pct": 7.0,
        "sm_util_pct": 88.0,
        "sm_occupancy_pct": 35.5,
    }
    assert record["seconds"] == pytest.approx(2.5)
    assert record["error"] is None
    # Both samples came from this device, and both were freed.
    assert [handle for handle, _ in answers.sampled] == [device, device]
    assert sorted(answers.freed) == sorted(answers.allocated)
    assert len(answers.allocated) == 2


def test_unsupported_device_takes_no_sample() -> None:
    answers = GpmAnswers(supported=False)
    window = gpm.GpmWindow(fake_gpm(answers), FakeDevice(name="NVIDIA A100"))
    window.start()
    record = window.stop()
    assert record["supported"] is False
    assert record["metrics"] == {}
    assert record["seconds"] is None
    assert "no GPM counters" in record["error"]
    assert answers.allocated == [] and answers.sampled == []


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (pynvml.NVML_ERROR_NO_PERMISSION, "NVMLError_NoPermission"),
        (pynvml.NVML_ERROR_NOT_SUPPORTED, "NVMLError_NotSupported"),
    ],
)
def test_vm_that_refuses_the_sample_is_not_supported(code: int, cls: str) -> None:
    answers = GpmAnswers(raises={"nvmlGpmSampleGet": pynvml.NVMLError(code)})
    window = gpm.GpmWindow(fake_gpm(answers), FakeDevice())
    window.start()
    record = window.stop()
    assert record["supported"] is False
    assert record["error"].startswith(cls + ": ")
    assert record["metrics"] == {}
    assert sorted(answers.freed) == sorted(answers.allocated) and len(answers.allocated) == 2


def test_a_metric_that_fails_is_left_out_and_named() -> None:
    answers = GpmAnswers(returns={"NVML_GPM_METRIC_FP16_UTIL": pynvml.NVML_ERROR_NOT_SUPPORTED})
    window = gpm.GpmWindow(fake_gpm(answers), FakeDevice())
    window.start()
    record = window.stop()
    assert record["supported"] is True
    assert "fp16_util_pct" not in record["metrics"]
    assert record["metrics"]["tensor_util_pct"] == 41.2
    assert record["metric_errors"] == {"fp16_util_pct": "Not Supported (NVML return 3)"}
    assert record["error"] == "fp16_util_pct: Not Supported (NVML return 3)"
    assert gpm.gpm_lines(record) == [
        "GPU counters over the clean steps (NVML GPM): tensor cores busy 41%, DRAM bandwidth 63%,"
        " FP32 pipes 2%, SM busy 88%, SM occupancy 36% (FP16 pipes: not read)"
    ]


@pytest.mark.parametrize("failing", GPM_FUNCTIONS)
def test_a_failure_at_any_call_is_recorded_and_samples_are_freed(failing: str) -> None:
    answers = GpmAnswers(raises={failing: pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)})
    window = gpm.GpmWindow(fake_gpm(answers), FakeDevice())
    window.start()
    record = window.stop()
    assert answers.freed == answers.allocated  # every allocated sample handed back
    if failing == "nvmlGpmSampleFree":  # the metrics were read before the frees
        assert record["error"] is None and len(record["metrics"]) == 6
        return
    assert record["error"] == "NVMLError_Unknown: Unknown Error"
    assert record["metrics"] == {}
    assert gpm.gpm_lines(record) == [
        "GPU counters: not available here (NVMLError_Unknown: Unknown Error)"
    ]


def test_nvml_raising_at_every_call_never_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_cuda(monkeypatch, [FakeDevice()])
    import torch

    boom = RuntimeError("driver gone")
    answers = GpmAnswers(raises=dict.fromkeys(GPM_FUNCTIONS, boom))
    nvml = fake_gpm(answers)
    for name in (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByIndex",
    ):
        getattr(nvml, name).side_effect = boom
    window = gpm.gpm_window(nvml, torch.cuda, 0, None)
    assert window is not None
    window.start()
    record = window.stop()
    assert record == {
        "supported": False,
        "metrics": {},
        "seconds": None,
        "error": "RuntimeError: driver gone",
        "metric_errors": {},
    }
    # NVML failed from the first call: the window asked nothing more of it.
    assert nvml.nvmlGpmQueryDeviceSupport.call_count == 0
    # A window that found NVML but no device, with every GPM call failing, is no different.
    nvml.nvmlInit.side_effect = None
    window = gpm.gpm_window(nvml, torch.cuda, 0, None)
    assert window is not None
    window.start()
    assert window.stop()["error"] == "RuntimeError: driver gone"
    direct = gpm.GpmWindow(nvml, FakeDevice())
    direct.start()
    record = direct.stop()
    assert record["supported"] is False and record["error"] == "RuntimeError: driver gone"
    assert direct.stop()["metrics"] == {}  # a second stop is harmless too


def test_gpm_window_samples_the_scripts_gpu_and_gives_nvml_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CUDA_VISIBLE_DEVICES=3,1: CUDA's device 1 is NVML's GPU 1, found by its bus id.
    devices = [
        FakeDevice(nvml_index=3, pci_bus=0x3B),
        FakeDevice(nvml_index=1, pci_bus=0x5E),
    ]
    install_fake_cuda(monkeypatch, devices)
    import torch

    answers = GpmAnswers()
    nvml = fake_gpm(answers, devices)
    window = gpm.gpm_window(nvml, torch.cuda, 1, "3,1")
    assert window is not None
    window.start()
    record = window.stop()
    assert record["supported"] is True
    assert [handle for handle, _ in answers.sampled] == [devices[1], devices[1]]
    assert nvml.nvmlInit.call_count == nvml.nvmlShutdown.call_count == 1


def test_gpm_window_without_pynvml_is_none() -> None:
    assert gpm.gpm_window(None, object(), 0, None) is None


def test_gpm_window_records_a_device_nvml_cannot_find(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_cuda(monkeypatch, [FakeDevice(nvml_index=0, pci_bus=0x3B)])
    import torch

    answers = GpmAnswers()
    nvml = fake_gpm(answers, [FakeDevice(nvml_index=5, pci_bus=0x99)])
    window = gpm.gpm_window(nvml, torch.cuda, 0, None)
    assert window is not None
    window.start()
    record = window.stop()
    assert record["supported"] is False
    assert record["error"] == "NVMLError_NotFound: Not Found"
    assert answers.sampled == []
    assert nvml.nvmlShutdown.call_count == 1


def test_gpm_lines() -> None:
    assert gpm.gpm_lines(None) == []
    assert gpm.gpm_lines({}) == []
    record = {
        "supported": True,
        "metrics": {
            "tensor_util_pct": 41.4,
            "dram_bw_util_pct": 62.6,
            "fp32_util_pct": 2.0,
            "fp16_util_pct": 0.0,
            "sm_util_pct": 88.0,
            "sm_occupancy_pct": 30.0,
        },
        "seconds": 3.0,
        "error": None,
    }
    assert gpm.gpm_lines(record) == [
        "GPU counters over the clean steps (NVML GPM): tensor cores busy 41%, DRAM bandwidth 63%,"
        " FP32 pipes 2%, FP16 pipes 0%, SM busy 88%, SM occupancy 30%"
    ]
    refused = gpm.unavailable("NVMLError_NoPermission: Insufficient Permissions")
    assert gpm.gpm_lines(refused) == [
        "GPU counters: not available here (NVMLError_NoPermission: Insufficient Permissions)"
    ]
    # Supported but nothing answered: no numbers to show, so the reason.
    empty = {"supported": True, "metrics": {}, "error": "sm_util_pct: Unknown Error"}
    assert gpm.gpm_lines(empty) == ["GPU counters: not available here (sm_util_pct: Unknown Error)"]
