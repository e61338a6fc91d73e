"""Honest fakes of NVML and ``torch.cuda`` for tests on machines without a GPU.

Every fake is built from the real module: ``pynvml`` is ``create_autospec`` of the installed
nvidia-ml-py module, and each ``torch.cuda`` function is ``create_autospec`` of torch's own, so
calling a name the library lacks raises AttributeError and a wrong signature raises TypeError,
exactly as on a GPU machine. Only the *answers* are invented: those of one or more devices
described by ``FakeDevice``. NVML errors are nvidia-ml-py's own exception classes and its
return values its own ctypes structures.
"""

from __future__ import annotations

import uuid as uuid_module
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml
import pytest
import torch

GIB = 2**30


class FakeUuid:
    """torch's ``_CUuuid``: ``str()`` gives the 16 bytes as 8-4-4-4-12 hex, without "GPU-"."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass
class FakeDevice:
    """One CUDA device as torch and NVML see it."""

    name: str = "NVIDIA H100 80GB HBM3"
    capability: tuple[int, int] = (9, 0)
    total_bytes: int = 80 * GIB
    sms: int = 132
    nvml_index: int = 0
    """Where NVML numbers it (all GPUs), which differs from the CUDA ordinal under
    CUDA_VISIBLE_DEVICES."""
    pci_bus: int = 0x3B
    uuid: str = field(default_factory=lambda: str(uuid_module.uuid4()))
    mig: bool = False
    stats: dict[str, int] = field(default_factory=dict)
    """memory_stats() answers."""

    @property
    def nvml_uuid(self) -> str:
        return ("MIG-" if self.mig else "GPU-") + self.uuid

    @property
    def bus_id(self) -> str:
        return f"00000000:{self.pci_bus:02X}:00.0"

    def properties(self) -> Any:
        """A ``_CudaDeviceProperties`` stand-in with the fields torch 2.13 defines."""
        return SimpleNamespace(
            name=self.name,
            major=self.capability[0],
            minor=self.capability[1],
            multi_processor_count=self.sms,
            total_memory=self.total_bytes,
            uuid=FakeUuid(self.uuid),
            pci_bus_id=self.pci_bus,
            pci_device_id=0,
            pci_domain_id=0,
            L2_cache_size=50 * 2**20,
        )


def _spec(real: Any, impl: Any) -> Any:
    return mock.create_autospec(real, side_effect=impl)


class FakeCudaState:
    """What the fake ``torch.cuda`` saw: sync-debug modes set, memory-history calls, streams."""

    def __init__(self, devices: list[FakeDevice], current: int) -> None:
        self.devices = devices
        self.current = current
        self.sync_mode = 0
        self.observers: list[Any] = []
        self.snapshot: dict[str, Any] = {"segments": [], "device_traces": []}

    def index(self, device: Any = None) -> int:
        if device is None:
            return self.current
        if isinstance(device, torch.device):
            return self.current if device.index is None else device.index
        if isinstance(device, str):
            return self.index(torch.device(device))
        return int(device)

    def device(self, device: Any = None) -> FakeDevice:
        return self.devices[self.index(device)]

    def raise_oom(self, device: int, alloc_bytes: int, free_bytes: int = 0) -> None:
        """Call the OOM observers as torch's caching allocator does before it raises: device,
        requested bytes, the memory the process may use (the device's total when no
        per-process fraction is set: not what is allocated) and the driver's free bytes."""
        for observer in list(self.observers):
            observer(device, alloc_bytes, self.devices[device].total_bytes, free_bytes)

    def set_sync_debug_mode(self, mode: int | str) -> None:
        self.sync_mode = {"default": 0, "warn": 1, "error": 2}.get(mode, mode)  # type: ignore[call-overload]


class FakeCudaEvent:
    """``torch.cuda.Event`` of a GPU that finishes work the moment it is queued: an event
    completes when recorded (``perf_counter``), so its times are the host's."""

    def __init__(self, enable_timing: bool = False, **kwargs: Any) -> None:
        self.ns: int | None = None

    def record(self, stream: Any = None) -> None:
        import time

        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return self.ns is not None

    def elapsed_time(self, end: FakeCudaEvent) -> float:
        assert self.ns is not None and end.ns is not None, "event not recorded"
        return (end.ns - self.ns) / 1e6


