"""The CUDA side of a watched window, on a machine without a GPU: torch.cuda's queries and
NVML are replaced by fakes, and the session must start and stop every probe in order."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.capture.test_check_gpu_probe import FakeCuda, FakeNvml
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.session import Session
from torchdoctor.rules.run_rules import run_findings


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    calls: dict[str, list[Any]] = {"sync_debug": [], "profiler": []}
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", calls["sync_debug"].append)
    for name in ("memory_stats", "get_device_properties", "get_device_capability"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(torch.cuda, "get_device_name", fake.get_device_name)
    monkeypatch.setattr(torch.cuda, "device_count", fake.device_count)
    nvml = types.ModuleType("pynvml")
    impl = FakeNvml()
    for name in dir(impl):
        if name.startswith("nvml"):
            setattr(nvml, name, getattr(impl, name))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)

    class FakeProfiler:
        def __init__(self, options: CheckOptions) -> None:
            self.active_steps = 0

        def start(self, warmup: int) -> None:
            calls["profiler"].append("start")

        def step(self) -> None:
            self.active_steps += 1

        def stop(self) -> None:
            calls["profiler"].append("stop")

        def abort(self) -> None:
            calls["profiler"].append("abort")

        def op_summary(self) -> dict[str, Any]:
            return {"gemm_share": 0.7, "gemm_share_basis": "device"}

    monkeypatch.setattr("torchdoctor.capture.session.WindowProfiler", FakeProfiler)
    calls["history"] = []
    monkeypatch.setattr(
        torch.cuda.memory,
        "_record_memory_history",
        lambda enabled="all", **kw: calls["history"].append(enabled),
    )
    return calls


def test_window_runs_every_cuda_probe(fake_gpu: dict[str, list[Any]], tmp_path: Path) -> None:
    opts = CheckOptions(warmup_steps=2, profile_steps=2, full=True, profile_memory=True)
    session = Session(opts, tmp_path, RankInfo())
    session.install()
    assert fake_gpu["history"] == ["all"]  # --memory: allocation stacks for an OOM snapshot
    try:
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            model(torch.ones(2, 4)).sum().backward()
            opt.step()
    finally:
        session.uninstall()
    assert fake_gpu["sync_debug"] == ["warn", 0]  # on for the window only
    assert fake_gpu["profiler"][0] == "start" and "stop" in fake_gpu["profiler"]
    rec = session.record({"status": "completed", "code": 0, "exception": None}, "t.py", [])
    session.stop_memory_history()
    assert fake_gpu["history"] == ["all", None]
    gpu = rec["gpu"]
    assert gpu["device"]["name"] == "NVIDIA H100" and gpu["memory"]["alloc_retries"] == 2
    assert gpu["nvml"]["error"] is None and gpu["nvml"]["samples"] >= 1
    # fp32 training, GEMM-heavy, on an sm90 device with TF32 off: both precision findings,
    # and the allocator retries as fragmentation
    torch.backends.cuda.matmul.allow_tf32 = False
    found = {f.id for f in run_findings(rec)}
    assert {"fp32-on-bf16-gpu", "memory-fragmentation"} <= found


def test_no_cuda_probe_on_a_cpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    calls: list[Any] = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", calls.append)
    session = Session(
        CheckOptions(warmup_steps=1, profile_steps=1, full=True), tmp_path, RankInfo()
    )
    session.install()
    try:
        session.clock.tick("marker")
        session.clock.tick("marker")
    finally:
        session.uninstall()
    assert calls == [] and session.gpu == {}
    assert SimpleNamespace(**session.steps_record()).count == 2
