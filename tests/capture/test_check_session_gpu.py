"""The CUDA side of a watched window, on a machine without a GPU: torch.cuda's queries and NVML
are autospecs of the real modules (tests/gpu_fakes.py), and the session must start and stop
every probe in order, on the script's current device, without initialising CUDA itself."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
import torch

from tests.gpu_fakes import GIB, FakeDevice, NvmlAnswers, fake_pynvml, install_fake_cuda
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.runner import finish_record
from torchdoctor.capture.session import Session
from torchdoctor.rules.run_rules import run_findings

STATS = {"allocated_bytes.all.peak": 30 * GIB, "reserved_bytes.all.peak": 60 * GIB}


class FakeProfiler:
    calls: ClassVar[list[str]] = []

    def __init__(self, options: CheckOptions) -> None:
        self.active_steps = 0

    def start(self, warmup: int) -> None:
        self.calls.append("start")

    def step(self) -> None:
        self.active_steps += 1

    def stop(self) -> None:
        self.calls.append("stop")

    def abort(self) -> None:
        self.calls.append("abort")

    def export(self, path: Path) -> None:
        return None

    def op_summary(self) -> dict[str, Any]:
        return {"gemm_share": 0.7, "gemm_share_basis": "device"}


class FakeKernelProfiler:
    """The kernel window's CUDA-only profiler: two kernels a step, one overlapping the other."""

    calls: ClassVar[list[str]] = []

    def start(self) -> None:
        self.calls.append("start")

    def stop(self, steps: int) -> dict[str, Any]:
        from torchdoctor.capture.kernel_window import summarise

        self.calls.append(f"stop {steps}")
        events = []
        for i in range(steps):
            t = 1000.0 * i
            events.append({"ph": "X", "cat": "kernel", "name": "gemm", "ts": t, "dur": 300.0})
            events.append({"ph": "X", "cat": "kernel", "name": "add", "ts": t + 200, "dur": 200.0})
        return summarise(events, steps)

    def abort(self) -> None:
        self.calls.append("abort")


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    # Rank 1 of a torchrun job on cuda:1, which NVML numbers 5 (CUDA_VISIBLE_DEVICES=4,5).
    devices = [
        FakeDevice(stats={"num_alloc_retries": 0}, nvml_index=4, pci_bus=0x1A),
        FakeDevice(stats={**STATS, "num_alloc_retries": 2}, nvml_index=5, pci_bus=0x3B),
    ]
    state, mocks = install_fake_cuda(monkeypatch, devices, current=1)
    answers = NvmlAnswers(devices)
    nvml = fake_pynvml(answers)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    FakeProfiler.calls = []
    FakeKernelProfiler.calls = []
    monkeypatch.setattr("torchdoctor.capture.session.WindowProfiler", FakeProfiler)
    monkeypatch.setattr("torchdoctor.capture.session.KernelProfiler", FakeKernelProfiler)
    return SimpleNamespace(state=state, mocks=mocks, nvml=nvml, devices=devices)


def _train(steps: int) -> None:
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()


def test_window_runs_every_cuda_probe(fake_gpu: Any, tmp_path: Path) -> None:
    opts = CheckOptions(warmup_steps=2, profile_steps=2, full=True, profile_memory=True)
    session = Session(opts, tmp_path, RankInfo())
    session.install()
    history = fake_gpu.mocks["_record_memory_history"]
    history.assert_not_called()  # not before the script ran: that would initialise CUDA
    try:
        _train(6)
        history.assert_not_called()  # nothing armed during the clean steps (3-10)
        assert fake_gpu.mocks["set_sync_debug_mode"].call_args_list == []
        _train(6)  # the profiler's step 11, profiled step 12
        assert fake_gpu.mocks["set_sync_debug_mode"].call_args_list == []  # not with the profiler
        _train(12)
    finally:
        session.uninstall()
    # --memory from the window's start, Python stacks only (C++ symbolisation takes minutes)
    history.assert_called_once_with(max_entries=200_000, stacks="python")
    fake_gpu.mocks["attach_oom"].assert_called_once()
    assert [c.args for c in fake_gpu.mocks["set_sync_debug_mode"].call_args_list] == [
        ("warn",),
        (0,),
    ]
    assert FakeProfiler.calls[0] == "start" and "stop" in FakeProfiler.calls
    rec = session.record({"status": "completed", "code": 0, "exception": None}, "t.py", [])
    session.stop_memory_history()
    assert history.call_args.kwargs == {"enabled": None}
    gpu = rec["gpu"]
    # the current device (cuda:1), not device 0
    fake_gpu.mocks["memory_stats"].assert_called_with(1)
    assert gpu["memory"]["alloc_retries"] == 2 and gpu["device"]["count"] == 2
    assert gpu["nvml"]["error"] is None and gpu["nvml"]["samples"] >= 1
    # the NVML sampler and the GPM counters over the clean steps both read cuda:1's GPU
    calls = fake_gpu.nvml.nvmlDeviceGetHandleByPciBusId.call_args_list
    assert [c.args for c in calls] == [("00000000:3B:00.0",)] * 2
    assert isinstance(gpu["gpm"], dict) and "supported" in gpu["gpm"]
    # the clean steps and the ones after the instruments, timed by CUDA events
    steps = rec["steps"]
    assert steps["clean"]["clock"] == "cuda-events" and steps["clean"]["steps"] == 8
    assert len(steps["clean"]["host_lead_ms"]) == 8 and steps["after"]["steps"] == 5
    # the kernel window (14-16: CUDA activity only, timed by events), sync-debug mode in
    # untimed steps of its own (17-19), then the after window (20-24)
    sched = steps["schedule"]
    assert sched["kernels"] == [14, 16] and FakeKernelProfiler.calls == ["start", "stop 3"]
    kernels = steps["kernels"]
    assert kernels["clock"] == "cuda-events" and kernels["steps"] == 3
    # two kernels overlapping by 100 us: 400 us busy, 500 us of kernel time per step
    assert kernels["gpu"]["gpu_busy_ms_per_step"] == pytest.approx(0.4)
    assert kernels["gpu"]["kernel_ms_per_step"] == pytest.approx(0.5)
    assert sched["sync_debug"] == [17, 19] and rec["syncs"]["sync_debug_steps"] == 3
    assert sched["after"] == [20, 24] and steps["after"]["first_step"] == 20
    # each instrument only in its own window (the switchboard's record)
    armed = {w["window"]: w["armed"] for w in sched["instruments"]}
    assert armed["clean"] == ["step events", "GPU counters"]
    assert armed["kernels"] == ["kernel profiler", "step events"]
    assert armed["sync-debug"] == ["sync-debug mode"] and armed["after"] == ["step events"]
    assert "profiler" in armed["profiled"] and "sync-debug mode" not in armed["profiled"]
    # fp32 training, GEMM-heavy, on an sm90 device with TF32 off: the precision finding, and
    # the allocator retries as fragmentation
    found = {f.id for f in run_findings(rec)}
    assert {"fp32-on-bf16-gpu", "memory-fragmentation"} <= found


