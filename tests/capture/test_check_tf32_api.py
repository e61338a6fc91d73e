"""TF32 settings through torch's new ``fp32_precision`` API, the legacy flags, and both mixed.

With torch >= 2.9, once a script sets ``torch.backends.cuda.matmul.fp32_precision`` (or
``torch.backends.fp32_precision``), *reading* the legacy ``allow_tf32`` or the float32 matmul
precision raises RuntimeError. The probe must read the new setting first and never raise."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.gpu_fakes import FakeDevice, NvmlAnswers, fake_pynvml, install_fake_cuda
from torchdoctor.capture.config_probe import backend_flags
from torchdoctor.capture.options import CheckOptions
from torchdoctor.capture.runfolder import RankInfo
from torchdoctor.capture.session import Session

NEW_API = hasattr(torch.backends, "fp32_precision")
needs_new_api = pytest.mark.skipif(not NEW_API, reason="torch < 2.9 has no fp32_precision API")


@pytest.fixture
def restore_precision() -> Iterator[None]:
    # torch's TF32 state is global and later tests read it. The legacy setters write the legacy
    # value and the new per-backend one alike, so they leave a state both APIs agree on.
    precision = torch.get_float32_matmul_precision()
    cudnn = torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32 = cudnn


# Scenarios that set the new API run in a fresh interpreter: torch's defaults are known there,
# and the mixed state they leave (on purpose) cannot leak into other tests.
NEW_MATMUL = """
import json, torch
from torchdoctor.capture.config_probe import backend_flags
out = {"default": backend_flags()}
torch.backends.cuda.matmul.fp32_precision = "tf32"
try:
    torch.backends.cuda.matmul.allow_tf32
    out["legacy_read_raises"] = False
except RuntimeError:
    out["legacy_read_raises"] = True
out["tf32"] = backend_flags()
torch.backends.cuda.matmul.fp32_precision = "ieee"
torch.backends.cudnn.conv.fp32_precision = "ieee"
out["ieee"] = backend_flags()
print(json.dumps(out))
"""
NEW_GENERIC = """
import json, torch
from torchdoctor.capture.config_probe import backend_flags
torch.backends.fp32_precision = "tf32"  # every backend inherits it...
out = {"inherited": backend_flags()}
try:
    torch.get_float32_matmul_precision()
    out["legacy_read_raises"] = False
except RuntimeError:
    out["legacy_read_raises"] = True
torch.backends.cuda.matmul.fp32_precision = "ieee"  # ...unless set for the backend
out["specific"] = backend_flags()
print(json.dumps(out))
"""


def _fresh(code: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    result: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return result


@pytest.mark.slow
@needs_new_api
def test_new_matmul_api_does_not_raise() -> None:
    out = _fresh(NEW_MATMUL)
    assert out["default"]["tf32_matmul"] is False and out["default"]["tf32_conv"] is True
    assert out["legacy_read_raises"]  # what made the old probe crash
    flags = out["tf32"]
    assert flags["tf32_matmul"] is True and flags["cuda_matmul_fp32_precision"] == "tf32"
    assert flags["cuda_matmul_allow_tf32"] is None  # unreadable, not guessed
    assert out["ieee"]["tf32_matmul"] is False and out["ieee"]["tf32_conv"] is False


@pytest.mark.slow
@needs_new_api
def test_generic_setting_is_inherited_and_a_specific_one_wins() -> None:
    out = _fresh(NEW_GENERIC)
    assert out["legacy_read_raises"]
    assert out["inherited"]["tf32_matmul"] is True
    assert out["inherited"]["float32_matmul_precision"] is None
    assert out["specific"]["tf32_matmul"] is False


@pytest.mark.usefixtures("restore_precision")
def test_legacy_switches() -> None:
    torch.set_float32_matmul_precision("high")
    assert backend_flags()["tf32_matmul"] is True
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    flags = backend_flags()
    assert flags["tf32_matmul"] is False and flags["tf32_conv"] is False


def test_torch_without_the_new_api(monkeypatch: pytest.MonkeyPatch) -> None:
    # torch 2.5-2.8: no fp32_precision anywhere, only the legacy flags.
    monkeypatch.setattr(torch.backends.cuda, "matmul", SimpleNamespace(allow_tf32=True))
    monkeypatch.setattr(torch.backends.cudnn, "conv", SimpleNamespace(), raising=False)
    flags = backend_flags()
    assert flags["cuda_matmul_fp32_precision"] is None and flags["tf32_matmul"] is True


@needs_new_api
@pytest.mark.usefixtures("restore_precision")
def test_window_still_starts_every_probe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state, mocks = install_fake_cuda(monkeypatch, [FakeDevice()])
    answers = NvmlAnswers(state.devices)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(answers))

    class Profiler:
        active_steps = 0

        def __init__(self, options: Any) -> None: ...
        def start(self, warmup: int) -> None: ...
        def step(self) -> None: ...
        def stop(self) -> None: ...
        def abort(self) -> None: ...
        def op_summary(self) -> None: ...

    monkeypatch.setattr("torchdoctor.capture.session.WindowProfiler", Profiler)
    session = Session(
        CheckOptions(warmup_steps=1, profile_steps=2, clean_steps=0, full=True),
        tmp_path,
        RankInfo(),
    )
    session.install()
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # the script's first line
    try:
        for _ in range(5):
            session.clock.tick("marker")
    finally:
        session.uninstall()
    rec = session.record({"status": "completed", "code": 0, "exception": None}, "t.py", [])
    assert rec["config"]["backend_flags"]["tf32_matmul"] is True
    assert mocks["set_sync_debug_mode"].call_count == 2  # on and off: the window got that far
    assert rec["gpu"]["nvml"]["error"] is None and rec["gpu"]["nvml"]["samples"] >= 1


SCRIPT = """
import torch

torch.backends.fp32_precision = "tf32"  # the generic switch, set before anything else
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(30):
    loss = model(torch.randn(8, 16)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.slow
@needs_new_api
def test_check_of_a_script_using_the_new_api(tmp_path: Path) -> None:
    # End to end, in a fresh process: the record is complete, not an internal-error stub.
    from tests.capture.check_helpers import check_subprocess

    script = tmp_path / "train_tf32.py"
    script.write_text(SCRIPT)
    run = check_subprocess(tmp_path / "out", script)
    assert run.code == 0 and "internal error" not in run.stderr, run.stderr
    record = run.run
    assert "error" not in record and record["steps"]["measured_steps"] >= 3
    assert record["config"]["backend_flags"]["tf32_matmul"] is True
