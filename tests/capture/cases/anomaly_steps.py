"""Anomaly detection left on (check measures it by switching it off for a few extra steps).

``python anomaly_steps.py STEP_S [AFTER]``: each step sleeps ``STEP_S`` seconds. ``AFTER``
says what a step does once anomaly detection is off, i.e. inside check's extra steps:
``hang`` sleeps ten minutes (an experiment that never ends on its own), ``kill`` sends the
process SIGKILL (an experiment killed from outside)."""

import os
import signal
import sys
import time

import torch
from torch import nn


def main() -> None:
    step_s = float(sys.argv[1])
    after = sys.argv[2] if len(sys.argv) > 2 else ""
    torch.autograd.set_detect_anomaly(True)
    model = nn.Linear(16, 16)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(8, 16)
    for _ in range(400):
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(step_s)
        if not torch.is_anomaly_enabled():  # check switched it off: its extra steps run
            if after == "hang":
                time.sleep(600)
            elif after == "kill":
                os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