def test_no_memory_recording_when_the_script_never_used_cuda(
    fake_gpu: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    opts = CheckOptions(warmup_steps=1, profile_steps=1, full=True, profile_memory=True)
    session = Session(opts, tmp_path, RankInfo())
    session.install()
    try:
        _train(4)
    finally:
        session.uninstall()
    fake_gpu.mocks["_record_memory_history"].assert_not_called()
    fake_gpu.mocks["attach_oom"].assert_not_called()
    fake_gpu.mocks["is_available"].assert_not_called()  # it would start the CUDA driver


def test_oom_the_script_caught_is_recorded_with_its_snapshot(fake_gpu: Any, tmp_path: Path) -> None:
    opts = CheckOptions(
        warmup_steps=1, profile_steps=1, clean_steps=0, full=True, profile_memory=True
    )
    rank = RankInfo(rank=1, local_rank=1, world_size=2)
    session = Session(opts, tmp_path, rank)
    session.install()
    try:
        _train(2)
        # the allocator calls the observer, the script catches the OOM and carries on
        (observer,) = fake_gpu.state.observers
        fake_gpu.state.raise_oom(1, 4 * GIB, free_bytes=GIB)
        _train(2)
    finally:
        session.uninstall()
    outcome = SimpleNamespace(
        exception=None, to_dict=lambda: {"status": "completed", "code": 0, "exception": None}
    )
    rec = finish_record(session, outcome, "t.py", [])
    seen = rec["gpu"]["oom_observer"]
    assert seen["observed_ooms"] == 1 and seen["observed"][0]["tried_bytes"] == 4 * GIB
    assert seen["observed"][0]["device_limit_bytes"] == 80 * GIB  # cuda:1's total memory
    assert seen["snapshot_file"] == "memory_snapshot_rank1.pickle"
    assert (tmp_path / "memory_snapshot_rank1.pickle").exists() and "oom" not in rec
    observer(1, GIB, 0, 0)  # after the run the observer (torch cannot detach it) does nothing
    assert session.oom_watch is not None and session.oom_watch.count == 1


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
    assert session.step_times().count == 2


def test_a_rank_on_cuda_local_rank_without_set_device_reports_its_own_gpu(
    fake_gpu: Any, tmp_path: Path
) -> None:
    # Rank 1 moved its model to cuda:1 but never called set_device: the current device is 0.
    fake_gpu.state.current = 0
    opts = CheckOptions(warmup_steps=1, profile_steps=1, clean_steps=0, full=True)
    session = Session(opts, tmp_path, RankInfo(rank=1, local_rank=1, world_size=2))
    session.install()
    try:
        _train(4)
    finally:
        session.uninstall()
    rec = session.record({"status": "completed", "code": 0, "exception": None}, "t.py", [])
    # cuda:1's allocator statistics and NVML handle, not device 0's
    assert rec["gpu"]["memory"]["alloc_retries"] == 2
    assert rec["gpu"]["memory"]["peak_allocated_bytes"] == 30 * GIB
    fake_gpu.nvml.nvmlDeviceGetHandleByPciBusId.assert_called_once_with("00000000:3B:00.0")


def test_rank_zero_and_single_processes_keep_the_current_device(
    fake_gpu: Any, tmp_path: Path
) -> None:
    from torchdoctor.capture import gpu_probe

    assert gpu_probe.script_device(torch.cuda, 0) == 1  # current (cuda:1) wins for local rank 0
    fake_gpu.state.current = 0
    assert gpu_probe.script_device(torch.cuda, 0) == 0
    assert gpu_probe.script_device(torch.cuda, 7) == 0  # no such device: the current one
