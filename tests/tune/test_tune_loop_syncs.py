"""The trial's real training loop (``worker._Loop.step``), not a fake: with gradient accumulation
its micro-batch losses stay on the device, so a step never reads a value back to the host (on a
GPU each read would wait for the queued kernels and time the window wrong).

Every tensor method that copies a value to the host is wrapped; a call made from torchdoctor's
own files during ``step()`` is a per-micro-batch sync. (On the GPU check, the same loop runs
under ``torch.cuda.set_sync_debug_mode("error")``.)"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import torchdoctor
from torchdoctor.config import RuntimeConfig
from torchdoctor.tune.worker import _Loop
from torchdoctor.tune.workload import Workload

OURS = str(Path(torchdoctor.__file__).parent) + os.sep
READS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")


@pytest.fixture
def host_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """(method, "file:line") of every host read called from torchdoctor's code."""
    seen: list[str] = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def wrapper(t: Any, *a: Any, _orig: Any = original, _name: str = name, **k: Any) -> Any:
            caller = sys._getframe(1)
            if caller.f_code.co_filename.startswith(OURS):
                seen.append(f"{_name} at {caller.f_code.co_filename}:{caller.f_lineno}")
            return _orig(t, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    yield seen


def _workload() -> Workload:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    x = torch.randn(64, 8)
    return Workload(
        model=model,
        optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3),
        dataset=torch.utils.data.TensorDataset(x, x[:, :1].sin()),
        loss=lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1]),
        batch_size=16,
    )


def test_an_accumulated_step_reads_nothing_back(host_reads: list[str]) -> None:
    loop = _Loop(RuntimeConfig(grad_accumulation=4, num_workers=0), _workload())
    assert loop.backend.name == "runtime"
    losses = [loop.step() for _ in range(3)]
    assert host_reads == []
    # The value the fidelity gate reads later, once per window: the mean of the 4 micro-losses.
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in losses)
    assert all(torch.isfinite(v) for v in losses)


def test_the_window_reads_the_losses_once(host_reads: list[str]) -> None:
    # The probe sees torchdoctor's reads: a window of 5 steps reads its losses back once, at the
    # end (rounds.py), after the window's one synchronisation.
    from torchdoctor.capture.config_probe import backend_flags
    from torchdoctor.tune.rounds import TrainingArm, WindowClock

    arm = TrainingArm(
        "candidate",
        _Loop(RuntimeConfig(grad_accumulation=4, num_workers=0), _workload()),
        backend_flags(),
    )
    arm.window(5, WindowClock(torch.device("cpu")))
    assert [r.split(" at ")[0] for r in host_reads] == ["cpu", "tolist"]
    assert all("rounds.py" in r for r in host_reads) and len(arm.losses) == 5
