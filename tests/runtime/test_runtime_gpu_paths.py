"""GPU paths of the runtime without a GPU: the GradScaler skip flag across devices, CUDA events
on the meter's own device, and MFU on a MIG slice. torch.cuda is faked from torch's own
functions (tests/gpu_fakes.py)."""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar
from unittest import mock

import pytest
import torch
from tests.gpu_fakes import FakeDevice, install_fake_cuda

from torchdoctor.runtime.meter import Meter
from torchdoctor.runtime.precision import any_found_inf


def test_skip_flags_on_two_devices_reduce_without_raising() -> None:
    # A model split over two devices in one process: one found_inf flag per device. "meta"
    # stands in for the second GPU: mixing devices raises exactly as cuda:0 + cuda:1 does.
    flags = [torch.zeros(1, device="meta"), torch.ones(1)]
    with pytest.raises(RuntimeError, match="device"):
        sum(flags)  # what the runtime did
    out = any_found_inf(flags)
    assert out.device.type == "meta" and out.shape == ()


@pytest.mark.parametrize(
    ("values", "skipped"), [([0.0], 0.0), ([1.0], 1.0), ([1.0, 1.0], 1.0), ([0.0, 1.0], 1.0)]
)
def test_one_skipped_step_counts_once(values: list[float], skipped: float) -> None:
    assert any_found_inf([torch.tensor([v]) for v in values]).item() == skipped


class FakeEvent:
    """``torch.cuda.Event`` by its real signature; elapsed_time from a counter."""

    recorded: ClassVar[list[Any]] = []

    def __init__(self, enable_timing: bool = False, blocking: bool = False) -> None:
        self.t = len(FakeEvent.recorded)

    def record(self, stream: Any = None) -> None:
        FakeEvent.recorded.append(stream)

    def synchronize(self) -> None: ...

    def elapsed_time(self, end: Any) -> float:
        return 10.0 * (end.t - self.t)


def test_meter_records_events_on_its_own_device(monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake_cuda(monkeypatch, [FakeDevice(), FakeDevice()], current=0)
    streams = {0: object(), 1: object()}
    current_stream = mock.create_autospec(
        torch.cuda.current_stream, side_effect=lambda device=None: streams[device.index]
    )
    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    event_cls = mock.create_autospec(torch.cuda.Event, side_effect=FakeEvent)
    monkeypatch.setattr(torch.cuda, "Event", event_cls)
    FakeEvent.recorded = []
    meter = Meter(torch.device("cuda", 1))  # Runtime(device="cuda:1") outside DDP
    for _ in range(3):
        meter.step_end()
    assert FakeEvent.recorded and all(s is streams[1] for s in FakeEvent.recorded)
    assert meter.summary().timing == "cuda events"


@pytest.mark.parametrize(
    ("sms", "want_tflops"), [(14, 312 * 14 / 108), (98, 312 * 98 / 108), (None, None)]
)
def test_meter_mfu_on_a_mig_slice(
    monkeypatch: pytest.MonkeyPatch, sms: int | None, want_tflops: float | None
) -> None:
    name = "NVIDIA A100-SXM4-40GB MIG 1g.5gb"
    install_fake_cuda(monkeypatch, [FakeDevice(name=name, capability=(8, 0), sms=sms or 0)])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    meter = Meter(torch.device("cuda", 0), peak_dtype="bf16", flops_per_step=1e12, use_events=False)
    for _ in range(3):
        meter.step_end()
    with pytest.warns(RuntimeWarning) if sms is None else contextlib.nullcontext():
        s = meter.summary()
    if want_tflops is None:
        assert s.peak_flops is None and s.mfu is None  # never the whole A100's peak
    else:
        assert s.peak_flops == pytest.approx(want_tflops * 1e12)
