"""Planted situation: a short fine-tuning script that runs 7 steps and exits with its own
status 3 (say, an early-stopping criterion). With the default window (5 warm-up + 5 measured
steps) only 2 steps are measured: the report must say so, suggest a window that fits, never
call the run healthy, and ``check`` must exit with 3."""

import sys

import torch
from torch import nn


def main() -> None:
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randn(32, 1)
    for _ in range(7):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    sys.exit(3)


if __name__ == "__main__":
    main()