def install_fake_cuda(
    monkeypatch: pytest.MonkeyPatch,
    devices: list[FakeDevice] | None = None,
    current: int = 0,
    initialized: bool = True,
) -> tuple[FakeCudaState, dict[str, mock.Mock]]:
    """Replace torch.cuda's queries by autospecs of torch's own functions answering for
    ``devices``; returns the state and the mocks (for call assertions)."""
    state = FakeCudaState(devices or [FakeDevice()], current)
    cuda = torch.cuda
    impls: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: initialized,
        "current_device": lambda: state.current,
        "device_count": lambda: len(state.devices),
        "get_device_name": lambda device=None: state.device(device).name,
        "get_device_capability": lambda device=None: state.device(device).capability,
        "get_device_properties": lambda device=None: state.device(device).properties(),
        "memory_stats": lambda device=None: dict(state.device(device).stats),
        "memory_summary": lambda device=None, abbreviated=False: (
            f"|  PyTorch CUDA memory summary, device ID {state.index(device)}  |"
        ),
        "set_sync_debug_mode": state.set_sync_debug_mode,
        "get_sync_debug_mode": lambda: state.sync_mode,
        "is_bf16_supported": lambda including_emulation=True: (
            state.device().capability >= (8, 0) or including_emulation
        ),
    }
    mocks: dict[str, mock.Mock] = {}
    for name, impl in impls.items():
        mocks[name] = _spec(getattr(cuda, name), impl)
        monkeypatch.setattr(cuda, name, mocks[name])
    memory_impls: dict[str, Any] = {
        "_record_memory_history": lambda *a, **kw: None,
        "_snapshot": lambda device=None, augment_with_fx_traces=False: state.snapshot,
    }
    for name, impl in memory_impls.items():
        mocks[name] = _spec(getattr(cuda.memory, name), impl)
        monkeypatch.setattr(cuda.memory, name, mocks[name])

    def attach(observer: Any) -> None:  # torch._C's binding takes one callable
        state.observers.append(observer)

    mocks["synchronize"] = _spec(cuda.synchronize, lambda device=None: None)
    monkeypatch.setattr(cuda, "synchronize", mocks["synchronize"])
    monkeypatch.setattr(cuda, "Event", FakeCudaEvent)
    mocks["attach_oom"] = mock.Mock(side_effect=attach)
    monkeypatch.setattr(
        torch._C, "_cuda_attach_out_of_memory_observer", mocks["attach_oom"], raising=False
    )
    return state, mocks


@dataclass
class NvmlAnswers:
    """What the fake NVML library knows and answers."""

    devices: list[FakeDevice]
    util_pct: tuple[int, ...] = (40, 60)
    fail_init: bool = False
    calls: int = 0


def fake_pynvml(answers: NvmlAnswers) -> Any:
    """``create_autospec`` of the installed pynvml, answering for ``answers.devices``."""
    nvml = mock.create_autospec(pynvml)
    # The exception classes are the real ones: code catches them by type.
    for name in dir(pynvml):
        obj = getattr(pynvml, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            setattr(nvml, name, obj)

    def init() -> None:
        if answers.fail_init:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def find(key: str, attr: str) -> FakeDevice:
        for dev in answers.devices:
            if getattr(dev, attr) == key:
                return dev
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def util(handle: FakeDevice) -> Any:
        answers.calls += 1
        pct = answers.util_pct[answers.calls % len(answers.util_pct)]
        return pynvml.c_nvmlUtilization_t(gpu=pct, memory=0)

    def memory(handle: FakeDevice, version: Any = None) -> Any:
        used = answers.calls * GIB
        return pynvml.c_nvmlMemory_t(total=handle.total_bytes, free=0, used=used)

    nvml.nvmlInit.side_effect = init
    nvml.nvmlDeviceGetHandleByPciBusId.side_effect = lambda bus: find(bus, "bus_id")
    nvml.nvmlDeviceGetHandleByUUID.side_effect = lambda uuid: find(uuid, "nvml_uuid")
    nvml.nvmlDeviceGetHandleByIndex.side_effect = lambda i: find(i, "nvml_index")
    nvml.nvmlDeviceGetUtilizationRates.side_effect = util
    nvml.nvmlDeviceGetMemoryInfo.side_effect = memory
    return nvml
