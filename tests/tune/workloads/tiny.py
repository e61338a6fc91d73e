"""A tiny workload for the tune tests: seconds per trial, misbehaving on request.

TD_TUNE_TEST_MODE picks a failure (oom, nan, crash, hang, error), applied when the trial's
configuration matches TD_TUNE_TEST_WHEN (``knob=value``; every trial when unset).
TD_TUNE_TEST_LOG names a file that gets one line per configuration built (a trial process builds
its candidate first, then the arms it is compared with), tagged with the process id.
"""

import os
import signal
import time

import torch
from torch import nn

import torchdoctor as td
from torchdoctor.tune import Workload


def _matches(config) -> bool:
    when = os.environ.get("TD_TUNE_TEST_WHEN")
    if not when:
        return True
    name, value = when.split("=")
    return str(getattr(config, name)) == value


def _misbehave(config) -> None:
    mode = os.environ.get("TD_TUNE_TEST_MODE", "")
    if not mode or not _matches(config):
        return
    if mode == "oom":
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB")
    if mode == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if mode == "hang":
        time.sleep(3600)
    if mode == "error":
        raise ValueError("the workload broke")


@td.workload
def build(config):
    log = os.environ.get("TD_TUNE_TEST_LOG")
    if log:
        with open(log, "a") as f:
            f.write(
                f"{os.getpid()} {config.num_workers} {config.optimizer_impl} "
                f"{config.grad_accumulation}\n"
            )
    _misbehave(config)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    x = torch.randn(256, 8)
    y = x.sum(dim=1, keepdim=True)
    nan = os.environ.get("TD_TUNE_TEST_MODE") == "nan" and _matches(config)

    def loss(model, batch):
        out = nn.functional.mse_loss(model(batch[0]), batch[1])
        return out * float("nan") if nan else out

    return Workload(
        model=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
        dataset=torch.utils.data.TensorDataset(x, y),
        loss=loss,
        batch_size=16,
    )
