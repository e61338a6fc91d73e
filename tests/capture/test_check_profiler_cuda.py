"""The profiled window never starts the CUDA driver itself: a CPU-only script on a GPU machine
gets a CPU-only profiler, and ``torch.cuda.is_available()`` (which initialises the driver) is
not called. torch.cuda is faked from torch's own functions (tests/gpu_fakes.py)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu_fakes import install_fake_cuda
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.profiling import WindowProfiler


def test_window_on_a_gpu_machine_leaves_cuda_alone_when_the_script_did(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _state, mocks = install_fake_cuda(monkeypatch, initialized=False)
    prof = WindowProfiler(CheckOptions(warmup_steps=1, profile_steps=1))
    prof.start(0)
    try:
        torch.ones(4).sum()
        prof.step()
    finally:
        prof.stop()
    assert prof.with_cuda is False
    mocks["is_available"].assert_not_called()
